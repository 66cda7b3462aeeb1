//! Driving the protocol cores: delivering a message or a tick to a node, carrying
//! out what its core outputs (a replica's batch is written buffered, synced, then
//! released), and recording what clients saw.

use std::collections::VecDeque;
use std::time::Duration;

use megastore_coordinator::{Input as CoordinatorInput, Output as CoordinatorOutput};
use megastore_paxos::{
    Batch, ClientInput, ClientOutput, Message, ReplicaInput, ReplicaReply, ReplicaRequest,
};
use megastore_types::{ClientId, LockNodeId, NodeId, ReplicaId, ReplicaKind};

use crate::history::OpRecord;
use crate::network::Network;
use crate::workload::ClientNode;

use super::{Event, World};

/// The client id of a replica driver's own requests: their replies go nowhere.
pub(super) const REPLICA_DRIVER: ClientId = megastore_paxos::DRIVER_CLIENT;

impl World {
    pub(super) fn deliver(&mut self, from: NodeId, to: NodeId, message: Message) {
        match to {
            NodeId::Replica(r) => {
                if let Message::Relay { id, commit } = message {
                    self.relay(r, from, id, *commit);
                    return;
                }
                let handled = match &message {
                    Message::ReplicaRequest(request) => Some(request.clone()),
                    _ => None,
                };
                let from = self.as_seen(from);
                self.run_replica(r, ReplicaInput::Message { from, message }, handled);
            }
            NodeId::Coordinator(r) => {
                let from = self.as_seen(from);
                let input = match (from, message) {
                    (_, Message::CoordinatorRequest(request)) => {
                        CoordinatorInput::Request { from, request }
                    }
                    (NodeId::LockNode(n), Message::LockResponse(response)) => {
                        CoordinatorInput::Lock { from: n, response }
                    }
                    _ => return,
                };
                self.run_coordinator(r, input);
            }
            NodeId::Client(c) => {
                let from = self.as_seen(from);
                self.run_client(c, ClientInput::Message { from, message })
            }
            NodeId::LockNode(n) => {
                if let Message::LockRequest(request) = message {
                    self.serve_lock(n, from, request);
                }
            }
        }
    }

    /// A lock node answers: only the leader serves, and only while it can reach a
    /// majority of the lock nodes (as a Raft leader must).
    pub(super) fn serve_lock(
        &mut self,
        n: LockNodeId,
        from: NodeId,
        request: megastore_lock::LockRequest,
    ) {
        let clock = self.clocks[&NodeId::LockNode(n)];
        let now = self.now;
        let net = &self.net;
        let Some(response) =
            self.lock
                .model
                .serve(n, || clock.local(now), &request, lock_link(net))
        else {
            return;
        };
        self.send(NodeId::LockNode(n), from, Message::LockResponse(response));
    }

    /// A leader that lost its majority is replaced by a node that has one; the new
    /// leader restarts every lease on its own clock.
    pub(super) fn elect_lock_leader(&mut self) {
        let (clocks, now, net) = (&self.clocks, self.now, &self.net);
        self.lock
            .model
            .elect(|n| clocks[&NodeId::LockNode(n)].local(now), lock_link(net));
    }

    pub(crate) fn change_lock_leader(&mut self, n: LockNodeId) {
        let now = self.local_now(NodeId::LockNode(n));
        self.lock.model.change_leader(n, now);
    }

