//! The replica's sweep: finishing abandoned positions and catching up from peers.
//!
//! A writer that crashes (or loses contact) after its value was accepted leaves a
//! position accepted but not visible; readers would settle it when they need it, but
//! the sweep settles it anyway, so logs do not keep holes (paper §4.6.3: "replication
//! servers periodically scan for incomplete writes and propose no-op values"). The sweep
//! also asks a peer how far it is visible, and settles what this replica lacks — how a
//! read-only replica, which no writer must wait for, catches up.
//!
//! Settling is the proposer's [`Settle`](crate::proposer::settle::Settle), with this
//! replica as the proposer: the invalidation step is done for anything it exposes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use megastore_coordinator::CoordinatorReply;
use megastore_lock::LockOutcome;
use megastore_types::{EgId, NodeId, Position, ReplicaId, ReplicaKind, Time};

use super::GroupLog;
use crate::messages::{Message, ReplicaReply, ReplicaRequest};
use crate::proposer::settle::{Settle, SettleOutcome};
use crate::proposer::{ProposerConfig, Wiring};

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

#[derive(Debug)]
enum Task {
    /// Asked `peer` how far it is visible.
    Probe { id: u64 },
    /// Settling `next..=target`, one at a time.
    CatchUp {
        next: Position,
        target: Position,
        settle: Option<Box<Settle>>,
    },
}

/// The sweep's state.
pub(crate) struct Sweeper {
    config: SweepConfig,
    wiring: Wiring<EgId>,
    tasks: BTreeMap<EgId, Task>,
    next_sweep: Time,
    /// Positions accepted but not visible at the last sweep.
    pending_last: BTreeSet<(EgId, Position)>,
    /// Rotates which group is probed, and which peer.
    cursor: usize,
}

impl Sweeper {
    pub(crate) fn new(config: SweepConfig) -> Self {
        let wiring = Wiring::new(&config.proposer, config.seed);
        Self {
            config,
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
            Task::CatchUp {
                settle: Some(s), ..
            } => s.deadline(),
            _ => None,
        });
        tasks
            .chain(self.wiring.lock_deadline())
            .chain(Some(self.next_sweep))
            .min()
            .unwrap_or(self.next_sweep)
    }

    /// A periodic look at every loaded group.
    pub(crate) fn on_tick<'a>(
        &mut self,
        now: Time,
        me: ReplicaId,
        groups: impl Iterator<Item = &'a GroupLog>,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let (failed, retries) = self.wiring.lock_client().on_tick(now);
        sends.extend(
            retries
                .into_iter()
                .map(|s| (NodeId::LockNode(s.to), Message::LockRequest(s.request))),
        );
        for outcome in failed {
            self.on_lock_outcome(now, outcome, sends);
        }
        let ticking: Vec<EgId> = self
            .tasks
            .iter()
            .filter(|(_, t)| matches!(t, Task::CatchUp { settle: Some(s), .. } if s.deadline().is_some_and(|d| d <= now)))
            .map(|(eg, _)| eg.clone())
            .collect();
        for eg in ticking {
            self.drive(now, &eg, sends, |settle, ctx| settle.on_tick(ctx));
        }
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + self.config.interval;
        let groups: Vec<&GroupLog> = groups.collect();
        let mut pending = BTreeSet::new();
        for group in &groups {
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
        // Probe one group at one peer per sweep, round robin.
        let peers: Vec<ReplicaId> = self
            .config
            .proposer
            .topology
            .of_kind(ReplicaKind::Full)
            .filter(|r| *r != me)
            .collect();
        let idle: Vec<&&GroupLog> = groups
            .iter()
            .filter(|g| !self.tasks.contains_key(g.eg()))
            .collect();
        if let (false, false) = (peers.is_empty(), idle.is_empty()) {
            self.cursor += 1;
            let group = idle[self.cursor % idle.len()];
            let peer = peers[self.cursor % peers.len()];
            let eg = group.eg().clone();
            let mut ctx = self
                .wiring
                .ctx(now, &self.config.proposer, eg.clone(), sends);
            let request_eg = eg.clone();
            let id = ctx.send_replica(peer, |id| ReplicaRequest::LogState { id, eg: request_eg });
            self.tasks.insert(eg, Task::Probe { id });
        }
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
                settle: None,
            },
        );
        self.advance(now, &eg, sends);
    }

    /// Starts the next settle of a catch-up, or ends it.
    fn advance(&mut self, now: Time, eg: &EgId, sends: &mut Vec<(NodeId, Message)>) {
        loop {
            let Some(Task::CatchUp { next, settle, .. }) = self.tasks.get_mut(eg) else {
                return;
            };
            match settle.as_ref().map(|s| s.outcome().cloned()) {
                Some(None) => return,
                Some(Some(SettleOutcome::Failed)) => {
                    self.finish(eg);
                    return;
                }
                Some(Some(SettleOutcome::Settled { .. })) => {
                    *next = next.next();
                    *settle = None;
                }
                None => {}
            }
            let Some(Task::CatchUp {
                next,
                target,
                settle,
            }) = self.tasks.get_mut(eg)
            else {
                return;
            };
            if *next > *target {
                self.finish(eg);
                return;
            }
            let position = *next;
            let mut ctx = self
                .wiring
                .ctx(now, &self.config.proposer, eg.clone(), sends);
            *settle = Some(Box::new(Settle::start(
                &mut ctx,
                eg.clone(),
                position,
                None,
                None,
            )));
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
        f: impl FnOnce(&mut Settle, &mut crate::proposer::Ctx<'_, EgId>),
    ) {
        if let Some(Task::CatchUp {
            settle: Some(s), ..
        }) = self.tasks.get_mut(eg)
        {
            let mut ctx = self
                .wiring
                .ctx(now, &self.config.proposer, eg.clone(), sends);
            f(s, &mut ctx);
        }
        self.advance(now, eg, sends);
    }

    /// A reply to one of the sweep's requests. Returns false if it is not the sweep's.
    pub(crate) fn on_replica_reply(
        &mut self,
        now: Time,
        from: ReplicaId,
        reply: ReplicaReply,
        visible_here: impl Fn(&EgId) -> Position,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let Some(eg) = self.wiring.route(reply.id()).cloned() else {
            return;
        };
        match (self.tasks.get(&eg), &reply) {
            (
                Some(Task::Probe { id }),
                ReplicaReply::LogState {
                    id: reply_id,
                    state,
                },
            ) if id == reply_id => {
                let mine = visible_here(&eg);
                if state.visible > mine {
                    self.catch_up(now, eg, mine.next(), state.visible, sends);
                } else {
                    self.finish(&eg);
                }
            }
            (Some(Task::Probe { .. }), _) => self.finish(&eg),
            (Some(Task::CatchUp { .. }), _) => {
                self.drive(now, &eg, sends, |settle, ctx| {
                    if settle.owns(reply.id()) {
                        settle.on_replica_reply(ctx, from, reply);
                    }
                });
            }
            (None, _) => {}
        }
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
        self.drive(now, &eg, sends, |settle, ctx| {
            settle.on_coordinator_reply(ctx, from, reply)
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
        self.drive(now, &eg, sends, |settle, ctx| {
            settle.on_lock_outcome(ctx, outcome.id, outcome.result)
        });
    }
}
