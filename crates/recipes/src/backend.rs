//! The three primitives the recipes stand on (seed `000`): a consistent snapshot of
//! several keys, a transaction conditional on per-key versions, and listing keys by
//! prefix. [`GroupBackend`] is megastore's (one entity group); [`MemoryBackend`] is an
//! in-process one for the recipes' own tests, atomic only within one process.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;

use megastore_client::{Assert as StoreAssert, Client, ClientError, Mutation as StoreMutation};
use megastore_client::{TxnResult, VERSION_MISSING};
use megastore_types::EgId;

/// One key as a snapshot saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its version: grows by one with every write, never reused; [`VERSION_MISSING`]
    /// when never written.
    pub version: u64,
    /// Its value (`None`: absent).
    pub value: Option<Vec<u8>>,
}

/// A condition: the key's version is exactly this ([`VERSION_MISSING`]: never
/// written). Every key a decision read goes into its transaction's asserts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assert {
    /// The key.
    pub key: String,
    /// The version it must have.
    pub version: u64,
}

/// A write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Set the key's value.
    Put(String, Vec<u8>),
    /// Remove the key's value (its version still moves on).
    Delete(String),
}

/// A backend failed (not an assert: that is a normal `false`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("backend: {0}")]
pub struct BackendError(pub String);

impl From<ClientError> for BackendError {
    fn from(e: ClientError) -> Self {
        BackendError(e.to_string())
    }
}

/// The minimal contract a coordination backend offers. Implementations guarantee:
/// - `txn` is atomic: every mutation if every assert holds (each written key's version
///   then moves by exactly one), otherwise none (`Ok(false)`);
/// - `snapshot` is one instant's view of all its keys;
/// - versions only grow, by one per write, and are never reused.
pub trait Backend: Send + Sync {
    /// The keys' current entries, from one instant.
    fn snapshot(
        &self,
        keys: &[String],
    ) -> impl Future<Output = Result<BTreeMap<String, Entry>, BackendError>> + Send;

    /// Every mutation if every assert holds; whether it applied.
    fn txn(
        &self,
        asserts: &[Assert],
        mutations: &[Mutation],
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// The keys with a value that start with `prefix`, in order, from one instant.
    fn keys(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;
}

/// The primitives on one megastore entity group: every key of a board or ledger lives
/// in it, so each transaction is one serializable commit of the group.
#[derive(Clone)]
pub struct GroupBackend {
    client: Client,
    eg: EgId,
}

impl GroupBackend {
    /// The backend on untyped group `eg`, through `client`.
    pub fn new(client: Client, eg: EgId) -> Self {
        Self { client, eg }
    }
}

impl Backend for GroupBackend {
    async fn snapshot(&self, keys: &[String]) -> Result<BTreeMap<String, Entry>, BackendError> {
        let bytes: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        let entries = self.client.snapshot(&self.eg, &bytes).await?;
        entries
            .into_iter()
            .map(|e| {
                let key = String::from_utf8(e.key)
                    .map_err(|_| BackendError("a key that is not UTF-8".into()))?;
                Ok((
                    key,
                    Entry {
                        version: e.version,
                        value: e.value,
                    },
                ))
            })
            .collect()
    }

    async fn txn(&self, asserts: &[Assert], mutations: &[Mutation]) -> Result<bool, BackendError> {
        let asserts: Vec<StoreAssert> = asserts
            .iter()
            .map(|a| StoreAssert::Version {
                key: a.key.as_bytes().to_vec(),
                version: a.version,
            })
            .collect();
        let mutations: Vec<StoreMutation> = mutations
            .iter()
            .map(|m| match m {
                Mutation::Put(key, value) => StoreMutation::Put {
                    key: key.as_bytes().to_vec(),
                    value: value.clone(),
                },
                Mutation::Delete(key) => StoreMutation::Delete {
                    key: key.as_bytes().to_vec(),
                },
            })
            .collect();
        match self
            .client
            .versioned_txn(&self.eg, &asserts, &mutations)
            .await?
        {
            TxnResult::Applied { .. } => Ok(true),
            TxnResult::AssertFailed { .. } => Ok(false),
        }
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>, BackendError> {
        self.client
            .keys(&self.eg, prefix.as_bytes())
            .await?
            .into_iter()
            .map(|k| {
                String::from_utf8(k).map_err(|_| BackendError("a key that is not UTF-8".into()))
            })
            .collect()
    }
}

/// The primitives in one process, behind a mutex: **atomic only within this process**.
/// For the recipes' own tests (their decision logic checked without a cluster), never
/// for coordinating processes: two processes would each have their own.
#[derive(Default)]
pub struct MemoryBackend {
    keys: Mutex<BTreeMap<String, Entry>>,
}

impl MemoryBackend {
    fn state(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn missing() -> Entry {
    Entry {
        version: VERSION_MISSING,
        value: None,
    }
}

impl Backend for MemoryBackend {
    async fn snapshot(&self, keys: &[String]) -> Result<BTreeMap<String, Entry>, BackendError> {
        let state = self.state();
        Ok(keys
            .iter()
            .map(|k| (k.clone(), state.get(k).cloned().unwrap_or_else(missing)))
            .collect())
    }

    async fn txn(&self, asserts: &[Assert], mutations: &[Mutation]) -> Result<bool, BackendError> {
        let mut state = self.state();
        let version = |k: &str| state.get(k).map_or(VERSION_MISSING, |e| e.version);
        if asserts.iter().any(|a| version(&a.key) != a.version) {
            return Ok(false);
        }
        for mutation in mutations {
            let (key, value) = match mutation {
                Mutation::Put(key, value) => (key, Some(value.clone())),
                Mutation::Delete(key) => (key, None),
            };
            let entry = state.entry(key.clone()).or_insert_with(missing);
            entry.version += 1;
            entry.value = value;
        }
        Ok(true)
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>, BackendError> {
        Ok(self
            .state()
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(_, e)| e.value.is_some())
            .map(|(k, _)| k.clone())
            .collect())
    }
}
