//! Safety checkers, one per invariant of docs/protocol.md, "Invariants" (seven from
//! the design, acceptor-monotone, the global index's global-index, verified-scan and
//! global-scan-complete, the queues' queue-exactly-once-in-order, two-phase commit's
//! multi-group-atomicity and decision-stable, and placement's one-server-per-slot,
//! moves-keep-writes and votes-where-placed), and the liveness checks of the run's end
//! (convergence, decisions-collected).
//! Each reads the run's durable state (the servers' stores), the messages replicas send
//! and the clients' history; none trusts what a protocol core believes about its own
//! progress (one-server-per-slot, like vouched-is-current, asks what a server would
//! answer now).

mod acceptor_monotone;

mod ballot_zero_once;
mod convergence;
mod decision_stable;
mod decisions_collected;
mod durable_ack;
mod global_index;
mod global_scan_complete;
mod linearizable_eg;
mod moves_keep_writes;
mod multi_group_atomicity;
mod one_server_per_slot;
mod open_indexed;
mod prefix_snapshots;
mod queue_exactly_once;
mod single_value;
mod verified_scan;
mod visible_after_invalidate;
mod votes_where_placed;
mod vouched_is_current;

use megastore_paxos::{ReplicaReply, ReplicaRequest};
use megastore_types::{ClientId, EgId, Position, ReplicaId};

pub(crate) use global_scan_complete::FinalScan;
pub use single_value::ChosenLog;

use crate::history::OpRecord;
use crate::observation::Observation;

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
    serving: one_server_per_slot::Reported,
    /// What broke.
    pub violations: Vec<Violation>,
}

/// Whether `replies` vote on request `id`: a promise to a prepare, or an acceptance.
pub(crate) fn voted(id: u64, replies: &[ReplicaReply]) -> bool {
    replies.iter().any(|reply| match reply {
        ReplicaReply::Prepare {
            id: reply_id,
            result: megastore_paxos::messages::PrepareResult::Promised(_),
        } => *reply_id == id,
        ReplicaReply::Accept {
            id: reply_id,
            result,
        } => *reply_id == id && result.accepted(),
        _ => false,
    })
}

/// Whether the server at `r` holds the chosen value at `p`: its slot has that value, or
/// its log is truncated past `p` (which it did only after applying `p`).
pub(crate) fn holds(
    obs: &Observation<'_>,
    chosen: &ChosenLog,
    r: ReplicaId,
    eg: &EgId,
    p: Position,
) -> bool {
    let Some(value) = chosen.get(eg, p) else {
        return false;
    };
    obs.stored_slot(r, eg, p).is_some_and(|s| &s.entry == value) || obs.stored_truncated(r, eg) >= p
}

impl Checkers {
    fn violation(&mut self, obs: &Observation<'_>, invariant: &'static str, detail: String) {
        self.violations.push(Violation {
            invariant,
            at: obs.now,
            detail,
        });
    }

    /// After the replica server at address `r` handled `request` and replied `replies`.
    pub fn after_replica_step(
        &mut self,
        obs: &Observation<'_>,
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
                    matches!(reply, ReplicaReply::Accept { id: reply_id, result } if reply_id == id && result.accepted())
                }) || obs.stored_slot(r, eg, *position)
                    .is_some_and(|slot| slot.ballot == *ballot && &slot.entry == entry);
                // The server at `r` voted as its slot: the slot is the voter counted.
                let voter = obs.slot_of(r);
                if accepted && obs.topology.is_voter(voter) {
                    self.chosen
                        .accepted(obs, voter, (eg, *position), (*ballot, entry), &mut found);
                }
                self.chosen.observe(obs, eg, *position, &mut found);
            }
            ReplicaRequest::MarkVisible { eg, position, .. } => {
                self.chosen.observe(obs, eg, *position, &mut found)
            }
            _ => {}
        }
        self.grants
            .after_accept(obs, &self.chosen, r, request, replies, &mut found);
        self.bounds.after_step(obs, r, request, replies, &mut found);
        votes_where_placed::check(obs, r, request, replies, &mut found);
        for (invariant, detail) in found {
            self.violation(obs, invariant, detail);
        }
    }

    /// Replica `r` crashed (its store keeps what was synced): with a bounded group
    /// cache, its open index must list every group with work left.
    pub fn after_crash(&mut self, obs: &Observation<'_>, r: ReplicaId, bounded_cache: bool) {
        if !bounded_cache {
            return;
        }
        let mut found = Vec::new();
        open_indexed::check(obs, r, &mut found);
        for (invariant, detail) in found {
            self.violation(obs, invariant, detail);
        }
    }

    /// The move of `groups` from the server at `from` to the server at `to` finished
    /// (its placement is stored).
    pub fn on_move_finished(
        &mut self,
        obs: &Observation<'_>,
        servers: (ReplicaId, ReplicaId),
        groups: &megastore_rowstore::KeyRange,
    ) {
        let mut found = Vec::new();
        moves_keep_writes::on_move_finished(obs, servers, groups, &mut found);
        for (invariant, detail) in found {
            self.violation(obs, invariant, detail);
        }
    }

    /// After every event.
    pub fn after_event(&mut self, obs: &Observation<'_>) {
        let mut found = Vec::new();
        self.chosen.observe_placement(obs);
        self.vouched.check(obs, &self.chosen, &mut found);
        self.serving.check(obs, &mut found);
        for (invariant, detail) in found {
            self.violation(obs, invariant, detail);
        }
    }

    /// When a client operation finishes.
    pub fn on_op_done(&mut self, obs: &Observation<'_>, record: &OpRecord) {
        let mut found = Vec::new();
        durable_ack::on_op_done(&self.chosen, record, &mut found);
        visible_after_invalidate::on_op_done(obs, &self.chosen, record, &mut found);
        prefix_snapshots::on_op_done(&self.chosen, record, &mut found);
        linearizable_eg::check_read_state(&self.chosen, record, &mut found);
        verified_scan::on_op_done(&self.chosen, record, &mut found);
        for (invariant, detail) in found {
            self.violation(obs, invariant, detail);
        }
    }

    /// After the run: the whole-history checks.
    pub fn finish(&mut self, obs: &Observation<'_>) {
        let mut found = Vec::new();
        convergence::check(obs, &self.chosen, &mut found);
        global_index::check(obs, &self.chosen, &mut found);
        durable_ack::check_history(&self.chosen, obs.history, &mut found);
        linearizable_eg::check_history(&self.chosen, obs.history, &mut found);
        queue_exactly_once::check(&self.chosen, obs.history, &mut found);
        multi_group_atomicity::check(&self.chosen, obs.history, obs.now, &mut found);
        decision_stable::check(&self.chosen, &mut found);
        if let Some(before) = obs.decisions_finished_before {
            decisions_collected::check(&self.chosen, before, &mut found);
        }
        for (invariant, detail) in found {
            self.violation(obs, invariant, detail);
        }
    }

    /// After the run: each client's scan of the whole global index against the
    /// groups' mirrors (*global-scan-complete*).
    pub(crate) fn final_scans(&mut self, obs: &Observation<'_>, scans: &[(ClientId, &FinalScan)]) {
        let mut found = Vec::new();
        global_scan_complete::check(&self.chosen, scans, &mut found);
        for (invariant, detail) in found {
            self.violation(obs, invariant, detail);
        }
    }
}
