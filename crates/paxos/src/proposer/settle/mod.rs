//! Settling one log position: find the chosen value (learn it, or choose one with
//! Paxos), perform the invalidation step unless it was learned from a visible mark,
//! then mark it visible everywhere (docs/protocol.md, write steps 2–6; paper §4.6).
//!
//! ```text
//!  writer with a leader:  FastGrant ─► FastAccept ─┐
//!  writer without:        Prepare ─► Accept ───────┼─► Invalidate ─► MarkVisible ─► Done
//!  reader / sweep:        Learn ─► [Patience ─► Learn] ─► (Prepare ─► Accept, proposing a no-op) ─┘
//!  any phase: a replica that has the position visible ends the search (no step 5)
//! ```
//!
//! One file per phase, each handing the next one value: `choose` (learn, fast path,
//! two-phase Paxos, backoff) ends in a [`Chosen`] — the ballot, the entry and the
//! voters known to hold it; `invalidate` (write step 5) takes it and spares its
//! holders; `visible` (write step 6, and a visible answer ending the search) marks its
//! ballot and entry everywhere. This file holds the state, the request bookkeeping and
//! the dispatch of answers to the phase that asked.

mod choose;
mod invalidate;
mod visible;

use std::collections::{BTreeMap, BTreeSet};

use megastore_placement::ServerId;
use megastore_types::{Ballot, EgId, Position, ReplicaId, Time, TxnId};

use super::Ctx;
use crate::cells::SlotRecord;
use crate::entry::LogEntry;
use crate::messages::{
    AcceptResult, ChosenTxn, PrepareResult, ReplicaError, ReplicaReply, ReplicaRequest,
};

/// How many times a settle's backoff window may double.
const BACKOFF_DOUBLINGS_MAX: u32 = 3;

/// What choosing hands the invalidation step: the value chosen at the position, the
/// ballot it was chosen at, and the voters known to have accepted it there (they hold
/// it, so their coordinators need no invalidate).
#[derive(Debug, Clone)]
struct Chosen {
    ballot: Ballot,
    entry: LogEntry,
    holders: BTreeSet<ReplicaId>,
}

/// How settling ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SettleOutcome {
    /// The value is chosen, its invalidation step is done, and visibility marks are on
    /// their way to every replica.
    Settled {
        /// The ballot it was chosen (or found visible) at.
        ballot: Ballot,
        /// The chosen value.
        entry: LogEntry,
    },
    /// Gave up (no majority within the rounds allowed, or the invalidation step
    /// stalled past its patience).
    Failed,
}

#[derive(Debug)]
enum Phase {
    FastGrant {
        leader: ReplicaId,
        deadline: Time,
    },
    FastAccept {
        deadline: Time,
    },
    Learn {
        replies: BTreeMap<ReplicaId, Option<SlotRecord>>,
        sent: Time,
        deadline: Time,
    },
    /// A writer's fast-path accept was found on its way: give it about the round trip
    /// the learn took before running Paxos over it.
    Patience {
        until: Time,
    },
    Prepare {
        ballot: Ballot,
        promises: BTreeMap<ReplicaId, Option<(Ballot, LogEntry)>>,
        rejects: BTreeSet<ReplicaId>,
        deadline: Time,
    },
    Accept {
        deadline: Time,
    },
    Backoff {
        until: Time,
    },
    Invalidate {
        chosen: Chosen,
        pending: BTreeMap<ReplicaId, Invalidation>,
        started: Time,
    },
    Done(SettleOutcome),
}

/// The invalidation of one full replica's coordinator.
#[derive(Debug)]
struct Invalidation {
    /// Retry (and ask the lock service) at this time.
    retry_at: Time,
    /// The outstanding lock service query, if any.
    lock_query: Option<u64>,
    /// Whether the invalidate went out (not while the replica's accept may still
    /// come).
    sent: bool,
    /// The server whose coordinator is invalidated (`None`: the proposer is not
    /// placed, and the replica runs on one server of its own).
    server: Option<ServerId>,
    /// The invalidates sent to `server`: only their answers count.
    requests: BTreeSet<u64>,
    /// The placement read confirming that `server`, whose coordinator cannot vouch,
    /// still holds the slot (its lock query id).
    confirming: Option<u64>,
}

