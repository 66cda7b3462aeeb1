//! The versioned primitives (seed `000`), scoped to one entity group: a consistent
//! multi-key snapshot, a transaction whose asserts compare per-key versions, and
//! listing keys by prefix.
//!
//! Every key has a version that grows by exactly one with every write of it and is
//! never reused: deleting a key keeps its row with the version (a versioned
//! tombstone), so no later clean-up can reset the counter and let an old assert pass
//! again (the ABA case). A key never written has version 0.
//!
//! Rows: `group prefix ‖ 0xF8 FFFFFFFF ‖ escape(key)` (an object id the schema never
//! hands out), columns `version` (8 bytes big-endian) and `value` (absent when deleted).

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::{DataQuery, ReadMode};
use megastore_rowstore::ordered::{escape, unescape};
use megastore_rowstore::{KeyRange, Row, prefix_successor};
use megastore_schema::keyspace;
use megastore_types::EgId;
use megastore_types::limits::{KEY_BYTES_MAX, LimitError};

use crate::client::{Client, ClientError};
use crate::groups::require_untyped;
use crate::txn::{ATTEMPTS_MAX, Attempt, Transaction, retry_pause};

pub(crate) const VERSION: &[u8] = b"version";
pub(crate) const VALUE: &[u8] = b"value";

/// The version of a key never written.
pub const VERSION_MISSING: u64 = 0;

/// One key as a snapshot saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Vec<u8>,
    /// Its version ([`VERSION_MISSING`] if never written; a deleted key keeps its
    /// version).
    pub version: u64,
    /// Its value (`None`: absent — never written or deleted).
    pub value: Option<Vec<u8>>,
}

/// A condition of [`Client::versioned_txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assert {
    /// The key's version equals this.
    Version {
        /// The key.
        key: Vec<u8>,
        /// The version it must have.
        version: u64,
    },
    /// The key has no value (never written, or deleted).
    Absent {
        /// The key.
        key: Vec<u8>,
    },
    /// The key is a fence: it holds the highest fencing token any applied
    /// transaction carried (8 bytes big-endian; none yet counts as 0). The assert
    /// holds if `token` is not below it, and when the transaction applies the fence
    /// is raised to `token`. So once a holder with a higher token has written, a
    /// stale holder's transactions fail this assert (*fenced-writes*).
    Fence {
        /// The fence's key.
        key: Vec<u8>,
        /// The writer's fencing token (from [`Client::lock`]).
        token: u64,
    },
}

impl Assert {
    fn key(&self) -> &[u8] {
        match self {
            Assert::Version { key, .. } | Assert::Absent { key } | Assert::Fence { key, .. } => key,
        }
    }
}

/// The token a fence key holds (0 when it holds none).
pub fn fence_token(entry: &Entry) -> Result<u64, ClientError> {
    match &entry.value {
        None => Ok(0),
        Some(bytes) => Ok(u64::from_be_bytes(bytes.as_slice().try_into().map_err(
            |_| {
                ClientError::Corrupt(format!(
                    "key {} is used as a fence but does not hold an 8-byte token",
                    String::from_utf8_lossy(&entry.key)
                ))
            },
        )?)),
    }
}

/// A write of [`Client::versioned_txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Set the key's value.
    Put {
        /// The key.
        key: Vec<u8>,
        /// Its new value.
        value: Vec<u8>,
    },
    /// Remove the key's value (its version still moves on).
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

impl Mutation {
    fn key(&self) -> &[u8] {
        match self {
            Mutation::Put { key, .. } | Mutation::Delete { key } => key,
        }
    }
}

/// How a versioned transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnResult {
    /// Every assert held and every mutation was committed; the new versions.
    Applied {
        /// Key → its version after the transaction.
        versions: BTreeMap<Vec<u8>, u64>,
    },
    /// These asserts did not hold (in key order); nothing was written.
    AssertFailed {
        /// The keys whose asserts failed.
        keys: Vec<Vec<u8>>,
    },
}

