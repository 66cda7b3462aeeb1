//! Choosing the value at a settle's position: learning it from a same-ballot majority
//! of the voters' slots, the position leader's ballot-0 fast path, or two-phase Paxos
//! (adopting the highest-ballot accepted value, or proposing a no-op), with backoff
//! when a majority refuses.

use std::collections::{BTreeMap, BTreeSet};

use megastore_types::{Ballot, ReplicaId};

use super::super::Ctx;
use super::{BACKOFF_DOUBLINGS_MAX, Chosen, Phase, Round, Settle, SettleOutcome};
use crate::cells::SlotRecord;
use crate::entry::LogEntry;
use crate::messages::{AcceptResult, GrantRefusal, PrepareResult, ReplicaRequest};

impl Settle {
    pub(super) fn learn<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.outstanding.clear();
        let position = self.position;
        // Read-only replicas are asked too: they hold visible marks, which are final
        // (`on_replica_reply` takes one from anyone), and may be the last to hold one
        // — after the voters' logs moved past it by snapshot installs, a replica that
        // missed the mark and cannot install (its own log was truncated once) learns
        // it nowhere else. Their other answers do not count.
        for r in self.voters(ctx).into_iter().chain(self.read_only(ctx)) {
            self.send(ctx, r, |id, eg| ReplicaRequest::ReadLog {
                id,
                eg,
                position,
            });
        }
        self.phase = Phase::Learn {
            replies: BTreeMap::new(),
            sent: ctx.now,
            deadline: ctx.now + ctx.config.timeouts.rpc,
        };
    }

    pub(super) fn prepare<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.rounds += 1;
        if self.rounds > ctx.config.timeouts.max_rounds {
            self.phase = Phase::Done(SettleOutcome::Failed);
            return;
        }
        self.outstanding.clear();
        let ballot = Ballot::next_above(self.max_seen, ctx.config.proposer);
        self.max_seen = ballot;
        let position = self.position;
        let voters_at = ctx.replica_set(&self.eg).voters_since();
        for r in self.voters(ctx) {
            self.send(ctx, r, |id, eg| ReplicaRequest::Prepare {
                id,
                eg,
                position,
                ballot,
                voters_at,
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
    pub(super) fn backoff<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.outstanding.clear();
        let doublings = self.rounds.saturating_sub(1).min(BACKOFF_DOUBLINGS_MAX);
        let window = ctx.config.timeouts.backoff * (1 << doublings);
        let until = ctx.now + ctx.random_up_to(window);
        self.phase = Phase::Backoff { until };
    }

    /// Sends the round's value to every voter (`except` has it already).
    pub(super) fn accept<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        except: Option<ReplicaId>,
    ) {
        self.outstanding.clear();
        let round = self.round.clone().expect("a round is set before accepting");
        if Some(&round.value) == self.proposal.as_ref() {
            self.sent_proposal = true;
        }
        let position = self.position;
        let voters_at = ctx.replica_set(&self.eg).voters_since();
        for r in self.voters(ctx).into_iter().filter(|r| Some(*r) != except) {
            let (ballot, entry) = (round.ballot, round.value.clone());
            self.send(ctx, r, |id, eg| ReplicaRequest::Accept {
                id,
                eg,
                position,
                ballot,
                entry,
                grant: false,
                previous_visible: None,
                voters_at,
            });
        }
        self.deciding = self.outstanding.clone();
        self.accepts_sent = ctx.now;
        let deadline = ctx.now + ctx.config.timeouts.rpc;
        self.phase = if round.ballot.is_zero() {
            Phase::FastAccept { deadline }
        } else {
            Phase::Accept { deadline }
        };
        self.check_chosen(ctx);
    }

    /// A majority accepted the round's value at one ballot: it is chosen.
    pub(super) fn check_chosen<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.forget_dropped_voters(ctx);
        let Some(round) = &self.round else { return };
        if round.acks.len() >= self.majority(ctx) {
            let chosen = Chosen {
                ballot: round.ballot,
                entry: round.value.clone(),
                holders: round.acks.clone(),
            };
            self.on_chosen(ctx, chosen);
        }
    }

    pub(super) fn on_log_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        slot: Option<SlotRecord>,
    ) {
        // (A visible slot never gets here: `on_replica_reply` takes every visible
        // answer first.)
        if !self.voters(ctx).contains(&from) {
            return;
        }
        let Phase::Learn { replies, .. } = &mut self.phase else {
            return;
        };
        #[cfg(feature = "sim-bugs")]
        if slot.is_none() {
            self.seen_lacking.insert(from);
        }
        replies.insert(from, slot);
        self.decide_learn(ctx);
    }

    /// With a majority of answers: a value accepted by a majority at one ballot is
    /// chosen; otherwise run Paxos (which adopts any accepted value, or a no-op).
    pub(super) fn decide_learn<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.forget_dropped_voters(ctx);
        let majority = self.majority(ctx);
        let needed = if ctx.config.bugs.learn_from_single_accept() {
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
        #[cfg(feature = "sim-bugs")]
        let answered: BTreeSet<ReplicaId> = replies.keys().copied().collect();
        match by_value
            .into_iter()
            .find(|(_, (_, holders))| holders.len() >= needed)
        {
            Some(((ballot, _), (entry, holders))) => {
                #[cfg(feature = "sim-bugs")]
                self.seen_lacking.extend(answered.difference(&holders));
                self.on_chosen(
                    ctx,
                    Chosen {
                        ballot,
                        entry,
                        holders,
                    },
                );
            }
            None => {
                // A voter holds a ballot-0 value: a writer's fast path is under way,
                // and most likely chosen within a round trip. Preparing now would
                // refuse its remaining accepts and push it onto the slow path (a duel
                // a hot group's readers would start at every position): wait about as
                // long as this learn took, once, and learn again. Waiting is always
                // safe; only liveness needs the Paxos round after it.
                let write_in_flight = replies.values().flatten().next().is_some();
                if write_in_flight && !self.waited_for_writer {
                    let Phase::Learn { sent, .. } = &self.phase else {
                        unreachable!("checked above")
                    };
                    let took = ctx.now.since(*sent).min(ctx.config.timeouts.leader);
                    self.waited_for_writer = true;
                    self.outstanding.clear();
                    self.phase = Phase::Patience {
                        until: ctx.now + took,
                    };
                } else {
                    self.prepare(ctx);
                }
            }
        }
    }

    pub(super) fn on_prepare_reply<K: Clone + Ord>(
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
        let majority = self.majority(ctx);
        let voters = self.voters(ctx).len();
        let bugs = ctx.config.bugs;
        let Phase::Prepare {
            promises, rejects, ..
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
        self.forget_dropped_voters(ctx);
        let Phase::Prepare {
            ballot,
            promises,
            rejects,
            ..
        } = &mut self.phase
        else {
            return;
        };
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
                        || bugs.grant_ballot0_twice()
                        || bugs.forget_promise_on_restart()
                        || bugs.leader_from_unchosen_entry()
                        || bugs.rejoin_as_voter(),
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

    pub(super) fn on_accept_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        result: AcceptResult,
    ) {
        match result {
            // (`on_replica_reply` takes visible answers first; kept for exhaustiveness.)
            AcceptResult::Visible(ballot, entry) => self.learned_visible(ctx, ballot, entry),
            AcceptResult::Accepted | AcceptResult::GrantedContended => {
                if result == AcceptResult::GrantedContended {
                    self.grant_contended = true;
                }
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
                if let AcceptResult::GrantRefused(GrantRefusal::Taken(txn)) = result {
                    self.grant_taken_by = Some(txn);
                }
                if matches!(result, AcceptResult::Truncated) && self.truncated_everywhere(ctx, from)
                {
                    return;
                }
                self.accept_refused(ctx, from);
            }
        }
    }

    /// `from` did not accept the round's value.
    pub(super) fn accept_refused<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, from: ReplicaId) {
        let majority = self.majority(ctx);
        let voters = self.voters(ctx).len();
        #[cfg(feature = "sim-bugs")]
        self.seen_lacking.insert(from);
        if matches!(self.phase, Phase::FastGrant { .. }) {
            self.prepare(ctx);
            return;
        }
        let Some(round) = &mut self.round else { return };
        round.rejects.insert(from);
        self.forget_dropped_voters(ctx);
        let Some(round) = &self.round else { return };
        if round.rejects.len() > voters - majority {
            if round.ballot.is_zero() {
                self.prepare(ctx);
            } else {
                self.backoff(ctx);
            }
        }
    }
}
