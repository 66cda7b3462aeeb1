//! Settling one log position: find the chosen value (learn it, or choose one with
//! Paxos), perform the invalidation step unless it was learned from a visible mark,
//! then mark it visible everywhere (docs/protocol.md, write steps 2–6; paper §4.6).
//!
//! ```text
//!  writer with a leader:  FastGrant ─► FastAccept ─┐
//!  writer without:        Prepare ─► Accept ───────┼─► Invalidate ─► MarkVisible ─► Done
//!  reader / sweep:        Learn ─► (Prepare ─► Accept, proposing a no-op) ─┘
//!  any phase: a replica that has the position visible ends the search (no step 5)
//! ```

use std::collections::{BTreeMap, BTreeSet};

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest, lock_name};
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_types::{Ballot, EgId, Position, ReplicaId, ReplicaKind, Time};

use super::Ctx;
use crate::cells::SlotRecord;
use crate::entry::LogEntry;
use crate::messages::{
    AcceptResult, ChosenTxn, PrepareResult, ReplicaError, ReplicaReply, ReplicaRequest,
};

/// How many times a settle's backoff window may double.
const BACKOFF_DOUBLINGS_MAX: u32 = 3;

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
        deadline: Time,
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
    /// Every request and lock query this settle sent.
    mine: BTreeSet<u64>,
    round: Option<Round>,
    max_seen: Ballot,
    rounds: u32,
    /// Replicas that answered without the value (for the knob that invalidates only
    /// those).
    seen_lacking: BTreeSet<ReplicaId>,
    /// An accept carrying `proposal` has been sent.
    sent_proposal: bool,
    /// A replica truncated the position but remembered whose entry was chosen there.
    truncated_chosen: Option<ChosenTxn>,
    /// Voters that answered that the position is truncated there: chosen long ago,
    /// and once a majority says so no round can learn or choose anything.
    truncated_at: BTreeSet<ReplicaId>,
    /// The value chosen, as soon as it is (before the invalidation step).
    chosen: Option<(Ballot, LogEntry)>,
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
        let mut settle = Settle {
            eg,
            position,
            proposal,
            phase: Phase::Backoff { until: ctx.now },
            outstanding: BTreeMap::new(),
            deciding: BTreeMap::new(),
            mine: BTreeSet::new(),
            round: None,
            max_seen: Ballot::ZERO,
            rounds: 0,
            seen_lacking: BTreeSet::new(),
            sent_proposal: false,
            truncated_chosen: None,
            truncated_at: BTreeSet::new(),
            chosen: None,
        };
        let leader = leader.filter(|l| ctx.config.topology.is_voter(*l));
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
    pub(crate) fn truncated_chosen(&self) -> Option<ChosenTxn> {
        self.truncated_chosen
    }

    /// The chosen value, from the moment it is chosen.
    pub(crate) fn chosen(&self) -> Option<&(Ballot, LogEntry)> {
        self.chosen.as_ref()
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
            Phase::Backoff { until } => Some(*until),
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

    fn voters<K>(ctx: &Ctx<'_, K>) -> Vec<ReplicaId> {
        ctx.config.topology.voters().collect()
    }

    fn majority<K>(ctx: &Ctx<'_, K>) -> usize {
        ctx.config.topology.majority()
    }

    fn learn<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.outstanding.clear();
        let position = self.position;
        for r in Self::voters(ctx) {
            self.send(ctx, r, |id, eg| ReplicaRequest::ReadLog {
                id,
                eg,
                position,
            });
        }
        self.phase = Phase::Learn {
            replies: BTreeMap::new(),
            deadline: ctx.now + ctx.config.timeouts.rpc,
        };
    }

    /// Rounds started after the first attempt — prepares, or learns again — (none on
    /// the fast path).
    pub(crate) fn later_rounds(&self) -> u32 {
        self.rounds
    }

    fn prepare<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.rounds += 1;
        if self.rounds > ctx.config.timeouts.max_rounds {
            self.phase = Phase::Done(SettleOutcome::Failed);
            return;
        }
        self.outstanding.clear();
        let ballot = Ballot::next_above(self.max_seen, ctx.config.proposer);
        self.max_seen = ballot;
        let position = self.position;
        for r in Self::voters(ctx) {
            self.send(ctx, r, |id, eg| ReplicaRequest::Prepare {
                id,
                eg,
                position,
                ballot,
            });
        }
        let deadline = ctx.now + ctx.config.timeouts.rpc;
        self.phase = Phase::Prepare {
            ballot,
            promises: BTreeMap::new(),
            rejects: BTreeSet::new(),
            deadline,
        };
    }

    /// Waits a random time before the next round; the window doubles with every round
    /// this settle lost (up to [`BACKOFF_DOUBLINGS_MAX`] times), so that proposers
    /// duelling over one position spread out however many they are.
    fn backoff<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.outstanding.clear();
        let doublings = self.rounds.saturating_sub(1).min(BACKOFF_DOUBLINGS_MAX);
        let window = ctx.config.timeouts.backoff * (1 << doublings);
        let until = ctx.now + ctx.random_up_to(window);
        self.phase = Phase::Backoff { until };
    }

    /// Sends the round's value to every voter (`except` has it already).
    fn accept<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, except: Option<ReplicaId>) {
        self.outstanding.clear();
        let round = self.round.clone().expect("a round is set before accepting");
        if Some(&round.value) == self.proposal.as_ref() {
            self.sent_proposal = true;
        }
        let position = self.position;
        for r in Self::voters(ctx).into_iter().filter(|r| Some(*r) != except) {
            let (ballot, entry) = (round.ballot, round.value.clone());
            self.send(ctx, r, |id, eg| ReplicaRequest::Accept {
                id,
                eg,
                position,
                ballot,
                entry,
                grant: false,
            });
        }
        self.deciding = self.outstanding.clone();
        let deadline = ctx.now + ctx.config.timeouts.rpc;
        self.phase = if round.ballot.is_zero() {
            Phase::FastAccept { deadline }
        } else {
            Phase::Accept { deadline }
        };
        self.check_chosen(ctx);
    }

    /// A majority accepted the round's value at one ballot: it is chosen.
    fn check_chosen<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let Some(round) = &self.round else { return };
        if round.acks.len() >= Self::majority(ctx) {
            let (ballot, value, holders) = (round.ballot, round.value.clone(), round.acks.clone());
            self.on_chosen(ctx, ballot, value, holders);
        }
    }

    /// Write step 5 for a value just chosen (not learned from a visible mark).
    fn on_chosen<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        ballot: Ballot,
        value: LogEntry,
        holders: BTreeSet<ReplicaId>,
    ) {
        self.chosen = Some((ballot, value.clone()));
        self.round = Some(Round {
            ballot,
            value,
            acks: holders.clone(),
            rejects: BTreeSet::new(),
        });
        self.outstanding.clear();
        let bugs = ctx.config.bugs;
        if bugs.skip_invalidate {
            self.mark_visible(ctx);
            return;
        }
        let targets: Vec<ReplicaId> = ctx
            .config
            .topology
            .of_kind(ReplicaKind::Full)
            .filter(|r| !holders.contains(r))
            .filter(|r| !bugs.invalidate_only_seen_lacking || self.seen_lacking.contains(r))
            .collect();
        let mut pending = BTreeMap::new();
        for r in targets {
            self.invalidate(ctx, r);
            pending.insert(
                r,
                Invalidation {
                    retry_at: ctx.now + ctx.config.timeouts.invalidate,
                    lock_query: None,
                },
            );
        }
        self.phase = Phase::Invalidate {
            pending,
            started: ctx.now,
        };
        self.finish_invalidation(ctx);
    }

    fn invalidate<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, r: ReplicaId) {
        let (eg, position) = (self.eg.clone(), self.position);
        let id = ctx.send_coordinator(r, |id| CoordinatorRequest::Invalidate { id, eg, position });
        self.outstanding.insert(id, r);
        self.mine.insert(id);
    }

    /// Replica `r` no longer needs invalidating.
    fn invalidated<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, r: ReplicaId) {
        if let Phase::Invalidate { pending, .. } = &mut self.phase {
            pending.remove(&r);
        }
        self.finish_invalidation(ctx);
    }

    fn finish_invalidation<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        if matches!(&self.phase, Phase::Invalidate { pending, .. } if pending.is_empty()) {
            self.mark_visible(ctx);
        }
    }

    /// Write step 6: only now is the visible mark written anywhere.
    fn mark_visible<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let (ballot, entry) = self
            .chosen
            .clone()
            .expect("marking visible follows choosing");
        let position = self.position;
        let replicas: Vec<ReplicaId> = ctx
            .config
            .topology
            .replicas()
            .iter()
            .map(|r| r.id)
            .collect();
        self.outstanding.clear();
        for r in replicas {
            let entry = entry.clone();
            self.send(ctx, r, |id, eg| ReplicaRequest::MarkVisible {
                id,
                eg,
                position,
                ballot,
                entry,
            });
        }
        self.outstanding.clear();
        self.phase = Phase::Done(SettleOutcome::Settled { ballot, entry });
    }

    /// The value is visible somewhere: its invalidation step was done by whoever
    /// marked it, so no step 5 here.
    fn learned_visible<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        ballot: Ballot,
        entry: LogEntry,
    ) {
        self.chosen = Some((ballot, entry));
        self.mark_visible(ctx);
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
                && let ReplicaReply::Accept {
                    result: AcceptResult::Accepted,
                    ..
                } = reply
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
            && self.chosen.is_none()
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
        match &mut self.phase {
            Phase::FastGrant { .. } => self.prepare(ctx),
            Phase::Learn { replies, .. } => {
                replies.insert(from, None);
                self.seen_lacking.insert(from);
                self.decide_learn(ctx);
            }
            Phase::Prepare { rejects, .. } => {
                rejects.insert(from);
                let refused = rejects.len();
                if refused > Self::voters(ctx).len() - Self::majority(ctx) {
                    self.backoff(ctx);
                }
            }
            Phase::FastAccept { .. } | Phase::Accept { .. } => self.accept_refused(ctx, from),
            _ => {}
        }
    }

    fn on_log_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        slot: Option<SlotRecord>,
    ) {
        // (A visible slot never gets here: `on_replica_reply` takes every visible
        // answer first.)
        let Phase::Learn { replies, .. } = &mut self.phase else {
            return;
        };
        if slot.is_none() {
            self.seen_lacking.insert(from);
        }
        replies.insert(from, slot);
        self.decide_learn(ctx);
    }

    /// With a majority of answers: a value accepted by a majority at one ballot is
    /// chosen; otherwise run Paxos (which adopts any accepted value, or a no-op).
    fn decide_learn<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let majority = Self::majority(ctx);
        let needed = if ctx.config.bugs.learn_from_single_accept {
            1
        } else {
            majority
        };
        let Phase::Learn { replies, .. } = &self.phase else {
            return;
        };
        if replies.len() < majority {
            return;
        }
        let mut by_value: BTreeMap<(Ballot, Vec<u8>), (LogEntry, BTreeSet<ReplicaId>)> =
            BTreeMap::new();
        for (r, slot) in replies {
            if let Some(s) = slot {
                let key = (s.ballot, crate::cells::encode(&s.entry));
                by_value
                    .entry(key)
                    .or_insert_with(|| (s.entry.clone(), BTreeSet::new()))
                    .1
                    .insert(*r);
            }
        }
        let answered: BTreeSet<ReplicaId> = replies.keys().copied().collect();
        match by_value
            .into_iter()
            .find(|(_, (_, holders))| holders.len() >= needed)
        {
            Some(((ballot, _), (entry, holders))) => {
                self.seen_lacking.extend(answered.difference(&holders));
                self.on_chosen(ctx, ballot, entry, holders);
            }
            None => self.prepare(ctx),
        }
    }

    fn on_prepare_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        result: PrepareResult,
    ) {
        if !matches!(self.phase, Phase::Prepare { .. }) {
            return;
        }
        if matches!(result, PrepareResult::Truncated) && self.truncated_everywhere(ctx, from) {
            return;
        }
        let majority = Self::majority(ctx);
        let voters = Self::voters(ctx).len();
        let bugs = ctx.config.bugs;
        let Phase::Prepare {
            ballot,
            promises,
            rejects,
            ..
        } = &mut self.phase
        else {
            return;
        };
        match result {
            PrepareResult::Promised(accepted) => {
                promises.insert(from, accepted);
            }
            PrepareResult::Rejected { promised } => {
                self.max_seen = self.max_seen.max(promised);
                rejects.insert(from);
            }
            // Visible: taken by `on_replica_reply` before any phase sees it.
            PrepareResult::Truncated | PrepareResult::Visible(..) => {
                rejects.insert(from);
            }
        }
        if promises.len() >= majority {
            // Adopt the value accepted at the highest ballot among the promises; if
            // none, propose our own (or a no-op).
            let highest = promises.values().flatten().max_by_key(|(b, _)| *b).cloned();
            if let Some((b, _)) = &highest {
                let values: BTreeSet<Vec<u8>> = promises
                    .values()
                    .flatten()
                    .filter(|(other, _)| other == b)
                    .map(|(_, e)| crate::cells::encode(e))
                    .collect();
                debug_assert!(
                    values.len() == 1
                        || bugs.grant_ballot0_twice
                        || bugs.forget_promise_on_restart
                        || bugs.leader_from_unchosen_entry
                        || bugs.rejoin_as_voter,
                    "two values accepted at ballot {b}: ballot-zero-once is broken"
                );
            }
            let ballot = *ballot;
            let value = match highest {
                Some((_, entry)) => entry,
                None => self.proposal.clone().unwrap_or_else(LogEntry::noop),
            };
            self.round = Some(Round {
                ballot,
                value,
                acks: BTreeSet::new(),
                rejects: BTreeSet::new(),
            });
            self.accept(ctx, None);
        } else if rejects.len() > voters - majority {
            self.backoff(ctx);
        }
    }

    fn on_accept_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        result: AcceptResult,
    ) {
        match result {
            // (`on_replica_reply` takes visible answers first; kept for exhaustiveness.)
            AcceptResult::Visible(ballot, entry) => self.learned_visible(ctx, ballot, entry),
            AcceptResult::Accepted => {
                if let Phase::FastGrant { leader, .. } = self.phase {
                    // The leader granted ballot 0: ask everyone else.
                    if let Some(round) = &mut self.round {
                        round.acks.insert(leader);
                    }
                    self.accept(ctx, Some(leader));
                    return;
                }
                if let Some(round) = &mut self.round {
                    round.acks.insert(from);
                }
                self.check_chosen(ctx);
            }
            AcceptResult::Rejected { .. }
            | AcceptResult::GrantRefused(_)
            | AcceptResult::Truncated => {
                if let AcceptResult::Rejected { promised } = result {
                    self.max_seen = self.max_seen.max(promised);
                }
                if matches!(result, AcceptResult::Truncated) && self.truncated_everywhere(ctx, from)
                {
                    return;
                }
                self.accept_refused(ctx, from);
            }
        }
    }

    /// `from` answered that the position is truncated there; with a majority saying so,
    /// gives up at once (returns true) rather than backing off round after round.
    fn truncated_everywhere<K>(&mut self, ctx: &Ctx<'_, K>, from: ReplicaId) -> bool {
        self.truncated_at.insert(from);
        if self.truncated_at.len() < Self::majority(ctx) {
            return false;
        }
        self.outstanding.clear();
        self.phase = Phase::Done(SettleOutcome::Failed);
        true
    }

    /// `from` did not accept the round's value.
    fn accept_refused<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, from: ReplicaId) {
        let majority = Self::majority(ctx);
        let voters = Self::voters(ctx).len();
        self.seen_lacking.insert(from);
        if matches!(self.phase, Phase::FastGrant { .. }) {
            self.prepare(ctx);
            return;
        }
        let Some(round) = &mut self.round else { return };
        round.rejects.insert(from);
        if round.rejects.len() > voters - majority {
            if round.ballot.is_zero() {
                self.prepare(ctx);
            } else {
                self.backoff(ctx);
            }
        }
    }

    /// Handles a coordinator's acknowledgement of an invalidate.
    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) {
        if let CoordinatorReply::Invalidated { id } = reply
            && self.outstanding.remove(&id).is_some()
        {
            self.invalidated(ctx, from);
        }
    }

    /// Handles the lock service's answer about a coordinator's lock: lapsed (or
    /// revoked and lapsed) means that coordinator needs no invalidate. The query was
    /// made after the value was chosen, as the rule requires.
    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        let Phase::Invalidate { pending, .. } = &mut self.phase else {
            return;
        };
        let Some(r) = pending
            .iter()
            .find(|(_, p)| p.lock_query == Some(id))
            .map(|(r, _)| *r)
        else {
            return;
        };
        if matches!(result, Ok(LockReply::Holder(None))) {
            self.invalidated(ctx, r);
        } else if let Some(p) = pending.get_mut(&r) {
            p.lock_query = None;
        }
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
            Phase::Invalidate { pending, started } => {
                if now.since(*started) > ctx.config.timeouts.invalidate_patience {
                    self.phase = Phase::Done(SettleOutcome::Failed);
                    return;
                }
                let due: Vec<ReplicaId> = pending
                    .iter()
                    .filter(|(_, p)| now >= p.retry_at)
                    .map(|(r, _)| *r)
                    .collect();
                for r in due {
                    self.invalidate(ctx, r);
                    let lock = lock_name(r);
                    let query = ctx.send_lock(LockCommand::Holder { lock });
                    self.mine.insert(query);
                    if let Phase::Invalidate { pending, .. } = &mut self.phase
                        && let Some(p) = pending.get_mut(&r)
                    {
                        p.retry_at = now + ctx.config.timeouts.invalidate;
                        p.lock_query = Some(query);
                    }
                }
            }
            _ => {}
        }
    }
}