/// The value being pushed at one ballot, and who has accepted it there.
#[derive(Debug, Clone)]
struct Round {
    ballot: Ballot,
    value: LogEntry,
    acks: BTreeSet<ReplicaId>,
    rejects: BTreeSet<ReplicaId>,
}

/// Settles one position of one group.
#[derive(Debug)]
pub(crate) struct Settle {
    eg: EgId,
    position: Position,
    /// The writer's value; `None` when only learning (or proposing a no-op).
    proposal: Option<LogEntry>,
    phase: Phase,
    /// The current round's requests: id → replica.
    outstanding: BTreeMap<u64, ReplicaId>,
    /// Requests of the round that chose the value, whose late accepts still count.
    deciding: BTreeMap<u64, ReplicaId>,
    /// When the current round's accepts went out.
    accepts_sent: Time,
    /// Every request and lock query this settle sent.
    mine: BTreeSet<u64>,
    round: Option<Round>,
    max_seen: Ballot,
    rounds: u32,
    /// The position leader refused the fast path's grant: ballot 0 went to this
    /// transaction.
    grant_taken_by: Option<TxnId>,
    /// The position leader granted ballot 0 while refusing another client's request
    /// ([`AcceptResult::GrantedContended`]).
    grant_contended: bool,
    /// Replicas that answered without the value (for the knob that invalidates only
    /// those).
    #[cfg(feature = "sim-bugs")]
    seen_lacking: BTreeSet<ReplicaId>,
    /// An accept carrying `proposal` has been sent.
    sent_proposal: bool,
    /// A replica truncated the position but remembered whose entry was chosen there.
    truncated_chosen: Option<ChosenTxn>,
    /// Voters that answered that the position is truncated there: chosen long ago,
    /// and once a majority says so no round can learn or choose anything.
    truncated_at: BTreeSet<ReplicaId>,
    /// Whether it already waited for a fast-path write in flight (once per settle).
    waited_for_writer: bool,
}

