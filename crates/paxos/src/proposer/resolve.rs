//! Resolving a commit whose outcome its writer could not learn, by its transaction id:
//! settle the position it may hold — learn the chosen value, or choose one (a value an
//! acceptor already accepted, which Paxos must carry on, else a no-op) — and look for
//! it among the chosen entry's transactions. After this the position is decided, so a
//! retry can never be applied as well as the original. A position truncated long ago
//! is resolved by what a replica remembers was chosen there (its last truncated
//! positions' transaction ids).

use megastore_coordinator::CoordinatorReply;
use megastore_lock::{LockError, LockReply};
use megastore_types::{EgId, Position, ReplicaId, Time, TxnId};

use super::Ctx;
use super::settle::{Settle, SettleOutcome};
use crate::messages::ReplicaReply;

/// What a resolution found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The transaction was chosen at the position: it committed.
    Committed(Position),
    /// Another value (or a no-op) was chosen there: it did not commit, anywhere.
    NotCommitted,
    /// The position could not be settled (no majority within the rounds allowed): ask
    /// again later.
    Undecided,
}

/// Settling positions, one after another, to learn whether one transaction holds one
/// of them: a single position (where its writer's commit ended unknown), or every
/// position of its commit span (when only its first position is known).
#[derive(Debug)]
pub(crate) struct Resolve {
    eg: EgId,
    txn: TxnId,
    settle: Settle,
    /// The last position it may hold.
    last: Position,
    /// The `resolve_without_settling` knob: answer before the position is decided.
    guess: bool,
    /// The `resolve_any_remembered_txn` knob.
    any_remembered: bool,
}

impl Resolve {
    /// Starts settling `positions` of `eg` in order, one of which `txn` may hold.
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        positions: std::ops::RangeInclusive<Position>,
        txn: TxnId,
    ) -> Self {
        let (first, last) = positions.into_inner();
        Self {
            eg: eg.clone(),
            txn,
            last,
            guess: ctx.config.bugs.resolve_without_settling(),
            any_remembered: ctx.config.bugs.resolve_any_remembered_txn(),
            settle: Settle::start(ctx, eg, first, None, None),
        }
    }

    /// The resolution, once a position holds it or every position is settled without
    /// it (or settling gave up).
    pub(crate) fn result(&self) -> Option<Resolution> {
        match self.position_result()? {
            Resolution::NotCommitted if self.settle.position() < self.last && !self.guess => None,
            found => Some(found),
        }
    }

    /// Moves on to the next position once the one being settled does not hold it.
    fn advance<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let position = self.settle.position();
        if !self.guess
            && position < self.last
            && self.position_result() == Some(Resolution::NotCommitted)
        {
            self.settle = Settle::start(ctx, self.eg.clone(), position.next(), None, None);
        }
    }

    /// What the position being settled says, once settled.
    fn position_result(&self) -> Option<Resolution> {
        if self.guess {
            return Some(Resolution::NotCommitted);
        }
        if let Some(chosen) = self.settle.truncated_chosen() {
            let committed =
                chosen.holds(self.txn) || (self.any_remembered && !chosen.txns().is_empty());
            return Some(if committed {
                Resolution::Committed(self.settle.position())
            } else {
                Resolution::NotCommitted
            });
        }
        Some(match self.settle.outcome()? {
            SettleOutcome::Settled { entry, .. } if entry.holds(self.txn) => {
                Resolution::Committed(self.settle.position())
            }
            SettleOutcome::Settled { .. } => Resolution::NotCommitted,
            SettleOutcome::Failed => Resolution::Undecided,
        })
    }

    pub(crate) fn deadline(&self) -> Option<Time> {
        self.settle.deadline()
    }

    pub(crate) fn on_replica_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: ReplicaReply,
    ) {
        if self.settle.owns(reply.id()) {
            self.settle.on_replica_reply(ctx, from, reply);
            self.advance(ctx);
        }
    }

    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) {
        self.settle.on_coordinator_reply(ctx, from, reply);
        self.advance(ctx);
    }

    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        if self.settle.owns(id) {
            self.settle.on_lock_outcome(ctx, id, result);
            self.advance(ctx);
        }
    }

    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.settle.on_tick(ctx);
        self.advance(ctx);
    }
}
