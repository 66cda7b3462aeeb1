//! What finishing a step of [`super::ClientCore`] needs to know of its operations and
//! lanes without looking at every one: which operations changed since their results
//! were last taken, when each is next due, which current reads wait on a group, and
//! which lanes to look at.
//!
//! A step changes the few operations and lanes its input concerns, but a shared
//! client (a gateway's, or one that 1,024 tasks use) holds a thousand of each. Looking
//! at every one for results, deadlines and commits to start after each step cost a step
//! in proportion to them all (29 % of such a client's CPU). The table marks an
//! operation *touched* whenever it hands it out to be changed, and the lanes are looked
//! at when they or their commit in flight changed, or their round ends, so a step asks
//! only those. Every operation or lane left out would have had nothing to report: the
//! core's outputs are the same as when it looked at all of them (the simulator's trace
//! hashes did not change).
//!
//! Invariants:
//! - *touched-covers-changes*: an operation changed since its results were last taken
//!   is in `touched`, because every change goes through [`OpTable::get_mut`] or
//!   [`OpTable::insert`] (the map is handed out mutably otherwise only to take results,
//!   [`OpTable::get_to_report`], which changes nothing to take again); and a lane with
//!   something to do is marked changed or due at its round's end;
//! - *deadlines-indexed*: after [`OpTable::refresh_deadlines`], `deadlines` holds each
//!   operation's deadline exactly, and after [`LaneVisits::looked_at`] of every lane
//!   changed, the lane indexes hold each lane's round end and linger deadline exactly
//!   (both checked against everything in debug builds).

use std::collections::{BTreeMap, BTreeSet};

use megastore_types::{EgId, Time};

use super::lanes::Lane;
use super::{Op, OpId, op_deadline};

/// The times at which keys are due, by key and in time order.
#[derive(Debug)]
pub(super) struct DeadlineIndex<K: Ord + Clone> {
    by_key: BTreeMap<K, Time>,
    by_time: BTreeSet<(Time, K)>,
}

impl<K: Ord + Clone> Default for DeadlineIndex<K> {
    fn default() -> Self {
        Self {
            by_key: BTreeMap::new(),
            by_time: BTreeSet::new(),
        }
    }
}

impl<K: Ord + Clone> DeadlineIndex<K> {
    /// `key` is due at `at` (`None`: never).
    pub(super) fn set(&mut self, key: &K, at: Option<Time>) {
        if self.by_key.get(key).copied() == at {
            return;
        }
        if let Some(old) = self.by_key.remove(key) {
            self.by_time.remove(&(old, key.clone()));
        }
        if let Some(at) = at {
            self.by_key.insert(key.clone(), at);
            self.by_time.insert((at, key.clone()));
        }
    }