    pub(super) fn run_replica(
        &mut self,
        r: ReplicaId,
        input: ReplicaInput,
        handled: Option<ReplicaRequest>,
    ) {
        let local = self.local_now(NodeId::Replica(r));
        // The same loop as the replica server: writes go to the store buffered, and the
        // batch's messages leave only after its one sync (`Batch::release`).
        let mut batch = Batch::new();
        {
            let node = self.replicas.get_mut(&r).expect("replica exists");
            let Some(core) = node.core.as_mut() else {
                return;
            };
            let evicted_before = core.evictions();
            core.step_into(local, input, &node.store, &mut batch)
                .expect("the memory store does not fail");
            self.stats.evictions += core.evictions() - evicted_before;
        }
        let counts = batch.counts();
        // The full replicas' sweep of prepared transactions (`group_work.rs` on a real
        // replica server): a group whose entries prepared some is settled one prepared
        // timeout later — by a client here, the simulated replicas having none.
        let slot = self.replicas[&r].slot;
        if self.config.two_phase && self.config.topology.kind(slot) == Some(ReplicaKind::Full) {
            let settle_due = self.now + super::ns(self.timeouts.prepared);
            for eg in batch.prepared_groups() {
                self.prepared_due.entry(eg.clone()).or_insert(settle_due);
            }
            let collect_due = self.now + super::ns(super::decision_retention(&self.timeouts));
            for eg in batch.decided_groups() {
                self.decided_due
                    .entry(eg.clone())
                    .or_insert((collect_due, None));
            }
            // After the workload the clients that sweep may all be idle, each waiting
            // for the dues it knew of: work that comes in now wakes them, as a real
            // server's group work wakes on a group coming in.
            if self.now >= self.ops_until() {
                if !batch.prepared_groups().is_empty() {
                    self.wake_sweepers(settle_due);
                }
                if !batch.decided_groups().is_empty() {
                    self.wake_sweepers(collect_due);
                }
            }
        }
        self.stats.installs += counts.installs;
        self.stats.failed_installs += counts.failed_installs;
        self.stats.collections += counts.collections;
        let voted = matches!(
            handled,
            Some(ReplicaRequest::Prepare { .. } | ReplicaRequest::Accept { .. })
        );
        // A crash at the durability boundary: right after a vote's write, either before
        // the batch's sync (the write is lost with the process) or after it (the vote
        // is durable, its reply never leaves).
        let crash = counts.persists > 0
            && voted
            && self.faults_on
            && self.config.crash_after_persist > 0.0
            && self.rng.chance(self.config.crash_after_persist);
        if crash && self.rng.chance(0.5) {
            let node = self.replicas.get_mut(&r).expect("replica exists");
            batch.discard();
            node.store.crash();
            let mut checks = self.checks.take().expect("checkers are present");
            checks.after_replica_step(&self.observation(), r, handled.as_ref(), &[]);
            self.checks = Some(checks);
            let down = Duration::from_millis(2 + self.rng.below(80));
            self.crash(NodeId::Replica(r), down);
            return;
        }
        let passes = batch.take_voter_passes();
        self.pass_reports
            .extend(passes.into_iter().map(|report| (r, report)));
        let released = {
            let node = self.replicas.get_mut(&r).expect("replica exists");
            batch
                .release(&node.store)
                .expect("the memory store does not fail")
        };
        let replies: Vec<ReplicaReply> = if crash {
            Vec::new()
        } else {
            released
                .sends
                .iter()
                .filter_map(|(_, message)| match message {
                    Message::ReplicaReply(reply) => Some(reply.clone()),
                    _ => None,
                })
                .collect()
        };
        let mut checks = self.checks.take().expect("checkers are present");
        checks.after_replica_step(&self.observation(), r, handled.as_ref(), &replies);
        self.checks = Some(checks);
        if crash {
            let down = Duration::from_millis(2 + self.rng.below(80));
            self.crash(NodeId::Replica(r), down);
            return;
        }
        for (to, message) in released.sends {
            // The replies to the driver's own requests are dropped, as the server does.
            if to != NodeId::Client(REPLICA_DRIVER) {
                self.send(NodeId::Replica(r), to, message);
            }
        }
        if let Some(t) = released.wake {
            self.wake_at(NodeId::Replica(r), t);
        }
    }

    pub(super) fn run_coordinator(&mut self, r: ReplicaId, input: CoordinatorInput) {
        let local = self.local_now(NodeId::Coordinator(r));
        let Some(core) = self.coordinators.get_mut(&r).and_then(|c| c.core.as_mut()) else {
            return;
        };
        let outputs = core.step(local, input);
        for output in outputs {
            match output {
                CoordinatorOutput::Reply { to, reply } => {
                    self.send(NodeId::Coordinator(r), to, Message::CoordinatorReply(reply))
                }
                CoordinatorOutput::Lock(send) => {
                    self.send(
                        NodeId::Coordinator(r),
                        NodeId::LockNode(send.to),
                        Message::LockRequest(send.request),
                    );
                }
                CoordinatorOutput::WakeAt(t) => self.wake_at(NodeId::Coordinator(r), t),
            }
        }
    }

