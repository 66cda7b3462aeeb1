//! The CAS loop every decision runs in, and `concurrent_txn`, the executable check
//! that a backend's conditional transaction is atomic.
//!
//! A decision reads a snapshot, decides, and writes in a transaction that asserts the
//! version of every key it read (*decisions-are-asserted*). Between the snapshot and
//! the transaction another process may change those keys: the assert fails, and the
//! decision is taken again on a new snapshot, up to [`CAS_ATTEMPTS_MAX`] times.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::RecipeError;
use crate::backend::{Assert, Backend, Entry, Mutation};

/// Snapshots one decision is taken on at most: normal contention settles in a few;
/// running out means a writer hammers the same keys (or the backend is not atomic), and
/// is reported as [`RecipeError::TxnConflict`] rather than retried for ever.
pub const CAS_ATTEMPTS_MAX: usize = 64;

/// What a decision concluded from one snapshot.
pub(crate) enum Step<T> {
    /// The decision needs these keys too (a task's dependencies, named in its record):
    /// snapshot again with them.
    Need(Vec<String>),
    /// Write this, asserting every key read; `T` if it applied.
    Write(Vec<Mutation>, T),
    /// Decided, with nothing to write.
    Answer(T),
}

/// Runs `decide` on snapshots of `keys` (and whatever it asks for) until its decision
/// commits or needs no write.
pub(crate) async fn cas_loop<B: Backend, T>(
    backend: &B,
    keys: Vec<String>,
    mut decide: impl FnMut(&BTreeMap<String, Entry>) -> Result<Step<T>, RecipeError>,
) -> Result<T, RecipeError> {
    let mut keys = keys;
    for round in 0..CAS_ATTEMPTS_MAX {
        let snapshot = backend.snapshot(&keys).await?;
        match decide(&snapshot)? {
            Step::Answer(answer) => return Ok(answer),
            Step::Need(more) => {
                for key in more {
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
            Step::Write(mutations, answer) => {
                let asserts: Vec<Assert> = snapshot
                    .iter()
                    .map(|(key, entry)| Assert {
                        key: key.clone(),
                        version: entry.version,
                    })
                    .collect();
                if backend.txn(&asserts, &mutations).await? {
                    return Ok(answer);
                }
                // Someone moved a key we read: decide again. Spread the retries so
                // racers do not meet again in lockstep.
                let pause = rand::random_range(0..(1u64 << round.min(6)));
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
            }
        }
    }
    Err(RecipeError::TxnConflict {
        attempts: CAS_ATTEMPTS_MAX,
    })
}

/// Why [`concurrent_txn`] failed: the backend broke its contract, or could not be
/// reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// A competitor's call failed (not an assert: a failure of the backend). Counted
    /// apart from losers, so a broken backend does not pass as contention.
    #[error("backend failed during the check: {0}")]
    Backend(String),
    /// The contract does not hold.
    #[error("contract broken: {0}")]
    Broken(String),
}

/// The atomicity check of seed `000`: `workers` competitors assert the same version of
/// `key` at once, each writing its own value. Exactly one must apply, every other
/// must see its assert fail, and the version must move by exactly one.
pub async fn concurrent_txn<B: Backend + 'static>(
    backend: Arc<B>,
    key: &str,
    workers: usize,
) -> Result<(), CheckError> {
    if workers < 2 {
        return Err(CheckError::Broken(format!(
            "{workers} competitor(s) measure no contention; use two or more"
        )));
    }
    let before = backend
        .snapshot(&[key.to_string()])
        .await
        .map_err(|e| CheckError::Backend(e.to_string()))?[key]
        .version;
    let start = Arc::new(tokio::sync::Barrier::new(workers));
    let racers: Vec<_> = (0..workers)
        .map(|worker| {
            let (backend, start, key) = (Arc::clone(&backend), Arc::clone(&start), key.to_string());
            tokio::spawn(async move {
                let assert = Assert {
                    key: key.clone(),
                    version: before,
                };
                let write = Mutation::Put(key, format!("competitor {worker}").into_bytes());
                start.wait().await;
                backend.txn(&[assert], &[write]).await
            })
        })
        .collect();
    let mut applied = 0;
    for racer in futures::future::join_all(racers).await {
        match racer {
            Ok(Ok(true)) => applied += 1,
            Ok(Ok(false)) => {}
            Ok(Err(e)) => return Err(CheckError::Backend(e.to_string())),
            Err(e) => return Err(CheckError::Backend(format!("a competitor panicked: {e}"))),
        }
    }
    if applied != 1 {
        return Err(CheckError::Broken(format!(
            "{applied} of {workers} competitors applied on the same version; exactly one must"
        )));
    }
    let after = backend
        .snapshot(&[key.to_string()])
        .await
        .map_err(|e| CheckError::Backend(e.to_string()))?[key]
        .version;
    if after != before + 1 {
        return Err(CheckError::Broken(format!(
            "the version went from {before} to {after}; one write moves it by exactly one"
        )));
    }
    Ok(())
}
