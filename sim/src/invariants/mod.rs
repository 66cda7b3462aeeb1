//! Safety checkers, one per invariant of docs/protocol.md, "Invariants" (seven from
//! the design, and acceptor-monotone). Each reads the world's durable state (the replicas'
//! stores), the messages replicas send and the clients' history; none trusts what a
//! protocol core believes about itself.

mod acceptor_monotone;

mod ballot_zero_once;
mod convergence;
mod durable_ack;
mod linearizable_eg;
mod prefix_snapshots;
mod single_value;
mod visible_after_invalidate;
mod vouched_is_current;

use megastore_paxos::cells::{SlotRecord, TRUNCATED, log_column, promise_column};
use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{ReplicaReply, ReplicaRequest, root_row};
use megastore_rowstore::{LATEST, RowRead};
use megastore_types::{Ballot, EgId, Position, ReplicaId};

pub use single_value::ChosenLog;

use crate::history::OpRecord;
use crate::world::World;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's name, as in docs/protocol.md, "Invariants" (or `liveness`).
    pub invariant: &'static str,
    /// Real time (ns) it was seen.
    pub at: u64,
    /// What happened.
    pub detail: String,
}

/// Every checker of one run.
#[derive(Default)]
pub struct Checkers {
    /// The chosen value of every position seen so far (the ground truth).
    pub chosen: ChosenLog,
    grants: ballot_zero_once::Grants,
    bounds: acceptor_monotone::Bounds,
    vouched: vouched_is_current::HeldPrefixes,
    /// What broke.
    pub violations: Vec<Violation>,
}

/// What replica `r` holds at `p` of `eg`, read from its store (durable state).
pub(crate) fn stored_slot(
    world: &World,
    r: ReplicaId,
    eg: &EgId,
    p: Position,
) -> Option<SlotRecord> {
    let store = &world.replicas.get(&r)?.store;
    let cell = store
        .read_cell(&root_row(eg), &log_column(p), LATEST)
        .expect("memory store reads")?;
    Some(postcard::from_bytes(&cell.value).expect("slots decode"))
}

/// The promise replica `r` would reload at `p` of `eg` after a restart (its stored
/// `promise:<p>` cell).
pub(crate) fn stored_promise(
    world: &World,
    r: ReplicaId,
    eg: &EgId,
    p: Position,
) -> Option<Ballot> {
    let store = &world.replicas.get(&r)?.store;
    let cell = store
        .read_cell(&root_row(eg), &promise_column(p), LATEST)
        .expect("memory store reads")?;
    Some(postcard::from_bytes(&cell.value).expect("promises decode"))
}

/// Whether replica `r` holds the chosen value at `p`: its slot has that value, or its
/// log is truncated past `p` (which it did only after applying `p`).
pub(crate) fn holds(
    world: &World,
    chosen: &ChosenLog,
    r: ReplicaId,
    eg: &EgId,
    p: Position,
) -> bool {
    let Some(value) = chosen.get(eg, p) else {
        return false;
    };
    stored_slot(world, r, eg, p).is_some_and(|s| &s.entry == value)
        || stored_truncated(world, r, eg) >= p
}

/// A watermark cell (`truncated`, `applied`, `visible`) in replica `r`'s store.
pub(crate) fn stored_watermark(world: &World, r: ReplicaId, eg: &EgId, column: &[u8]) -> Position {
    let Some(node) = world.replicas.get(&r) else {
        return Position::NONE;
    };
    let cell = node
        .store
        .read_cell(&root_row(eg), column, LATEST)
        .expect("memory store reads");
    cell.map_or(Position::NONE, |c| {
        postcard::from_bytes(&c.value).expect("watermarks decode")
    })
}

/// The truncation point in replica `r`'s store.
pub(crate) fn stored_truncated(world: &World, r: ReplicaId, eg: &EgId) -> Position {
    stored_watermark(world, r, eg, TRUNCATED)
}

impl Checkers {
    fn violation(&mut self, world: &World, invariant: &'static str, detail: String) {
        self.violations.push(Violation {
            invariant,
            at: world.now,
            detail,
        });
    }

    /// After a replica handled `request` and replied `replies`.
    pub fn after_replica_step(
        &mut self,
        world: &World,
        r: ReplicaId,
        request: Option<&ReplicaRequest>,
        replies: &[ReplicaReply],
    ) {
        let Some(request) = request else { return };
        let mut found = Vec::new();
        match request {
            ReplicaRequest::Accept {
                id,
                eg,
                position,
                ballot,
                entry,
                ..
            } => {
                // A vote counts once it is durable, reply or not: a crash right after
                // the write loses the reply, but a learner reading the slots counts it.
                let accepted = replies.iter().any(|reply| {
                    matches!(reply, ReplicaReply::Accept { id: reply_id, result: AcceptResult::Accepted } if reply_id == id)
                }) || stored_slot(world, r, eg, *position)
                    .is_some_and(|slot| slot.ballot == *ballot && &slot.entry == entry);
                if accepted && world.config.topology.is_voter(r) {
                    self.chosen
                        .accepted(world, r, (eg, *position), (*ballot, entry), &mut found);
                }
                self.chosen.observe(world, eg, *position, &mut found);
            }
            ReplicaRequest::MarkVisible { eg, position, .. } => {
                self.chosen.observe(world, eg, *position, &mut found)
            }
            _ => {}
        }
        self.grants
            .after_accept(world, &self.chosen, r, request, &mut found);
        self.bounds
            .after_step(world, r, request, replies, &mut found);
        for (invariant, detail) in found {
            self.violation(world, invariant, detail);
        }
    }

    /// After every event.
    pub fn after_event(&mut self, world: &World) {
        let mut found = Vec::new();
        self.vouched.check(world, &self.chosen, &mut found);
        for (invariant, detail) in found {
            self.violation(world, invariant, detail);
        }
    }

    /// When a client operation finishes.
    pub fn on_op_done(&mut self, world: &World, record: &OpRecord) {
        let mut found = Vec::new();
        durable_ack::on_op_done(&self.chosen, record, &mut found);
        visible_after_invalidate::on_op_done(world, &self.chosen, record, &mut found);
        prefix_snapshots::on_op_done(&self.chosen, record, &mut found);
        linearizable_eg::check_read_state(&self.chosen, record, &mut found);
        for (invariant, detail) in found {
            self.violation(world, invariant, detail);
        }
    }

    /// After the run: the whole-history checks.
    pub fn finish(&mut self, world: &World) {
        let mut found = Vec::new();
        convergence::check(world, &self.chosen, &mut found);
        durable_ack::check_history(&self.chosen, &world.history, &mut found);
        linearizable_eg::check_history(&self.chosen, &world.history, &mut found);
        for (invariant, detail) in found {
            self.violation(world, invariant, detail);
        }
    }
}