    /// A commit relayed to replica `r`: its relay (beside it, up while it is) commits
    /// it, and answers `from` once it ends.
    fn relay(
        &mut self,
        r: ReplicaId,
        from: NodeId,
        id: u64,
        commit: megastore_paxos::RelayedCommit,
    ) {
        let up = self.replica_up(r);
        let Some(relay) = self.relays.get(&r).copied().filter(|_| up) else {
            return;
        };
        let local = self.local_now(NodeId::Client(relay));
        let Some(node) = self.clients.get_mut(&relay) else {
            return;
        };
        let outputs = node.serve_relay(local, from, id, commit);
        self.stats.relayed += 1;
        if let NodeId::Client(c) = from
            && self.relays.values().any(|relay| *relay == c)
        {
            self.stats.relayed_by_relays += 1;
        }
        self.client_outputs(relay, outputs);
    }

    /// Replica `r` crashed: its relay dies with it (what it was committing goes on
    /// only as far as it got) and a new one, under a new client id, takes its place;
    /// its own workload goes on once the replica is back (`restart`).
    pub(super) fn restart_relay(&mut self, r: ReplicaId) {
        let Some(relay) = self.relays.get(&r).copied() else {
            return;
        };
        let new_id = ClientId(self.next_client_id);
        self.next_client_id += 1;
        let seed = self.rng.next_u64();
        let now = self.now;
        let records = match self.clients.get_mut(&relay) {
            Some(node) => node.restart_relay(now, new_id, seed),
            None => Vec::new(),
        };
        for record in records {
            self.op_done(record);
        }
    }

    /// Whether client `c` may start an operation: a relay only while its replica is up
    /// (it is a part of the replica's process).
    pub(super) fn client_process_up(&self, c: ClientId) -> bool {
        self.clients
            .get(&c)
            .and_then(|node| node.relay_of)
            .is_none_or(|r| self.replica_up(r))
    }

