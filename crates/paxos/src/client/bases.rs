//! Blind writes' bases read without the coordinator (docs/protocol.md, "Writes", "A
//! blind write's basis").
//!
//! A transaction that read nothing still needs a basis to commit after: a position,
//! its next leader and the prepared transactions pending there. It needs nothing
//! newer than what some replica applied: it read nothing, so any position will do, and
//! a commit that meets entries chosen after its basis rebases over them within its
//! commit span as any stale read's commit does (serializable, and judged against their
//! prepares and finishes). So its basis is a snapshot read — one request, usually to
//! the local full replica — not a current read, which first asks the coordinator.
//!
//! A replica far behind (it was down, or cut off) makes that basis stale, and the
//! commit then loses positions to entries chosen long before; past its span it ends a
//! conflict of no rows (safe to retry). This module remembers which commits stand on
//! such a basis, so that their lost positions are read as a stale basis, not as a
//! contended group (which would relay the group's commits), and the group's next
//! blind write reads current — which also catches the local replica up.
//!
//! What it remembers is a hint, never a safety condition: every map is bounded and
//! forgets everything when full, which costs at most one more stale attempt. A basis
//! found and never committed after (its transaction aborted) stays counted until then;
//! a later commit after the same position of that group, on a basis read otherwise,
//! may then be taken for one on a snapshot: the hint is wrong that once, never unsafe.

use std::collections::{BTreeMap, BTreeSet};

use megastore_types::{EgId, Position, TxnId};

use super::OpId;

/// The most entries each of the maps holds before it forgets everything.
const REMEMBERED_MAX: usize = 4096;

/// The snapshot bases this client handed out, and what their commits taught it.
#[derive(Debug, Default)]
pub(super) struct UnvouchedBases {
    /// Snapshot reads under way for a blind write's basis.
    reading: BTreeMap<OpId, EgId>,
    /// The bases such reads found, per group and position, each counted until a
    /// commit after it starts: several blind writes of a group may be reading at once,
    /// and at the same position.
    found: BTreeMap<EgId, BTreeMap<Position, u32>>,
    /// Transactions committing after such a basis, until their result is reported.
    committing: BTreeSet<TxnId>,
    /// Groups whose next blind write reads current: a commit after a snapshot basis
    /// lost a position there to another client's entry.
    read_current: BTreeSet<EgId>,
}

impl UnvouchedBases {
    /// Whether `eg`'s next blind write must read current (and forgets it: one read).
    pub(super) fn take_read_current(&mut self, eg: &EgId) -> bool {
        self.read_current.remove(eg)
    }

    /// Read `op` is a snapshot read for a blind write's basis in `eg`.
    pub(super) fn reading(&mut self, op: OpId, eg: EgId) {
        insert_bounded(&mut self.reading, op, eg);
    }

    /// Operation `op` ended; if it was a basis read, `position` is what it found.
    pub(super) fn read_ended(&mut self, op: OpId, position: Option<Position>) {
        if let Some(eg) = self.reading.remove(&op)
            && let Some(position) = position
        {
            if self.found.len() >= REMEMBERED_MAX && !self.found.contains_key(&eg) {
                self.found.clear();
            }
            let bases = self.found.entry(eg).or_default();
            if bases.len() >= REMEMBERED_MAX && !bases.contains_key(&position) {
                bases.clear();
            }
            *bases.entry(position).or_default() += 1;
        }
    }

    /// Transaction `txn` commits in `eg` after `read_position`: whether that is a
    /// snapshot basis handed out for the group and not committed after yet (then it
    /// stands on it, and uses it up).
    pub(super) fn commits_after(&mut self, txn: TxnId, eg: &EgId, read_position: Position) -> bool {
        let Some(bases) = self.found.get_mut(eg) else {
            return false;
        };
        let Some(count) = bases.get_mut(&read_position) else {
            return false;
        };
        *count -= 1;
        if *count == 0 {
            bases.remove(&read_position);
            if bases.is_empty() {
                self.found.remove(eg);
            }
        }
        if self.committing.len() >= REMEMBERED_MAX {
            self.committing.clear();
        }
        self.committing.insert(txn);
        true
    }

