//! The lock service as its hosts see it from outside: one replicated [`LockCore`], served
//! by a leader node only while that node reaches a majority of the lock nodes — what
//! lockd's Raft gives — as a model for hosts that do not run Raft (the simulator).
//!
//! The model decides who answers and what: a node that is down answers nothing, a node
//! that is not the leader answers `NotLeader`, a leader without a majority answers
//! `Unavailable`, and a leader with one applies the command. When the leader loses its
//! majority, the first node that has one takes over and restarts every lease on its own
//! clock (as a new lockd leader does). Which nodes reach which is the host's: it passes
//! a `linked(a, b)` predicate (both directions must hold for a node to count).

use std::collections::BTreeMap;

use megastore_types::{LockNodeId, Time};

use crate::core::{LockCommand, LockCore, LockError, LockReply};
use crate::messages::{LockRequest, LockResponse};

/// One lock service: its state, its nodes and its leader.
#[derive(Debug)]
pub struct QuorumModel {
    core: LockCore,
    leader: LockNodeId,
    up: BTreeMap<LockNodeId, bool>,
}

impl QuorumModel {
    /// A service on `nodes` (all up), led by `leader`.
    pub fn new(
        core: LockCore,
        nodes: impl IntoIterator<Item = LockNodeId>,
        leader: LockNodeId,
    ) -> Self {
        Self {
            core,
            leader,
            up: nodes.into_iter().map(|n| (n, true)).collect(),
        }
    }

    /// The nodes, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = LockNodeId> + '_ {
        self.up.keys().copied()
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.up.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.up.is_empty()
    }

    /// Whether node `n` runs.
    pub fn is_up(&self, n: LockNodeId) -> bool {
        self.up.get(&n).copied().unwrap_or(false)
    }

    /// Node `n` crashed (`false`) or restarted (`true`).
    pub fn set_up(&mut self, n: LockNodeId, up: bool) {
        if let Some(entry) = self.up.get_mut(&n) {
            *entry = up;
        }
    }

    /// The current leader.
    pub fn leader(&self) -> LockNodeId {
        self.leader
    }

    /// The replicated state (for checks).
    pub fn core(&self) -> &LockCore {
        &self.core
    }

    /// Whether node `n` is up and reaches a majority of the nodes (itself included).
    pub fn has_quorum(
        &self,
        n: LockNodeId,
        linked: impl Fn(LockNodeId, LockNodeId) -> bool,
    ) -> bool {
        let reachable = self
            .up
            .iter()
            .filter(|(m, up)| **up && (**m == n || (linked(n, **m) && linked(**m, n))))
            .count();
        self.is_up(n) && reachable > self.up.len() / 2
    }

    /// Node `n` answers `request` at its clock's `now`; `None`: it is down.
    pub fn serve(
        &mut self,
        n: LockNodeId,
        now: impl FnOnce() -> Time,
        request: &LockRequest,
        linked: impl Fn(LockNodeId, LockNodeId) -> bool,
    ) -> Option<LockResponse> {
        if !self.is_up(n) {
            return None;
        }
        let result = if n != self.leader {
            Err(LockError::NotLeader)
        } else if !self.has_quorum(n, linked) {
            Err(LockError::Unavailable)
        } else {
            self.apply(now(), &request.command)
        };
        Some(LockResponse {
            id: request.id,
            result,
        })
    }

    /// The leader applies `command` (an operator's, sent to the leader) if it has a
    /// majority; `now` is the leader's clock.
    pub fn execute_at_leader(
        &mut self,
        now: impl FnOnce(LockNodeId) -> Time,
        command: &LockCommand,
        linked: impl Fn(LockNodeId, LockNodeId) -> bool,
    ) -> Result<LockReply, LockError> {
        let leader = self.leader;
        if !self.has_quorum(leader, linked) {
            return Err(LockError::Unavailable);
        }
        self.apply(now(leader), command)
    }

    /// A leader that lost its majority is replaced by the first node that has one;
    /// returns the new leader, if it changed. `now` is a node's clock.
    pub fn elect(
        &mut self,
        now: impl FnOnce(LockNodeId) -> Time,
        linked: impl Fn(LockNodeId, LockNodeId) -> bool,
    ) -> Option<LockNodeId> {
        if self.has_quorum(self.leader, &linked) {
            return None;
        }
        let candidate = self.nodes().find(|n| self.has_quorum(*n, &linked))?;
        self.change_leader(candidate, now(candidate));
        Some(candidate)
    }

    /// Leadership moves to `n` (an election, or a forced change): every lease restarts
    /// on `n`'s clock (`now`).
    pub fn change_leader(&mut self, n: LockNodeId, now: Time) {
        self.leader = n;
        self.core.restart_leases(now);
    }

    fn apply(&mut self, now: Time, command: &LockCommand) -> Result<LockReply, LockError> {
        let result = self.core.apply(now, command);
        self.core.check_invariants();
        result
    }
}
