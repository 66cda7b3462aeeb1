//! The replica's sweep: finishing abandoned positions, catching up from peers, and
//! truncating the log.
//!
//! A writer that crashes (or loses contact) after its value was accepted leaves a
//! position accepted but not visible; readers would settle it when they need it, but
//! the sweep settles it anyway, so logs do not keep holes (paper §4.6.3: "replication
//! servers periodically scan for incomplete writes and propose no-op values"). Each
//! sweep also probes one group at every other replica: it settles what this replica
//! lacks up to the furthest visible position seen (how a read-only replica, which no
//! writer waits for, catches up), and, when every replica answered, truncates the log
//! below what every full and read-only replica applied and every witness holds.
//!
//! Settling is the proposer's [`Settle`], with this replica as the proposer: the
//! invalidation step is done for anything it exposes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use megastore_coordinator::CoordinatorReply;
use megastore_lock::LockOutcome;
use megastore_types::{EgId, NodeId, Position, ReplicaId, ReplicaKind, Time};

use super::GroupLog;
use crate::messages::{LogState, Message, ReplicaReply, ReplicaRequest};
use crate::proposer::settle::{Settle, SettleOutcome};
use crate::proposer::{Ctx, ProposerConfig, Wiring};

/// How the sweep runs.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Time between sweeps. A position accepted but not visible at two sweeps in a row
    /// is finished.
    pub interval: Duration,
    /// The replica as a proposer (its id must be `ProposerId::replica(id)`).
    pub proposer: ProposerConfig,
    /// Seeds its random numbers.
    pub seed: u64,
}

/// Something the sweep decided that changes this replica's own state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SweepAction {
    /// Drop the group's log up to and including this position.
    Truncate(EgId, Position),
}

#[derive(Debug)]
enum Task {
    /// Asked every other replica for its log state.
    Probe {
        asked: BTreeMap<u64, ReplicaId>,
        states: BTreeMap<ReplicaId, LogState>,
        deadline: Time,
    },
    /// Settling `next..=target`, up to [`CATCH_UP_IN_FLIGHT_MAX`] positions at once.
    CatchUp {
        next: Position,
        target: Position,
        settles: BTreeMap<Position, Box<Settle>>,
    },
}

/// Positions a catch-up settles at once (each is its own Paxos instance).
const CATCH_UP_IN_FLIGHT_MAX: usize = 32;

/// The sweep's state.
pub(crate) struct Sweeper {
    config: SweepConfig,
    me: ReplicaId,
    wiring: Wiring<EgId>,
    tasks: BTreeMap<EgId, Task>,
    next_sweep: Time,
    /// Positions accepted but not visible at the last sweep.
    pending_last: BTreeSet<(EgId, Position)>,
    /// Rotates which group is probed.
    cursor: usize,
}

impl Sweeper {
    pub(crate) fn new(config: SweepConfig, me: ReplicaId) -> Self {
        let wiring = Wiring::new(&config.proposer, config.seed);
        Self {
            config,
            me,
            wiring,
            tasks: BTreeMap::new(),
            next_sweep: Time::ZERO,
            pending_last: BTreeSet::new(),
            cursor: 0,
        }
    }

    /// When the sweep next wants a tick.
    pub(crate) fn next_wake(&self) -> Time {
        let tasks = self.tasks.values().filter_map(|t| match t {
            Task::CatchUp { settles, .. } => settles.values().filter_map(|s| s.deadline()).min(),
            Task::Probe { deadline, .. } => Some(*deadline),
        });
        tasks
            .chain(self.wiring.lock_deadline())
            .chain(Some(self.next_sweep))
            .min()
            .unwrap_or(self.next_sweep)
    }