    /// Whether `txn` commits after a snapshot basis.
    pub(super) fn stands_on_one(&self, txn: &TxnId) -> bool {
        self.committing.contains(txn)
    }

    /// A commit whose every transaction stands on a snapshot basis lost a position
    /// to another client's entry in `eg`: its basis was stale, so the next blind write
    /// there reads current.
    pub(super) fn lost_on_stale(&mut self, eg: &EgId) {
        if self.read_current.len() >= REMEMBERED_MAX {
            self.read_current.clear();
        }
        self.read_current.insert(eg.clone());
    }

    /// `txn`'s result was reported.
    pub(super) fn reported(&mut self, txn: &TxnId) {
        self.committing.remove(txn);
    }
}

fn insert_bounded<K: Ord, V>(map: &mut BTreeMap<K, V>, key: K, value: V) {
    if map.len() >= REMEMBERED_MAX && !map.contains_key(&key) {
        map.clear();
    }
    map.insert(key, value);
}

#[cfg(test)]
mod tests {
    use megastore_types::ClientId;

    use super::*;

    fn eg(n: u8) -> EgId {
        EgId(vec![n])
    }

    fn txn(seq: u64) -> TxnId {
        TxnId {
            client: ClientId(1),
            seq,
        }
    }

    #[test]
    fn a_commit_stands_on_the_basis_its_read_found_once() {
        let mut bases = UnvouchedBases::default();
        bases.reading(OpId(1), eg(1));
        bases.read_ended(OpId(1), Some(Position(7)));
        assert!(
            !bases.commits_after(txn(1), &eg(1), Position(8)),
            "another position"
        );
        assert!(bases.commits_after(txn(1), &eg(1), Position(7)));
        assert!(bases.stands_on_one(&txn(1)));
        assert!(
            !bases.commits_after(txn(2), &eg(1), Position(7)),
            "used once"
        );
        bases.reported(&txn(1));
        assert!(!bases.stands_on_one(&txn(1)));
    }

    /// Blind writes of one group reading their bases at once: each commit stands on
    /// its own, whichever read ended last, and two at one position count twice.
    #[test]
    fn every_basis_of_a_group_counts_not_only_the_last_found() {
        let mut bases = UnvouchedBases::default();
        for (op, position) in [(1, 7), (2, 9), (3, 7)] {
            bases.reading(OpId(op), eg(1));
            bases.read_ended(OpId(op), Some(Position(position)));
        }
        assert!(bases.commits_after(txn(1), &eg(1), Position(7)));
        assert!(
            bases.commits_after(txn(2), &eg(1), Position(9)),
            "a basis found before the last one"
        );
        assert!(
            bases.commits_after(txn(3), &eg(1), Position(7)),
            "the second basis at one position"
        );
        assert!(
            !bases.commits_after(txn(4), &eg(1), Position(7)),
            "each used once"
        );
        assert!(bases.found.is_empty(), "nothing left once all are used");
        for t in 1..=3 {
            assert!(bases.stands_on_one(&txn(t)));
        }
    }

    #[test]
    fn a_read_that_failed_or_was_not_a_basis_read_finds_nothing() {
        let mut bases = UnvouchedBases::default();
        bases.reading(OpId(1), eg(1));
        bases.read_ended(OpId(1), None);
        bases.read_ended(OpId(2), Some(Position(3)));
        assert!(!bases.commits_after(txn(1), &eg(1), Position(3)));
    }

    #[test]
    fn a_stale_basis_makes_the_next_blind_write_read_current_once() {
        let mut bases = UnvouchedBases::default();
        assert!(!bases.take_read_current(&eg(1)));
        bases.lost_on_stale(&eg(1));
        assert!(bases.take_read_current(&eg(1)));
        assert!(!bases.take_read_current(&eg(1)));
    }

    #[test]
    fn it_forgets_everything_when_full() {
        let mut bases = UnvouchedBases::default();
        for n in 0..=REMEMBERED_MAX as u64 {
            bases.reading(OpId(n), eg(1));
        }
        assert_eq!(bases.reading.len(), 1, "cleared, then the newest");
    }
}