    /// The earliest time anything is due.
    pub(super) fn first(&self) -> Option<Time> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// The keys due at or before `now`, in key order.
    pub(super) fn due(&self, now: Time) -> BTreeSet<K> {
        self.by_time
            .iter()
            .take_while(|(at, _)| *at <= now)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// When `key` is due.
    #[cfg(debug_assertions)]
    fn get(&self, key: &K) -> Option<Time> {
        self.by_key.get(key).copied()
    }

    #[cfg(debug_assertions)]
    fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// The operations in flight.
#[derive(Debug, Default)]
pub(super) struct OpTable {
    ops: BTreeMap<OpId, Op>,
    /// Changed (or started) since their results were last taken.
    touched: BTreeSet<OpId>,
    /// Changed since their deadlines were last indexed.
    stale_deadlines: BTreeSet<OpId>,
    deadlines: DeadlineIndex<OpId>,
    /// The current reads of each group, for a commit that settles the position they
    /// wait for ([`super::wake_reads`]).
    current_reads: BTreeMap<EgId, BTreeSet<OpId>>,
}

impl OpTable {
    fn touch(&mut self, op: OpId) {
        self.touched.insert(op);
        self.stale_deadlines.insert(op);
    }

    /// Adds (or replaces) operation `op`.
    pub(super) fn insert(&mut self, op: OpId, state: Op) {
        if let Some(old) = self.ops.remove(&op) {
            self.forget_read(op, &old);
        }
        if let Op::Current(read) = &state {
            self.current_reads
                .entry(read.eg().clone())
                .or_default()
                .insert(op);
        }
        self.ops.insert(op, state);
        self.touch(op);
    }

    fn forget_read(&mut self, op: OpId, state: &Op) {
        if let Op::Current(read) = state
            && let Some(reads) = self.current_reads.get_mut(read.eg())
        {
            reads.remove(&op);
            if reads.is_empty() {
                self.current_reads.remove(read.eg());
            }
        }
    }

    /// Operation `op`, to look at.
    pub(super) fn get(&self, op: &OpId) -> Option<&Op> {
        self.ops.get(op)
    }

    /// Operation `op`, to change: touched.
    pub(super) fn get_mut(&mut self, op: &OpId) -> Option<&mut Op> {
        if self.ops.contains_key(op) {
            self.touch(*op);
        }
        self.ops.get_mut(op)
    }

    /// Operation `op`, for taking its results ([`OpTable::take_touched`]): its deadline
    /// is indexed again, but it is not touched again.
    pub(super) fn get_to_report(&mut self, op: &OpId) -> Option<&mut Op> {
        if self.ops.contains_key(op) {
            self.stale_deadlines.insert(*op);
        }
        self.ops.get_mut(op)
    }

    /// Removes operation `op`.
    pub(super) fn remove(&mut self, op: &OpId) -> Option<Op> {
        let state = self.ops.remove(op)?;
        self.forget_read(*op, &state);
        self.touched.remove(op);
        self.stale_deadlines.remove(op);
        self.deadlines.set(op, None);
        Some(state)
    }

    /// Every operation, to look at (debug checks).
    #[cfg(debug_assertions)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (&OpId, &Op)> {
        self.ops.iter()
    }

    /// How many operations are in flight.
    pub(super) fn len(&self) -> usize {
        self.ops.len()
    }

    /// The operations changed since their results were last taken, in order; from now
    /// on none is.
    pub(super) fn take_touched(&mut self) -> BTreeSet<OpId> {
        std::mem::take(&mut self.touched)
    }

    /// The groups of the touched commits (whose lanes may have a decided commit in
    /// flight).
    pub(super) fn touched_commit_groups(&self) -> Vec<EgId> {
        self.touched
            .iter()
            .filter_map(|op| match self.ops.get(op) {
                Some(Op::Commit(commit)) => Some(commit.commit.group().clone()),
                _ => None,
            })
            .collect()
    }

    /// The current reads of `eg`, in order.
    pub(super) fn current_reads_of(&self, eg: &EgId) -> Vec<OpId> {
        self.current_reads
            .get(eg)
            .map(|reads| reads.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Indexes the deadlines of the operations changed since they were last indexed.
    pub(super) fn refresh_deadlines(&mut self) {
        for op in std::mem::take(&mut self.stale_deadlines) {
            let at = self.ops.get(&op).and_then(op_deadline);
            self.deadlines.set(&op, at);
        }
        #[cfg(debug_assertions)]
        self.check_deadlines();
    }

    /// Invariant *deadlines-indexed*, against every operation (debug builds).
    #[cfg(debug_assertions)]
    fn check_deadlines(&self) {
        let mut indexed = 0;
        for (op, state) in &self.ops {
            let at = op_deadline(state);
            assert_eq!(
                self.deadlines.get(op),
                at,
                "deadlines-indexed: operation {op:?}"
            );
            indexed += usize::from(at.is_some());
        }
        assert_eq!(self.deadlines.len(), indexed, "deadlines-indexed: count");
    }

    /// The earliest deadline of any operation (as last indexed).
    pub(super) fn next_deadline(&self) -> Option<Time> {
        self.deadlines.first()
    }

    /// The operations due at `now` (as last indexed), in order.
    pub(super) fn due(&self, now: Time) -> BTreeSet<OpId> {
        self.deadlines.due(now)
    }
}

/// Which lanes a step looks at: those changed (a commit came to wait, or the commit in
/// flight changed) and those with nothing in flight whose round ended — its linger is
/// over, so what waits may start, or the lane may go. A lane left out would do nothing:
/// its commit in flight is unchanged, or it lingers on, or it waits for its round to
/// end with nothing waiting.
#[derive(Debug, Default)]
pub(super) struct LaneVisits {
    /// Changed since last looked at.
    changed: BTreeSet<EgId>,
    /// When each lane with nothing in flight is next looked at ([`Lane::round_end`]).
    round_ends: DeadlineIndex<EgId>,
    /// When each lane's linger holding waiting commits ends ([`Lane::linger_deadline`]).
    lingers: DeadlineIndex<EgId>,
}

impl LaneVisits {
    /// `eg`'s lane (or its commit in flight) changed.
    pub(super) fn changed(&mut self, eg: EgId) {
        self.changed.insert(eg);
    }

    /// The lanes to look at now, in order; from now on none is changed.
    pub(super) fn take_due(&mut self, now: Time) -> BTreeSet<EgId> {
        let mut due = std::mem::take(&mut self.changed);
        due.extend(self.round_ends.due(now));
        due
    }

    /// `eg`'s lane was looked at (and changed, perhaps): `None` if it went.
    pub(super) fn looked_at(&mut self, eg: &EgId, lane: Option<&Lane>) {
        self.round_ends.set(eg, lane.and_then(Lane::round_end));
        self.lingers.set(eg, lane.and_then(Lane::linger_deadline));
    }

    /// Whether `eg`'s lane is marked changed (looked at in the next step).
    #[cfg(debug_assertions)]
    pub(super) fn is_changed(&self, eg: &EgId) -> bool {
        self.changed.contains(eg)
    }

    /// When the first linger holding waiting commits ends.
    pub(super) fn next_linger(&self) -> Option<Time> {
        self.lingers.first()
    }

    /// Invariant *deadlines-indexed* of the lanes, against every lane (debug builds).
    #[cfg(debug_assertions)]
    pub(super) fn check(&self, lanes: &BTreeMap<EgId, Lane>) {
        for (eg, lane) in lanes {
            assert_eq!(
                self.round_ends.get(eg),
                lane.round_end(),
                "round end of {eg}"
            );
            assert_eq!(
                self.lingers.get(eg),
                lane.linger_deadline(),
                "linger of {eg}"
            );
        }
        let ends = lanes.values().filter(|l| l.round_end().is_some()).count();
        let lingers = lanes
            .values()
            .filter(|l| l.linger_deadline().is_some())
            .count();
        assert_eq!(self.round_ends.len(), ends, "round ends indexed");
        assert_eq!(self.lingers.len(), lingers, "lingers indexed");
    }
}