impl Settle {
    /// Starts settling `position`. A writer passes its value and, if it knows one, the
    /// position leader; everyone else passes `None` and learns (or proposes a no-op).
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        position: Position,
        proposal: Option<LogEntry>,
        leader: Option<ReplicaId>,
    ) -> Settle {
        Self::start_after(ctx, eg, position, proposal, leader, None)
    }

    /// [`Settle::start`] by a writer that itself finished `position - 1`, chosen at
    /// ballot `previous_visible`: its grant request says so
    /// ([`ReplicaRequest::Accept`]'s `previous_visible`).
    pub(crate) fn start_after<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        position: Position,
        proposal: Option<LogEntry>,
        leader: Option<ReplicaId>,
        previous_visible: Option<Ballot>,
    ) -> Settle {
        let mut settle = Settle {
            eg,
            position,
            proposal,
            phase: Phase::Backoff { until: ctx.now },
            outstanding: BTreeMap::new(),
            deciding: BTreeMap::new(),
            accepts_sent: ctx.now,
            mine: BTreeSet::new(),
            round: None,
            max_seen: Ballot::ZERO,
            rounds: 0,
            grant_taken_by: None,
            grant_contended: false,
            #[cfg(feature = "sim-bugs")]
            seen_lacking: BTreeSet::new(),
            sent_proposal: false,
            truncated_chosen: None,
            truncated_at: BTreeSet::new(),
            waited_for_writer: false,
        };
        let leader = leader.filter(|l| ctx.replica_set(&settle.eg).is_voter(*l));
        let voters_at = ctx.replica_set(&settle.eg).voters_since();
        match (&settle.proposal, leader) {
            (Some(entry), Some(leader)) => {
                let entry = entry.clone();
                settle.round = Some(Round {
                    ballot: Ballot::ZERO,
                    value: entry.clone(),
                    acks: BTreeSet::new(),
                    rejects: BTreeSet::new(),
                });
                settle.send(ctx, leader, |id, eg| ReplicaRequest::Accept {
                    id,
                    eg,
                    position,
                    ballot: Ballot::ZERO,
                    entry,
                    grant: true,
                    previous_visible,
                    voters_at,
                });
                settle.sent_proposal = true;
                settle.phase = Phase::FastGrant {
                    leader,
                    deadline: ctx.now + ctx.config.timeouts.leader,
                };
            }
            (Some(_), None) => settle.prepare(ctx),
            (None, _) => settle.learn(ctx),
        }
        settle
    }

    /// Whether request (or lock query) `id` was sent by this settle.
    pub(crate) fn owns(&self, id: u64) -> bool {
        self.mine.contains(&id)
    }

    /// How it ended, once it has.
    pub(crate) fn outcome(&self) -> Option<&SettleOutcome> {
        match &self.phase {
            Phase::Done(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// Whose entry was chosen at the position, when a replica truncated it long ago
    /// and remembered.
    pub(crate) fn truncated_chosen(&self) -> Option<&ChosenTxn> {
        self.truncated_chosen.as_ref()
    }

    /// The chosen value, from the moment it is chosen (during the invalidation step,
    /// and once settled).
    pub(crate) fn chosen(&self) -> Option<(Ballot, &LogEntry)> {
        match &self.phase {
            Phase::Invalidate { chosen, .. } => Some((chosen.ballot, &chosen.entry)),
            Phase::Done(SettleOutcome::Settled { ballot, entry }) => Some((*ballot, entry)),
            _ => None,
        }
    }

    /// Whether an accept carrying the writer's value went out (so it may be chosen
    /// even if this settle fails).
    pub(crate) fn sent_proposal(&self) -> bool {
        self.sent_proposal
    }

    /// The position.
    pub(crate) fn position(&self) -> Position {
        self.position
    }

    /// When [`Settle::on_tick`] next has something to do.
    pub(crate) fn deadline(&self) -> Option<Time> {
        match &self.phase {
            Phase::FastGrant { deadline, .. }
            | Phase::FastAccept { deadline }
            | Phase::Learn { deadline, .. }
            | Phase::Prepare { deadline, .. }
            | Phase::Accept { deadline } => Some(*deadline),
            Phase::Backoff { until } | Phase::Patience { until } => Some(*until),
            Phase::Invalidate { pending, .. } => pending.values().map(|p| p.retry_at).min(),
            Phase::Done(_) => None,
        }
    }

    fn send<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        to: ReplicaId,
        build: impl FnOnce(u64, EgId) -> ReplicaRequest,
    ) {
        let eg = self.eg.clone();
        let id = ctx.send_replica(to, |id| build(id, eg));
        self.outstanding.insert(id, to);
        self.mine.insert(id);
    }

    /// The group's voters, by the proposer's placement.
    fn voters<K>(&self, ctx: &Ctx<'_, K>) -> Vec<ReplicaId> {
        ctx.replica_set(&self.eg).voters()
    }

    fn read_only<K>(&self, ctx: &Ctx<'_, K>) -> Vec<ReplicaId> {
        ctx.replica_set(&self.eg)
            .of_kind(megastore_types::ReplicaKind::ReadOnly)
    }

    fn majority<K>(&self, ctx: &Ctx<'_, K>) -> usize {
        ctx.replica_set(&self.eg).majority()
    }

    /// Forgets the answers of replicas that are not voters by the proposer's
    /// placement now, before anything is counted. Every count is over one set, the
    /// newest it read: an answer of a replica that set no longer holds counts for
    /// nothing, even if given while it was a voter, or a majority of the smaller set
    /// could be made up with it — a count over neither set (docs/protocol.md, "Voter
    /// changes").
    fn forget_dropped_voters<K>(&mut self, ctx: &Ctx<'_, K>) {
        if ctx.config.bugs.count_votes_of_removed() {
            return;
        }
        let set = ctx.replica_set(&self.eg);
        let voter = |r: &ReplicaId| set.is_voter(*r);
        match &mut self.phase {
            Phase::Learn { replies, .. } => replies.retain(|r, _| voter(r)),
            Phase::Prepare {
                promises, rejects, ..
            } => {
                promises.retain(|r, _| voter(r));
                rejects.retain(voter);
            }
            _ => {}
        }
        if let Some(round) = &mut self.round {
            round.acks.retain(voter);
            round.rejects.retain(voter);
        }
        self.truncated_at.retain(voter);
    }

    /// Rounds started after the first attempt — prepares, or learns again — (none on
    /// the fast path).
    pub(crate) fn later_rounds(&self) -> u32 {
        self.rounds
    }

    /// The transaction the position leader granted ballot 0 to instead, if it said so.
    pub(crate) fn grant_taken_by(&self) -> Option<TxnId> {
        self.grant_taken_by
    }

    /// Whether the position leader granted this settle's value ballot 0 while another
    /// client's grant request was refused (a contended group).
    pub(crate) fn grant_contended(&self) -> bool {
        self.grant_contended
    }

    /// Handles a replica's reply (ignores replies to other rounds).
    pub(crate) fn on_replica_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: ReplicaReply,
    ) {
        let id = reply.id();
        // A late accept from the deciding round makes its sender a holder.
        if let Phase::Invalidate { .. } = self.phase {
            if self.deciding.contains_key(&id)
                && let ReplicaReply::Accept { result, .. } = &reply
                && result.accepted()
            {
                self.invalidated(ctx, from);
            }
            return;
        }
        // A visible value is final whichever round asked: a slow replica's answer to
        // an earlier round must not be lost to rounds that others keep refusing.
        let visible = match &reply {
            ReplicaReply::Prepare {
                result: PrepareResult::Visible(b, e),
                ..
            }
            | ReplicaReply::Accept {
                result: AcceptResult::Visible(b, e),
                ..
            } => Some((*b, e.clone())),
            ReplicaReply::Log { slot: Some(s), .. } if s.visible => {
                Some((s.ballot, s.entry.clone()))
            }
            _ => None,
        };
        if let Some((ballot, entry)) = visible
            && self.mine.contains(&id)
            && self.chosen().is_none()
            && self.outcome().is_none()
        {
            self.outstanding.remove(&id);
            self.learned_visible(ctx, ballot, entry);
            return;
        }
        // Truncation is permanent too: a slower replica's "truncated" that arrives after
        // its round backed off must still count, or a position a majority truncated
        // would be asked about for ever (the others' answers come first every round).
        let truncated = matches!(
            reply,
            ReplicaReply::Prepare {
                result: PrepareResult::Truncated,
                ..
            } | ReplicaReply::Accept {
                result: AcceptResult::Truncated,
                ..
            }
        );
        if truncated
            && self.mine.contains(&id)
            && self.outcome().is_none()
            && !self.outstanding.contains_key(&id)
        {
            self.truncated_everywhere(ctx, from);
            return;
        }
        if self.outstanding.remove(&id).is_none() {
            return;
        }
        match reply {
            ReplicaReply::Prepare { result, .. } => self.on_prepare_reply(ctx, from, result),
            ReplicaReply::Accept { result, .. } => self.on_accept_reply(ctx, from, result),
            ReplicaReply::Log { slot, .. } => self.on_log_reply(ctx, from, slot),
            ReplicaReply::Error { error, .. } => self.on_error(ctx, from, error),
            _ => {}
        }
    }

    /// A replica could not serve the request (truncated, unreadable, or rejoining after
    /// losing its state): it neither holds nor promises anything for this round.
    fn on_error<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        error: ReplicaError,
    ) {
        if let ReplicaError::Truncated {
            chosen: Some(chosen),
            ..
        } = error
        {
            // Truncated there, so chosen (and applied everywhere) long ago: what that
            // replica remembers is final. The settle goes on — a reader catching up
            // needs the entry itself, which a replica that has not truncated yet may
            // still hold — and a resolution, which needs only this, ends here.
            self.truncated_chosen = Some(chosen);
        }
        let voter = self.voters(ctx).contains(&from);
        match &mut self.phase {
            Phase::FastGrant { .. } => self.prepare(ctx),
            // A read-only replica was asked only for a visible mark.
            Phase::Learn { .. } if !voter => {}
            Phase::Learn { replies, .. } => {
                replies.insert(from, None);
                #[cfg(feature = "sim-bugs")]
                self.seen_lacking.insert(from);
                self.decide_learn(ctx);
            }
            Phase::Prepare { rejects, .. } => {
                rejects.insert(from);
                self.forget_dropped_voters(ctx);
                let Phase::Prepare { rejects, .. } = &self.phase else {
                    return;
                };
                if rejects.len() > self.voters(ctx).len() - self.majority(ctx) {
                    self.backoff(ctx);
                }
            }
            Phase::FastAccept { .. } | Phase::Accept { .. } => self.accept_refused(ctx, from),
            _ => {}
        }
    }

    /// `from` answered that the position is truncated there; with a majority saying so,
    /// gives up at once (returns true) rather than backing off round after round.
    fn truncated_everywhere<K>(&mut self, ctx: &Ctx<'_, K>, from: ReplicaId) -> bool {
        self.truncated_at.insert(from);
        self.forget_dropped_voters(ctx);
        if self.truncated_at.len() < self.majority(ctx) {
            return false;
        }
        self.outstanding.clear();
        self.phase = Phase::Done(SettleOutcome::Failed);
        true
    }

    /// A commit of this same proposer just settled this position (chosen and marked
    /// visible, its own entry or another it learned): a learn still waiting for the
    /// write in flight there — for its answers, or out its patience — asks again now,
    /// when the replicas it asks have the mark on its way or already, instead of a
    /// round trip or two later. Only a wait ends early: learning is always safe, and a
    /// settle that is past learning is left alone. Returns whether it was waiting.
    pub(crate) fn writer_settled<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) -> bool {
        let waiting = matches!(self.phase, Phase::Learn { .. } | Phase::Patience { .. });
        if waiting {
            self.learn(ctx);
        }
        waiting
    }

    /// Handles the passage of time.
    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let now = ctx.now;
        match &mut self.phase {
            Phase::FastGrant { deadline, .. } | Phase::FastAccept { deadline }
                if now >= *deadline =>
            {
                self.prepare(ctx)
            }
            Phase::Learn { deadline, .. } if now >= *deadline => {
                self.rounds += 1;
                if self.rounds > ctx.config.timeouts.max_rounds {
                    self.phase = Phase::Done(SettleOutcome::Failed);
                } else {
                    self.learn(ctx);
                }
            }
            Phase::Prepare { deadline, .. } | Phase::Accept { deadline } if now >= *deadline => {
                self.backoff(ctx)
            }
            Phase::Backoff { until } if now >= *until => self.prepare(ctx),
            Phase::Patience { until } if now >= *until => self.learn(ctx),
            Phase::Invalidate { started, .. } => {
                if now.since(*started) > ctx.config.timeouts.invalidate_patience {
                    self.phase = Phase::Done(SettleOutcome::Failed);
                    return;
                }
                self.retry_invalidations(ctx);
            }
            _ => {}
        }
    }
}
