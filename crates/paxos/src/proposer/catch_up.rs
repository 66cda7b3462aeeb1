//! Catching a replica up: settling every position of a range, each its own Paxos
//! instance ([`Settle`], learning the chosen value or proposing a no-op), up to a
//! limit at once. A current read catches up the replica it reads from (one position at
//! a time); a replica's sweep catches itself up from its peers (many at once).
//!
//! Invariant: positions are started in ascending order and each at most once; the
//! catch-up is done only when every position of the range settled, and fails as soon
//! as one could not be (the caller decides whether to retry).

use std::collections::BTreeMap;

use megastore_coordinator::CoordinatorReply;
use megastore_lock::{LockError, LockReply};
use megastore_types::{EgId, Position, ReplicaId, Time};

use super::Ctx;
use super::settle::{Settle, SettleOutcome};
use crate::messages::ReplicaReply;

/// Where a catch-up stands after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUpProgress {
    /// Positions are still being settled.
    Running,
    /// Every position through the target is settled; `next_leader` is the position
    /// leader the entry at the target named (or the one given at the start, if the
    /// range was empty).
    Done { next_leader: Option<ReplicaId> },
    /// A position could not be settled.
    Failed,
}

/// Settles `next..=target` of one group, at most `in_flight_max` positions at once.
#[derive(Debug)]
pub(crate) struct CatchUp {
    eg: EgId,
    next: Position,
    target: Position,
    in_flight_max: usize,
    settles: BTreeMap<Position, Box<Settle>>,
    next_leader: Option<ReplicaId>,
}

impl CatchUp {
    /// Starts settling `next..=target`; `next_leader` is what the log below `next`
    /// named as the position leader.
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        next: Position,
        target: Position,
        next_leader: Option<ReplicaId>,
        in_flight_max: usize,
    ) -> (Self, CatchUpProgress) {
        assert!(
            in_flight_max > 0,
            "a catch-up settles at least one position"
        );
        let mut catch_up = Self {
            eg,
            next,
            target,
            in_flight_max,
            settles: BTreeMap::new(),
            next_leader,
        };
        let progress = catch_up.advance(ctx);
        (catch_up, progress)
    }

    /// The target position.
    pub(crate) fn target(&self) -> Position {
        self.target
    }

    /// When [`CatchUp::on_tick`] next has something to do.
    pub(crate) fn deadline(&self) -> Option<Time> {
        self.settles.values().filter_map(|s| s.deadline()).min()
    }

    /// Whether request (or lock query) `id` belongs to one of its settles.
    pub(crate) fn owns(&self, id: u64) -> bool {
        self.settles.values().any(|s| s.owns(id))
    }

    /// Drops settled positions, fails on one that could not be settled, and starts
    /// the next positions up to the limit.
    fn advance<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) -> CatchUpProgress {
        loop {
            let mut failed = false;
            let target = self.target;
            let mut next_leader = self.next_leader;
            self.settles
                .retain(|position, settle| match settle.outcome() {
                    None => true,
                    Some(SettleOutcome::Failed) => {
                        failed = true;
                        false
                    }
                    Some(SettleOutcome::Settled { entry, .. }) => {
                        if *position == target {
                            next_leader = entry.next_leader;
                        }
                        false
                    }
                });
            self.next_leader = next_leader;
            if failed {
                self.settles.clear();
                return CatchUpProgress::Failed;
            }
            while self.next <= self.target && self.settles.len() < self.in_flight_max {
                let settle = Settle::start(ctx, self.eg.clone(), self.next, None, None);
                self.settles.insert(self.next, Box::new(settle));
                self.next = self.next.next();
            }
            if self.settles.is_empty() && self.next > self.target {
                return CatchUpProgress::Done {
                    next_leader: self.next_leader,
                };
            }
            // A settle may end as it starts: look again until none has.
            if self.settles.values().all(|s| s.outcome().is_none()) {
                return CatchUpProgress::Running;
            }
        }
    }

    /// A replica's reply to one of its settles.
    pub(crate) fn on_replica_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: ReplicaReply,
    ) -> CatchUpProgress {
        let id = reply.id();
        if let Some(settle) = self.settles.values_mut().find(|s| s.owns(id)) {
            settle.on_replica_reply(ctx, from, reply);
        }
        self.advance(ctx)
    }

    /// A coordinator's acknowledgement of an invalidate one of its settles sent.
    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) -> CatchUpProgress {
        let id = reply.id();
        if let Some(settle) = self.settles.values_mut().find(|s| s.owns(id)) {
            settle.on_coordinator_reply(ctx, from, reply);
        }
        self.advance(ctx)
    }

    /// The lock service's answer to one of its settles' queries.
    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) -> CatchUpProgress {
        if let Some(settle) = self.settles.values_mut().find(|s| s.owns(id)) {
            settle.on_lock_outcome(ctx, id, result);
        }
        self.advance(ctx)
    }

    /// A commit of this proposer settled every position through `through`: its
    /// settles there stop waiting for the write in flight ([`Settle::writer_settled`]).
    /// Returns whether one was waiting, and where the catch-up stands.
    pub(crate) fn writer_settled<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        through: Position,
    ) -> (bool, CatchUpProgress) {
        let mut woken = false;
        for settle in self.settles.range_mut(..=through).map(|(_, s)| s) {
            woken |= settle.writer_settled(ctx);
        }
        (woken, self.advance(ctx))
    }

    /// Time passed: ticks every settle whose deadline came.
    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) -> CatchUpProgress {
        let now = ctx.now;
        for settle in self
            .settles
            .values_mut()
            .filter(|s| s.deadline().is_some_and(|d| d <= now))
        {
            settle.on_tick(ctx);
        }
        self.advance(ctx)
    }
}
