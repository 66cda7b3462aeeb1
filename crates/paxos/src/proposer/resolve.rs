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

/// Settling one position to learn whether one transaction holds it.
#[derive(Debug)]
pub(crate) struct Resolve {
    txn: TxnId,
    settle: Settle,
    /// The `resolve_without_settling` knob: answer before the position is decided.
    guess: bool,
    /// The `resolve_any_remembered_txn` knob.
    any_remembered: bool,
}

impl Resolve {
    /// Starts settling `position` of `eg`, which `txn` may hold.
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        position: Position,
        txn: TxnId,
    ) -> Self {
        Self {
            txn,
            guess: ctx.config.bugs.resolve_without_settling(),
            any_remembered: ctx.config.bugs.resolve_any_remembered_txn(),
            settle: Settle::start(ctx, eg, position, None, None),
        }
    }

    /// The resolution, once the position is settled (or settling gave up).
    pub(crate) fn result(&self) -> Option<Resolution> {
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
        }
    }

    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) {
        self.settle.on_coordinator_reply(ctx, from, reply);
    }

    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        if self.settle.owns(id) {
            self.settle.on_lock_outcome(ctx, id, result);
        }
    }

    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.settle.on_tick(ctx);
    }
}