    /// After the run: every idle client that runs global index scans scans the whole
    /// index as applied (*global-scan-complete*); how many did.
    pub(crate) fn start_final_scans(&mut self) -> u64 {
        let idle: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.relay_of.is_none() && c.verified_scans && !c.busy())
            .map(|(id, _)| *id)
            .collect();
        for c in &idle {
            let local = self.local_now(NodeId::Client(*c));
            let client = self.clients.get_mut(c).expect("listed");
            let outputs = client.start_final_scan(local);
            self.client_outputs(*c, outputs);
        }
        idle.len() as u64
    }

    pub(super) fn run_client(&mut self, c: ClientId, input: ClientInput) {
        let local = self.local_now(NodeId::Client(c));
        let Some(client) = self.clients.get_mut(&c) else {
            return;
        };
        let outputs = client.core.step(local, input);
        self.client_outputs(c, outputs);
    }

    pub(super) fn client_outputs(&mut self, c: ClientId, outputs: Vec<ClientOutput>) {
        if let Some((after, serial)) = self
            .clients
            .get_mut(&c)
            .and_then(ClientNode::take_planned_crash)
        {
            self.schedule(self.now + after, Event::ClientCrash(c, serial));
        }
        let mut queue = VecDeque::from(outputs);
        while let Some(output) = queue.pop_front() {
            match output {
                ClientOutput::Send { to, message } => self.send(NodeId::Client(c), to, message),
                ClientOutput::WakeAt(t) => self.wake_at(NodeId::Client(c), t),
                ClientOutput::Done { op, result } => {
                    let local = self.local_now(NodeId::Client(c));
                    let now = self.now;
                    let client = self.clients.get_mut(&c).expect("client exists");
                    let (records, more) = client.on_done(now, local, op, result);
                    let crash = client.take_planned_crash();
                    queue.extend(more);
                    let idle = !client.busy();
                    if let Some((after, serial)) = crash {
                        self.schedule(now + after, Event::ClientCrash(c, serial));
                    }
                    for record in records {
                        self.op_done(record);
                    }
                    if idle {
                        let think = self
                            .rng
                            .below(u64::from(self.config.think_ms) * 1_000_000 + 1);
                        self.schedule(now + think, Event::ClientNext(c));
                    }
                }
            }
        }
    }

    pub(super) fn op_done(&mut self, record: OpRecord) {
        use crate::history::{OpKind, Outcome};
        match (&record.kind, &record.outcome) {
            (_, Outcome::Committed { .. }) => self.stats.commits += 1,
            (_, Outcome::NotCommitted { .. }) => self.stats.conflicts += 1,
            (_, Outcome::Unknown) => self.stats.unknown += 1,
            (_, Outcome::ResolvedNotCommitted { .. }) => self.stats.resolved_not_committed += 1,
            (OpKind::Collect, Outcome::Failed) => {
                self.stats.failed += 1;
                self.collection_passes.remove(&record.eg);
                let due = self.now + super::ns(super::decision_retention(&self.timeouts));
                self.decided_due
                    .entry(record.eg.clone())
                    .or_insert((due, None));
            }
            (
                _,
                Outcome::Collected {
                    collected,
                    kept,
                    next,
                },
            ) => {
                self.stats.decisions_collected += collected;
                let page = megastore_paxos::CollectedDecisions {
                    collected: *collected,
                    kept: *kept,
                    next: next.clone(),
                };
                let protocol = self.bugs.protocol;
                let mut pass = self
                    .collection_passes
                    .remove(&record.eg)
                    .unwrap_or_else(|| megastore_paxos::CollectionPass::new(protocol));
                let again = match pass.after_page(&page) {
                    megastore_paxos::AfterPage::Next(next) => {
                        self.collection_passes.insert(record.eg.clone(), pass);
                        Some((self.now, Some(next)))
                    }
                    megastore_paxos::AfterPage::LookAgain => {
                        let due = self.now + super::ns(super::decision_retention(&self.timeouts));
                        Some((due, None))
                    }
                    megastore_paxos::AfterPage::Done => None,
                };
                if let Some(again) = again {
                    self.decided_due.entry(record.eg.clone()).or_insert(again);
                }
            }
            (OpKind::Settle, Outcome::Failed) => {
                self.stats.failed += 1;
                self.prepared_due
                    .entry(record.eg.clone())
                    .or_insert(self.now + super::ns(self.timeouts.prepared));
            }
            (_, Outcome::Failed) => self.stats.failed += 1,
            (OpKind::SnapshotRead, _) => self.stats.reads_snapshot += 1,
            (OpKind::InconsistentRead, _) => self.stats.reads_inconsistent += 1,
            (OpKind::AtPositionRead, _) => self.stats.reads_at_position += 1,
            (
                _,
                Outcome::Read {
                    path: megastore_paxos::ReadPath::LocalVouched,
                    ..
                },
            ) => self.stats.reads_local += 1,
            (_, Outcome::Read { .. }) => self.stats.reads_majority += 1,
            (_, Outcome::Delivered { delivered, .. }) => self.stats.messages_delivered += delivered,
            (_, Outcome::TwoPhase { result, .. }) => match result {
                crate::history::TwoPhaseOutcome::Committed => self.stats.two_phase_committed += 1,
                crate::history::TwoPhaseOutcome::Aborted => self.stats.two_phase_aborted += 1,
                crate::history::TwoPhaseOutcome::Unknown => self.stats.two_phase_unknown += 1,
            },
            (
                _,
                Outcome::Settled {
                    committed,
                    aborted,
                    left,
                },
            ) => {
                self.stats.prepared_settled += committed + aborted;
                if *left > 0 {
                    self.prepared_due
                        .entry(record.eg.clone())
                        .or_insert(self.now + super::ns(self.timeouts.prepared));
                }
            }
            (_, Outcome::Verified { hits, .. }) => {
                let kept = hits.iter().filter(|h| h.kept).count() as u64;
                self.stats.hits_verified += kept;
                self.stats.hits_stale += hits.len() as u64 - kept;
            }
        }
        let mut checks = self.checks.take().expect("checkers are present");
        checks.on_op_done(&self.observation(), &record);
        self.checks = Some(checks);
        self.trace.note(self.now, &format!("done {:?}", record));
        self.history.push(record);
    }
}

/// Whether lock node `a` reaches lock node `b` on `net`.
pub(super) fn lock_link(net: &Network) -> impl Fn(LockNodeId, LockNodeId) -> bool + '_ {
    move |a, b| net.reachable(NodeId::LockNode(a), NodeId::LockNode(b))
}