    /// Time passed: drives the tasks, and every `interval` looks at every loaded group.
    pub(crate) fn on_tick<'a>(
        &mut self,
        now: Time,
        groups: impl Iterator<Item = &'a GroupLog>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Vec<SweepAction> {
        let mut actions = Vec::new();
        let (failed, retries) = self.wiring.lock_client().on_tick(now);
        sends.extend(
            retries
                .into_iter()
                .map(|s| (NodeId::LockNode(s.to), Message::LockRequest(s.request))),
        );
        for outcome in failed {
            self.on_lock_outcome(now, outcome, sends);
        }
        let groups: Vec<&GroupLog> = groups.collect();
        let state_here = |eg: &EgId| groups.iter().find(|g| g.eg() == eg).map(|g| g.log_state());
        let expired: Vec<EgId> = self
            .tasks
            .iter()
            .filter(|(_, t)| matches!(t, Task::Probe { deadline, .. } if *deadline <= now))
            .map(|(eg, _)| eg.clone())
            .collect();
        for eg in expired {
            actions.extend(self.probed(now, &eg, state_here(&eg), sends));
        }
        let due: Vec<EgId> = self
            .tasks
            .iter()
            .filter(|(_, t)| {
                matches!(t, Task::CatchUp { settles, .. } if settles.values().any(|s| s.deadline().is_some_and(|d| d <= now)))
            })
            .map(|(eg, _)| eg.clone())
            .collect();
        for eg in due {
            self.drive(now, &eg, sends, |settles, ctx| {
                let now = ctx.now;
                for settle in settles
                    .values_mut()
                    .filter(|s| s.deadline().is_some_and(|d| d <= now))
                {
                    settle.on_tick(ctx);
                }
            });
        }
        if now >= self.next_sweep {
            self.next_sweep = now + self.config.interval;
            self.sweep(now, &groups, sends);
        }
        actions
    }

    fn sweep(&mut self, now: Time, groups: &[&GroupLog], sends: &mut Vec<(NodeId, Message)>) {
        let mut pending = BTreeSet::new();
        for group in groups {
            let stuck: Vec<Position> = group
                .slots()
                .filter(|(p, s)| *p > group.visible() && !s.visible)
                .map(|(p, _)| p)
                .collect();
            pending.extend(stuck.iter().map(|p| (group.eg().clone(), *p)));
            let abandoned = stuck
                .iter()
                .filter(|p| self.pending_last.contains(&(group.eg().clone(), **p)))
                .max();
            if let (Some(&target), false) = (abandoned, self.tasks.contains_key(group.eg())) {
                self.catch_up(
                    now,
                    group.eg().clone(),
                    group.visible().next(),
                    target,
                    sends,
                );
            }
        }
        self.pending_last = pending;
        // Probe one idle group per sweep, round robin, at every other replica.
        let idle: Vec<&&GroupLog> = groups
            .iter()
            .filter(|g| !self.tasks.contains_key(g.eg()))
            .collect();
        let others: Vec<ReplicaId> = self
            .config
            .proposer
            .topology
            .replicas()
            .iter()
            .map(|r| r.id)
            .filter(|r| *r != self.me)
            .collect();
        if idle.is_empty() || others.is_empty() {
            return;
        }
        self.cursor += 1;
        let eg = idle[self.cursor % idle.len()].eg().clone();
        let mut ctx = self
            .wiring
            .ctx(now, &self.config.proposer, eg.clone(), sends);
        let mut asked = BTreeMap::new();
        for r in others {
            let request_eg = eg.clone();
            asked.insert(
                ctx.send_replica(r, |id| ReplicaRequest::LogState { id, eg: request_eg }),
                r,
            );
        }
        let deadline = now + self.config.proposer.timeouts.rpc;
        self.tasks.insert(
            eg,
            Task::Probe {
                asked,
                states: BTreeMap::new(),
                deadline,
            },
        );
    }

    /// A probe is over (every replica answered, or time ran out): catch up to the
    /// furthest visible position seen; and if every replica answered, truncate below
    /// what every full and read-only replica applied and every witness holds — keeping
    /// the last such slot, so the next position's leader stays known.
    fn probed(
        &mut self,
        now: Time,
        eg: &EgId,
        here: Option<LogState>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Option<SweepAction> {
        let Some(Task::Probe { asked, states, .. }) = self.tasks.remove(eg) else {
            return None;
        };
        self.wiring.forget(eg);
        let here = here?;
        let furthest = states
            .values()
            .map(|s| s.visible)
            .max()
            .unwrap_or(Position::NONE);
        if furthest > here.visible {
            self.catch_up(now, eg.clone(), here.visible.next(), furthest, sends);
        }
        if !asked.is_empty() {
            return None;
        }
        let topology = &self.config.proposer.topology;
        let kept = |r: ReplicaId, s: &LogState| {
            if topology.kind(r) == Some(ReplicaKind::Witness) {
                s.visible
            } else {
                s.applied
            }
        };
        let floor = states
            .iter()
            .map(|(r, s)| kept(*r, s))
            .chain(Some(kept(self.me, &here)))
            .min()?;
        let through = floor.prev();
        (through > here.truncated).then(|| SweepAction::Truncate(eg.clone(), through))
    }

    fn catch_up(
        &mut self,
        now: Time,
        eg: EgId,
        next: Position,
        target: Position,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        self.tasks.insert(
            eg.clone(),
            Task::CatchUp {
                next,
                target,
                settles: BTreeMap::new(),
            },
        );
        self.advance(now, &eg, sends);
    }

    /// Drops finished settles, starts more up to the limit, and ends the catch-up when
    /// every position is settled (or one could not be).
    fn advance(&mut self, now: Time, eg: &EgId, sends: &mut Vec<(NodeId, Message)>) {
        let Some(Task::CatchUp {
            next,
            target,
            settles,
        }) = self.tasks.get_mut(eg)
        else {
            return;
        };
        let failed = settles
            .values()
            .any(|s| matches!(s.outcome(), Some(SettleOutcome::Failed)));
        settles.retain(|_, s| s.outcome().is_none());
        if failed {
            self.finish(eg);
            return;
        }
        let mut ctx = self
            .wiring
            .ctx(now, &self.config.proposer, eg.clone(), sends);
        while *next <= *target && settles.len() < CATCH_UP_IN_FLIGHT_MAX {
            let settle = Settle::start(&mut ctx, eg.clone(), *next, None, None);
            if settle.outcome().is_none() {
                settles.insert(*next, Box::new(settle));
            }
            *next = next.next();
        }
        if settles.is_empty() && *next > *target {
            self.finish(eg);
        }
    }

    fn finish(&mut self, eg: &EgId) {
        self.tasks.remove(eg);
        self.wiring.forget(eg);
    }

    fn drive(
        &mut self,
        now: Time,
        eg: &EgId,
        sends: &mut Vec<(NodeId, Message)>,
        f: impl FnOnce(&mut BTreeMap<Position, Box<Settle>>, &mut Ctx<'_, EgId>),
    ) {
        if let Some(Task::CatchUp { settles, .. }) = self.tasks.get_mut(eg) {
            let mut ctx = self
                .wiring
                .ctx(now, &self.config.proposer, eg.clone(), sends);
            f(settles, &mut ctx);
        }
        self.advance(now, eg, sends);
    }

    /// A reply to one of the sweep's requests; `here` is this replica's own state of a
    /// group. Returns what a finished probe decided.
    pub(crate) fn on_replica_reply(
        &mut self,
        now: Time,
        from: ReplicaId,
        reply: ReplicaReply,
        here: impl Fn(&EgId) -> Option<LogState>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Option<SweepAction> {
        let eg = self.wiring.route(reply.id()).cloned()?;
        match self.tasks.get_mut(&eg) {
            Some(Task::Probe { asked, states, .. }) => {
                asked.remove(&reply.id());
                if let ReplicaReply::LogState { state, .. } = reply {
                    states.insert(from, state);
                }
                if asked.is_empty() {
                    return self.probed(now, &eg, here(&eg), sends);
                }
            }
            Some(Task::CatchUp { .. }) => {
                self.drive(now, &eg, sends, |settles, ctx| {
                    if let Some(settle) = settles.values_mut().find(|s| s.owns(reply.id())) {
                        settle.on_replica_reply(ctx, from, reply);
                    }
                });
            }
            None => {}
        }
        None
    }

    /// A coordinator's acknowledgement of an invalidate the sweep sent.
    pub(crate) fn on_coordinator_reply(
        &mut self,
        now: Time,
        from: ReplicaId,
        reply: CoordinatorReply,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let id = match &reply {
            CoordinatorReply::Invalidated { id } | CoordinatorReply::Query { id, .. } => *id,
        };
        let Some(eg) = self.wiring.route(id).cloned() else {
            return;
        };
        self.drive(now, &eg, sends, |settles, ctx| {
            if let Some(settle) = settles.values_mut().find(|s| s.owns(id)) {
                settle.on_coordinator_reply(ctx, from, reply);
            }
        });
    }

    /// A lock service response for the sweep.
    pub(crate) fn on_lock_response(
        &mut self,
        now: Time,
        from: megastore_types::LockNodeId,
        response: megastore_lock::LockResponse,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        match self.wiring.lock_client().on_response(now, from, response) {
            Ok(outcome) => self.on_lock_outcome(now, outcome, sends),
            Err(Some(retry)) => sends.push((
                NodeId::LockNode(retry.to),
                Message::LockRequest(retry.request),
            )),
            Err(None) => {}
        }
    }

    fn on_lock_outcome(
        &mut self,
        now: Time,
        outcome: LockOutcome,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let Some(eg) = self.wiring.lock_route(outcome.id).cloned() else {
            return;
        };
        self.drive(now, &eg, sends, |settles, ctx| {
            if let Some(settle) = settles.values_mut().find(|s| s.owns(outcome.id)) {
                settle.on_lock_outcome(ctx, outcome.id, outcome.result);
            }
        });
    }
}