/// Refuses an empty key or one over the size limit, naming it.
fn check_keys<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Result<(), ClientError> {
    for (i, key) in keys.enumerate() {
        keyspace::check_key(key)
            .map_err(|e| ClientError::InvalidArgument(format!("keys[{i}]: {e}")))?;
    }
    Ok(())
}

fn group_keys_prefix(eg: &EgId) -> Vec<u8> {
    let mut row = eg.0.clone();
    row.extend_from_slice(&keyspace::VERSIONED_KEYS_OBJECT);
    row
}

fn key_row(eg: &EgId, key: &[u8]) -> Vec<u8> {
    let mut row = group_keys_prefix(eg);
    row.extend_from_slice(&escape(key));
    row
}

/// The versioned key whose row is `row`, if it is one of `eg`'s.
pub(crate) fn key_of_row(eg: &EgId, row: &[u8]) -> Option<Vec<u8>> {
    let mut encoded = row.strip_prefix(group_keys_prefix(eg).as_slice())?;
    unescape(&mut encoded, false).ok()
}

/// A key's version cell.
pub(crate) fn parse_version(key: &[u8], bytes: &[u8]) -> Result<u64, ClientError> {
    Ok(u64::from_be_bytes(bytes.try_into().map_err(|_| {
        ClientError::Corrupt(format!(
            "key {} has a malformed version cell",
            String::from_utf8_lossy(key)
        ))
    })?))
}

/// The rows of `eg`'s versioned keys that start with `prefix`.
pub(crate) fn key_prefix_range(eg: &EgId, prefix: &[u8]) -> Result<KeyRange, ClientError> {
    require_untyped(eg)?;
    if prefix.len() > KEY_BYTES_MAX {
        return Err(ClientError::InvalidArgument(format!(
            "prefix: {}",
            LimitError::Key {
                found: prefix.len()
            }
        )));
    }
    let mut start = group_keys_prefix(eg);
    let mut escaped = escape(prefix);
    escaped.truncate(escaped.len() - 2); // without the terminator: a prefix of every longer key
    start.extend_from_slice(&escaped);
    let end = prefix_successor(&start);
    Ok(KeyRange { start, end })
}

fn entry_of(key: &[u8], row: Option<&Row>) -> Result<Entry, ClientError> {
    let Some(row) = row else {
        return Ok(Entry {
            key: key.to_vec(),
            version: VERSION_MISSING,
            value: None,
        });
    };
    let version = match row.value(VERSION) {
        Some(bytes) => parse_version(key, bytes)?,
        None => VERSION_MISSING,
    };
    Ok(Entry {
        key: key.to_vec(),
        version,
        value: row.value(VALUE).map(<[u8]>::to_vec),
    })
}

/// One attempt: check the asserts at the transaction's position, then stage the
/// writes (none when an assert failed).
async fn attempt(
    txn: &mut Transaction,
    eg: &EgId,
    asserts: &[Assert],
    mutations: &[Mutation],
) -> Result<TxnResult, ClientError> {
    let mut failed = BTreeSet::new();
    let mut raised_fences = Vec::new();
    for assert in asserts {
        let entry = read_entry(txn, eg, assert.key()).await?;
        let holds = match assert {
            Assert::Version { version, .. } => entry.version == *version,
            Assert::Absent { .. } => entry.value.is_none(),
            Assert::Fence { key, token } => {
                let fence = fence_token(&entry)?;
                if *token > fence {
                    raised_fences.push(Mutation::Put {
                        key: key.clone(),
                        value: token.to_be_bytes().to_vec(),
                    });
                }
                *token >= fence
            }
        };
        if !holds {
            failed.insert(assert.key().to_vec());
        }
    }
    if !failed.is_empty() {
        return Ok(TxnResult::AssertFailed {
            keys: failed.into_iter().collect(),
        });
    }
    let mut versions = BTreeMap::new();
    for mutation in raised_fences.iter().chain(mutations) {
        let key = mutation.key();
        let version = match versions.get(key) {
            Some(v) => *v,
            None => read_entry(txn, eg, key).await?.version,
        };
        let next = version + 1;
        let row = key_row(eg, key);
        txn.set_row(&row, VERSION, &next.to_be_bytes());
        match mutation {
            Mutation::Put { value, .. } => txn.set_row(&row, VALUE, value),
            Mutation::Delete { .. } => txn.delete_row(&row, VALUE),
        }
        versions.insert(key.to_vec(), next);
    }
    Ok(TxnResult::Applied { versions })
}

