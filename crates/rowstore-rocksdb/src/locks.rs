//! Striped row locks: RocksDB has no row lock, and a check-and-mutate must not
//! interleave with another write of the same row.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

/// How many stripes; rows hash onto them. Unrelated rows rarely share one.
const STRIPES: usize = 1024;

pub(crate) struct RowLocks {
    stripes: Box<[Mutex<()>]>,
}

impl RowLocks {
    pub(crate) fn new() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    /// Locks every stripe the rows hash to, in stripe order so that two writers never
    /// wait on each other in a cycle.
    pub(crate) fn lock<'a>(
        &self,
        rows: impl IntoIterator<Item = &'a [u8]>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = rows.into_iter().map(stripe_of).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|i| {
                self.stripes[i]
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
            })
            .collect()
    }
}

fn stripe_of(row: &[u8]) -> usize {
    let mut hasher = DefaultHasher::new();
    row.hash(&mut hasher);
    (hasher.finish() % STRIPES as u64) as usize
}
