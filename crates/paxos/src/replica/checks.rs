//! The replica's invariants, checked after every step of a debug build (and by tests
//! at will, [`Replica::check_invariants`]): each loaded group's own
//! ([`GroupLog::check_invariants`](super::group::GroupLog::check_invariants)) and the
//! replica's across groups — *loaded-only-if-served* (`placed.rs`), and with a bounded
//! cache *one-stamp-per-group* (`cache.rs`), every loaded group ordered by use, and
//! *open-is-indexed*.
//!
//! A step checks every group while at most [`STEP_CHECK_WINDOW`] are in memory (the
//! simulator's replicas, most tests' clusters). With more, checking them all after
//! every step made a debug build's step cost in proportion to the groups in memory: an
//! e2e test writing 10,000 groups slowed from about 250 first writes a second to 13,
//! then timed out. So a step then checks a window of [`STEP_CHECK_WINDOW`] groups that
//! starts after the one the last window ended at: every group is still checked, once
//! every `groups / STEP_CHECK_WINDOW` steps, and a step's cost stays bounded.
//!
//! The window is small because a server steps every event of a batch before it
//! answers any: with a window of 512, a debug build on two busy cores took 0.2–0.45 s
//! to step a batch of 256 events once a few thousand groups were in memory, and reads
//! queued behind two such batches timed out at every replica (the e2e test
//! `stale_basis`, 2,560 groups, failed so in CI).

use std::collections::BTreeMap;
use std::ops::Bound;

use megastore_types::EgId;

use super::{GroupSlot, Replica};

/// How many groups a debug build's step checks at most.
pub(super) const STEP_CHECK_WINDOW: usize = 64;

impl Replica {
    /// Checks every loaded group's invariants and the replica's across them (panics on
    /// a broken one).
    pub fn check_invariants(&self) {
        let all: Vec<&EgId> = self.groups.keys().collect();
        self.check_groups(&all);
        if self.config.cache_groups.is_some() {
            self.recency.check();
            let loaded = self
                .groups
                .values()
                .filter(|g| !matches!(g, GroupSlot::Loading(_)))
                .count();
            assert_eq!(
                loaded,
                self.recency.len(),
                "every loaded group is ordered by use"
            );
        }
    }

    /// What a step of a debug build checks: everything while at most
    /// [`STEP_CHECK_WINDOW`] groups are in memory, else the next window of them.
    pub(super) fn check_invariants_after_step(&mut self) {
        if self.groups.len() <= STEP_CHECK_WINDOW {
            self.check_invariants();
            return;
        }
        let after = self.checked_after.take();
        let window = next_window(&self.groups, after.as_ref(), STEP_CHECK_WINDOW);
        self.check_groups(&window);
        self.checked_after = window.last().map(|eg| (*eg).clone());
    }

    /// The invariants of groups `egs` (each in memory).
    fn check_groups(&self, egs: &[&EgId]) {
        let bugs = &self.config.bugs;
        for &eg in egs {
            if !bugs.keep_unserved_groups() {
                assert!(
                    self.refusal(eg).is_none(),
                    "loaded-only-if-served: {eg} is in memory and not served here"
                );
            }
            let Some(GroupSlot::Ready(group)) = self.groups.get(eg) else {
                continue;
            };
            group.check_invariants(self.me.kind, bugs);
            if self.config.cache_groups.is_none() {
                continue;
            }
            assert!(
                self.recency.orders(eg),
                "every loaded group is ordered by use: {eg} is not"
            );
            if !bugs.evict_dirty_group() && !bugs.skip_open_index() {
                assert!(
                    !group.unfinished(self.me.kind) || self.open_listed.contains(eg),
                    "open-is-indexed: {eg} has work left and is not in the open index"
                );
            }
        }
    }
}

/// The `size` keys of `map` that follow `after` (from the first key if `None`),
/// wrapping around past the last key to the first; each key at most once.
fn next_window<'a, K: Ord, V>(
    map: &'a BTreeMap<K, V>,
    after: Option<&K>,
    size: usize,
) -> Vec<&'a K> {
    let later = map.range::<K, _>((
        after.map_or(Bound::Unbounded, Bound::Excluded),
        Bound::Unbounded,
    ));
    // With `after`, the keys up to it; without, `later` is every key already.
    let earlier = map.range::<K, _>((
        Bound::Unbounded,
        after.map_or(Bound::Unbounded, Bound::Included),
    ));
    later
        .chain(earlier)
        .map(|(key, _)| key)
        .take(size.min(map.len()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_each_other_around_every_key() {
        let map: BTreeMap<u32, ()> = (0..10).map(|k| (k, ())).collect();
        let mut after = None;
        let mut seen = vec![];
        for _ in 0..4 {
            let window = next_window(&map, after.as_ref(), 3);
            assert_eq!(window.len(), 3);
            seen.extend(window.iter().map(|k| **k));
            after = window.last().map(|k| **k);
        }
        // 0..=8, then 9 and around to 0 and 1: every key within ceil(10 / 3) windows.
        assert_eq!(seen, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        // A window no smaller than the map holds each key once.
        assert_eq!(next_window(&map, Some(&4), 20).len(), 10);
        assert_eq!(next_window(&map, None, 20).len(), 10);
        assert_eq!(next_window(&BTreeMap::<u32, ()>::new(), None, 3).len(), 0);
    }
}
