//! Commands applied at most once (Raft thesis §6.3): the results of the last
//! [`REMEMBERED`] commands by request id, so a client that resends a command after a
//! timeout or a lost leader — which may have applied it already — gets the first
//! result instead of a second application (a second `WriteFile` would report a false
//! version mismatch; a second `Release` a false "not holder").
//!
//! Part of the replicated state (and of snapshots), evicted in apply order, so every
//! node answers a resend the same way.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::types::LockResult;

/// How many recent commands are remembered. A resend arrives within a client's
/// patience (seconds); this many commands take far longer at lockd's rates.
pub(crate) const REMEMBERED: usize = 10_000;

/// Recent results by request id.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Applied {
    order: VecDeque<u64>,
    results: HashMap<u64, LockResult>,
}

impl Applied {
    /// The result of an earlier application of request `id`, if remembered.
    pub(crate) fn get(&self, id: u64) -> Option<&LockResult> {
        self.results.get(&id)
    }

    /// Remembers the result of request `id` (the first one, if it had one already).
    pub(crate) fn remember(&mut self, id: u64, result: LockResult) {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.results.entry(id) {
            slot.insert(result);
            self.order.push_back(id);
        }
        while self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.results.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use megastore_lock::{LockError, LockReply};

    use super::*;

    #[test]
    fn a_resent_command_gets_its_first_result_until_evicted() {
        let mut applied = Applied::default();
        applied.remember(7, Ok(LockReply::Written { version: 1 }));
        applied.remember(7, Err(LockError::NotHolder));
        assert_eq!(applied.get(7), Some(&Ok(LockReply::Written { version: 1 })));
        for id in 100..100 + REMEMBERED as u64 {
            applied.remember(id, Ok(LockReply::Done));
        }
        assert_eq!(applied.get(7), None, "the oldest is forgotten first");
        assert!(applied.get(100).is_some());
        assert_eq!(applied.order.len(), REMEMBERED);
    }
}