async fn read_entry(txn: &mut Transaction, eg: &EgId, key: &[u8]) -> Result<Entry, ClientError> {
    let row = txn.get_row(&key_row(eg, key)).await?;
    entry_of(key, row.as_ref())
}

impl Client {
    /// The keys' current values and versions, all from one log position (duplicates
    /// are read once; the answer is in key order).
    pub async fn snapshot(&self, eg: &EgId, keys: &[Vec<u8>]) -> Result<Vec<Entry>, ClientError> {
        require_untyped(eg)?;
        check_keys(keys.iter().map(Vec::as_slice))?;
        let keys: BTreeSet<&Vec<u8>> = keys.iter().collect();
        let rows: Vec<Vec<u8>> = keys.iter().map(|k| key_row(eg, k)).collect();
        let read = self
            .read_rows(eg, ReadMode::Current, DataQuery::Rows(rows.clone()))
            .await?;
        keys.iter()
            .zip(&rows)
            .map(|(key, row)| entry_of(key, read.rows.iter().find(|r| &r.key == row)))
            .collect()
    }

    /// Commits every mutation if every assert holds, else nothing: one serializable
    /// transaction of the group. Each written key's version moves by exactly one.
    pub async fn versioned_txn(
        &self,
        eg: &EgId,
        asserts: &[Assert],
        mutations: &[Mutation],
    ) -> Result<TxnResult, ClientError> {
        check_keys(asserts.iter().map(Assert::key))?;
        check_keys(mutations.iter().map(Mutation::key))?;
        let mut last_keys = Vec::new();
        for round in 0..ATTEMPTS_MAX {
            let mut txn = self.begin_untyped(eg)?;
            let result = attempt(&mut txn, eg, asserts, mutations).await?;
            match txn.commit().await? {
                Attempt::Done(_) => return Ok(result),
                Attempt::Retry { keys, .. } => {
                    // Named as the caller names them: versioned keys, not rows.
                    last_keys = keys
                        .into_iter()
                        .map(|row| key_of_row(eg, &row).unwrap_or(row))
                        .collect();
                    retry_pause(round).await;
                }
            }
        }
        Err(ClientError::TooManyConflicts {
            attempts: ATTEMPTS_MAX,
            keys: last_keys,
        })
    }

    /// Every key of the group starting with `prefix` that has a value, in key order,
    /// from one log position.
    pub async fn keys(&self, eg: &EgId, prefix: &[u8]) -> Result<Vec<Vec<u8>>, ClientError> {
        let range = key_prefix_range(eg, prefix)?;
        let read = self
            .read_rows(
                eg,
                ReadMode::Current,
                DataQuery::Scan {
                    range,
                    limit: None,
                    reverse: false,
                },
            )
            .await?;
        let skip = group_keys_prefix(eg).len();
        let mut keys = Vec::new();
        for row in &read.rows {
            if row.value(VALUE).is_none() {
                continue;
            }
            let mut encoded = &row.key[skip..];
            let key = unescape(&mut encoded, false)
                .map_err(|e| ClientError::Corrupt(format!("a key row does not decode: {e}")))?;
            keys.push(key);
        }
        Ok(keys)
    }
}
