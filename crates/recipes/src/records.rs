//! How records are stored: JSON under the recipe's keys, decoded strictly — bytes this
//! crate did not write are refused, never taken for a state.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::RecipeError;
use crate::backend::{Entry, Mutation};

/// The record at `key` in `snapshot` (`None`: absent).
pub(crate) fn decode<T: DeserializeOwned>(
    snapshot: &BTreeMap<String, Entry>,
    key: &str,
) -> Result<Option<T>, RecipeError> {
    let Some(bytes) = snapshot.get(key).and_then(|e| e.value.as_ref()) else {
        return Ok(None);
    };
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| RecipeError::Malformed {
            key: key.to_string(),
            why: e.to_string(),
        })
}

/// A put of `record` at `key`.
pub(crate) fn put<T: Serialize>(key: &str, record: &T) -> Mutation {
    Mutation::Put(
        key.to_string(),
        serde_json::to_vec(record).expect("records serialize: plain data, string keys"),
    )
}
