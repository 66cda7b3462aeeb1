//! The simulated world: nodes, clocks, the network, and the event loop that feeds the
//! protocol state machines. Drivers here only move messages, time and storage; every
//! decision is made by `megastore-paxos`, `megastore-coordinator` and `megastore-lock`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use megastore_coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorConfig, Input as CoordinatorInput,
    Output as CoordinatorOutput,
};
use megastore_lock::{LockCommand, LockCore, QuorumModel};
use megastore_paxos::{
    Batch, ClientConfig, ClientCore, ClientInput, ClientOutput, Message, ProposerConfig,
    ProtocolBugs, Replica, ReplicaConfig, ReplicaInput, ReplicaReply, ReplicaRequest, SweepConfig,
    Timeouts,
};
use megastore_rowstore::MemoryStore;
use megastore_types::{
    ClientId, LockNodeId, NodeId, ProposerId, ReplicaId, ReplicaKind, SiteId, Time,
};

use crate::clock::Clock;
use crate::config::SimConfig;
use crate::history::OpRecord;
use crate::invariants::Checkers;
use crate::network::{Delivery, Network};
use crate::rng::Rng;
use crate::trace::Trace;
use crate::workload::ClientNode;

/// The mistakes a run re-introduces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs {
    /// In the replication protocol.
    pub protocol: ProtocolBugs,
    /// In the coordinator.
    pub coordinator: CoordinatorBugs,
}

/// A replica server: its protocol core (absent while crashed) and its store.
pub struct ReplicaNode {
    /// The protocol state machine.
    pub core: Option<Replica>,
    /// Its storage; survives crashes except for unsynced writes (and wipes).
    pub store: MemoryStore,
    /// Where it runs.
    pub site: SiteId,
    /// Its store was wiped once: it restarts rejoining.
    pub rejoining: bool,
    /// How many times its store was lost (each loss begins a new acceptor record).
    pub wipes: u32,
}

/// A coordinator process (absent while crashed: it keeps no state).
pub struct CoordinatorNode {
    /// The state machine.
    pub core: Option<Coordinator>,
    /// Where it runs.
    pub site: SiteId,
}

/// The lock service: `megastore_lock::QuorumModel` (one replicated state machine,
/// served by its leader node while that node reaches a majority), and where its nodes
/// run.
pub struct LockModel {
    /// Who answers what.
    pub model: QuorumModel,
    /// Each node's site.
    pub sites: BTreeMap<LockNodeId, SiteId>,
}

/// What a hold holds back: a node's whole inbox, or one directed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Hold {
    Inbox(NodeId),
    Link(NodeId, NodeId),
}

#[derive(Debug, Clone)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        message: Message,
    },
    Wake(NodeId),
    ClientNext(ClientId),
    Fault,
    Restart(NodeId),
    /// A crash planned by an earlier fault, down for this long.
    Crash(NodeId, Duration),
    /// An operator runs `megastore coordinator disable` on this replica's coordinator.
    Disable(ReplicaId),
    HealLinks,
    /// Cut these links (for this long) now: a partition that heals in two steps.
    BlockLinks(Vec<(NodeId, NodeId)>, Duration),
    Release(Hold),
    LockElection,
    EndSafetyPhase,
}

/// Counters for the summary line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Messages sent.
    pub messages: u64,
    /// Faults injected.
    pub faults: u64,
    /// Writes acknowledged.
    pub commits: u64,
    /// Writes that did not commit (conflict or aborted).
    pub conflicts: u64,
    /// Writes with unknown outcome (after trying to resolve it).
    pub unknown: u64,
    /// Writes of unknown outcome that resolution found not committed.
    pub resolved_not_committed: u64,
    /// Current reads served locally (vouched) / by majority read.
    pub reads_local: u64,
    /// Current reads served by a majority read.
    pub reads_majority: u64,
    /// Snapshot reads.
    pub reads_snapshot: u64,
    /// Inconsistent reads.
    pub reads_inconsistent: u64,
    /// Reads at the position an earlier current read found.
    pub reads_at_position: u64,
    /// Operations that failed.
    pub failed: u64,
    /// Replica stores wiped.
    pub wipes: u64,
    /// Snapshots installed.
    pub installs: u64,
    /// Garbage-collection passes over a group's data.
    pub collections: u64,
}

/// One simulated run.
pub struct World {
    /// What the seed decided.
    pub config: SimConfig,
    /// Re-introduced mistakes.
    pub bugs: Bugs,
    rng: Rng,
    /// Real time (ns since the start).
    pub now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    clocks: BTreeMap<NodeId, Clock>,
    /// Replica servers.
    pub replicas: BTreeMap<ReplicaId, ReplicaNode>,
    /// Coordinators, one beside each full replica.
    pub coordinators: BTreeMap<ReplicaId, CoordinatorNode>,
    /// The lock service.
    pub lock: LockModel,
    /// Clients.
    pub clients: BTreeMap<ClientId, ClientNode>,
    /// Links and message faults.
    pub net: Network,
    wakes: BTreeMap<NodeId, u64>,
    /// Every finished client operation.
    pub history: Vec<OpRecord>,
    checks: Option<Checkers>,
    /// The run's trace (hash and, when asked, readable lines).
    pub trace: Trace,
    /// Counters.
    pub stats: Stats,
    /// When the faults stop.
    pub safety_end: u64,
    faults_on: bool,
    timeouts: Timeouts,
    /// Held-back inboxes and links, and the messages they hold.
    held: BTreeMap<Hold, Vec<(NodeId, NodeId, Message)>>,
    /// A replica was wiped (at most one per run: two wiped voters out of three lose
    /// data, and no protocol can rejoin them).
    pub(crate) wiped: bool,
}

/// A replica's configuration: its sweep proposes as `ProposerId::replica(id)`.
fn replica_config(
    config: &SimConfig,
    bugs: Bugs,
    timeouts: &Timeouts,
    lock_nodes: &[LockNodeId],
    id: ReplicaId,
    seed: u64,
    rejoining: bool,
) -> ReplicaConfig {
    let proposer = ProposerConfig {
        topology: config.topology.clone(),
        proposer: ProposerId::replica(id),
        lock_nodes: lock_nodes.to_vec(),
        timeouts: timeouts.clone(),
        bugs: bugs.protocol,
    };
    let sweep = SweepConfig {
        interval: Duration::from_secs(1),
        proposer,
        seed,
        // Small, so that garbage collection happens within a run.
        history_kept: 8,
    };
    ReplicaConfig {
        id,
        topology: config.topology.clone(),
        bugs: bugs.protocol,
        sweep: Some(sweep),
        rejoining,
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl World {
    /// Builds the world a seed describes, with `bugs`.
    pub fn new(seed: u64, bugs: Bugs, trace: Trace) -> Self {
        let mut rng = Rng::new(seed);
        let config = SimConfig::from_seed(&mut rng);
        Self::from_config(config, rng, bugs, trace)
    }

    /// Builds a world from an explicit configuration (measurements use quiet ones).
    pub fn from_config(config: SimConfig, mut rng: Rng, bugs: Bugs, trace: Trace) -> Self {
        let max_latency = config.max_latency();
        let config_quiet = config.quiet;
        // The library's derivation from a round that fits the slowest link, except the
        // waits that must cover a round trip on it: the library's fractions of `rpc`
        // (sized for a configured `rpc_ms` well above the WAN round trip) would end the
        // accept-leader step and the invalidate wait before an answer could arrive.
        let rpc = max_latency * 4 + Duration::from_millis(40);
        let timeouts = Timeouts {
            leader: max_latency * 2 + Duration::from_millis(20),
            invalidate: max_latency * 4 + Duration::from_millis(60),
            backoff: max_latency * 2 + Duration::from_millis(20),
            ..Timeouts::from_rpc_and_lease(rpc, config.lock_lease)
        };
        let lock_nodes: Vec<LockNodeId> = (0..config.lock_sites.len() as u16)
            .map(LockNodeId)
            .collect();
        let mut clocks = BTreeMap::new();
        let mut clock = |rng: &mut Rng, node: NodeId| {
            let drift = if config.max_drift_ppm == 0 {
                0
            } else {
                rng.below(2 * u64::from(config.max_drift_ppm) + 1) as i64
                    - i64::from(config.max_drift_ppm)
            };
            clocks.insert(node, Clock::new(rng.below(10_000_000_000), drift));
        };
        let mut replicas = BTreeMap::new();
        let mut coordinators = BTreeMap::new();
        for info in config.topology.replicas() {
            clock(&mut rng, NodeId::Replica(info.id));
            let replica_config = replica_config(
                &config,
                bugs,
                &timeouts,
                &lock_nodes,
                info.id,
                rng.next_u64(),
                false,
            );
            replicas.insert(
                info.id,
                ReplicaNode {
                    core: Some(Replica::new(replica_config)),
                    store: MemoryStore::new(),
                    site: info.site,
                    rejoining: false,
                    wipes: 0,
                },
            );
            if info.kind == ReplicaKind::Full {
                clock(&mut rng, NodeId::Coordinator(info.id));
                coordinators.insert(
                    info.id,
                    CoordinatorNode {
                        core: None,
                        site: info.site,
                    },
                );
            }
        }
        let mut lock_node_map = BTreeMap::new();
        for (i, site) in config.lock_sites.iter().enumerate() {
            clock(&mut rng, NodeId::LockNode(LockNodeId(i as u16)));
            lock_node_map.insert(LockNodeId(i as u16), *site);
        }
        let mut clients = BTreeMap::new();
        for (i, site) in config.client_sites.iter().enumerate() {
            let id = ClientId(i as u32 + 1);
            clock(&mut rng, NodeId::Client(id));
            let proposer = ProposerConfig {
                topology: config.topology.clone(),
                proposer: ProposerId::client(id),
                lock_nodes: lock_nodes.clone(),
                timeouts: timeouts.clone(),
                bugs: bugs.protocol,
            };
            let core = ClientCore::new(ClientConfig {
                id,
                site: *site,
                proposer,
                seed: rng.next_u64(),
            });
            let node = ClientNode::new(
                id,
                *site,
                core,
                rng.next_u64(),
                config.groups,
                config.keys_per_group,
            );
            let mut node = node;
            node.writes_only = config.writes_only;
            node.role = config
                .client_roles
                .get(i)
                .copied()
                .unwrap_or(crate::workload::Role::Mixed);
            clients.insert(id, node);
        }
        let lock = LockModel {
            model: QuorumModel::new(
                LockCore::new(config.lock_lease),
                lock_node_map.keys().copied(),
                LockNodeId(0),
            ),
            sites: lock_node_map,
        };
        let safety_end = ns(config.safety_phase);
        let mut world = World {
            config,
            bugs,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            clocks,
            replicas,
            coordinators,
            lock,
            clients,
            net: if config_quiet {
                Network::default()
            } else {
                Network::lossy()
            },
            wakes: BTreeMap::new(),
            history: Vec::new(),
            checks: Some(Checkers::default()),
            trace,
            stats: Stats::default(),
            safety_end,
            faults_on: !config_quiet,
            timeouts,
            held: BTreeMap::new(),
            wiped: false,
        };
        if let Some((r, extra)) = world.config.lagging {
            world.net.slow_down(NodeId::Replica(r), extra);
        }
        let replica_ids: Vec<ReplicaId> = world.replicas.keys().copied().collect();
        for r in replica_ids {
            world.schedule(0, Event::Wake(NodeId::Replica(r)));
        }
        let coordinator_ids: Vec<ReplicaId> = world.coordinators.keys().copied().collect();
        for r in coordinator_ids {
            world.start_coordinator(r);
        }
        let client_ids: Vec<ClientId> = world.clients.keys().copied().collect();
        for c in client_ids {
            let at = world.rng.below(50_000_000);
            world.schedule(at, Event::ClientNext(c));
        }
        if !config_quiet {
            let first_fault = world.fault_delay();
            world.schedule(first_fault, Event::Fault);
        }
        world.schedule(ns(Duration::from_millis(200)), Event::LockElection);
        world.schedule(safety_end, Event::EndSafetyPhase);
        world
    }

    fn coordinator_config(&mut self, r: ReplicaId) -> CoordinatorConfig {
        let lease = self.config.lock_lease;
        CoordinatorConfig {
            replica: r,
            lock_nodes: self.lock.model.nodes().collect(),
            lock_attempt_timeout: self.config.max_latency() * 4 + Duration::from_millis(40),
            keepalive_interval: lease / 4,
            max_clock_drift_ppm: self.config.max_drift_ppm,
            lease_margin: Duration::from_millis(5),
            retry_delay: lease / 4,
            first_request_id: self.rng.next_u64(),
            bugs: self.bugs.coordinator,
        }
    }

    fn start_coordinator(&mut self, r: ReplicaId) {
        let core = Coordinator::new(self.coordinator_config(r));
        if let Some(node) = self.coordinators.get_mut(&r) {
            node.core = Some(core);
        }
        self.run_coordinator(r, CoordinatorInput::Start);
    }

    /// The node's clock reading now.
    pub fn local_now(&self, node: NodeId) -> Time {
        self.clocks[&node].local(self.now)
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, event);
    }

    fn fault_delay(&mut self) -> u64 {
        let interval = if self.config.restart_storm {
            Duration::from_millis(150)
        } else {
            self.config.fault_interval
        };
        let mean = ns(interval);
        mean / 2 + self.rng.below(mean)
    }

    /// Runs events until real time `end` (or until nothing is left).
    pub fn run_until(&mut self, end: u64) {
        while let Some(&Reverse((at, seq))) = self.queue.peek() {
            if at > end {
                break;
            }
            self.queue.pop();
            // A message delayed in flight left its old slot empty.
            let Some(event) = self.events.remove(&seq) else {
                continue;
            };
            self.now = at;
            self.handle(event);
            let mut checks = self
                .checks
                .take()
                .expect("checkers are present between events");
            checks.after_event(self);
            self.checks = Some(checks);
        }
        self.now = self.now.max(end);
    }

    /// The checkers, after the run.
    pub fn into_checkers(mut self) -> (Checkers, World) {
        let checks = self.checks.take().expect("checkers are present");
        (checks, self)
    }

    fn site_of(&self, node: NodeId) -> SiteId {
        match node {
            NodeId::Replica(r) => self.replicas[&r].site,
            NodeId::Coordinator(r) => self.coordinators[&r].site,
            NodeId::Client(c) => self.clients[&c].site,
            NodeId::LockNode(n) => self.lock.sites[&n],
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, message: Message) {
        self.stats.messages += 1;
        let (from_site, to_site) = (self.site_of(from), self.site_of(to));
        let delivery = self.net.deliver(
            &self.config,
            &mut self.rng,
            (from, from_site),
            (to, to_site),
        );
        if let Delivery::After(_) = &delivery {
            let hold = [Hold::Link(from, to), Hold::Inbox(to)]
                .into_iter()
                .find(|h| self.held.contains_key(h));
            if let Some(held) = hold.and_then(|h| self.held.get_mut(&h)) {
                held.push((from, to, message));
                return;
            }
        }
        if let Delivery::After(delays) = delivery {
            for delay in delays {
                let at = self.now + ns(delay);
                self.schedule(
                    at,
                    Event::Deliver {
                        from,
                        to,
                        message: message.clone(),
                    },
                );
            }
        }
    }

    fn wake_at(&mut self, node: NodeId, local: Time) {
        let real = self.clocks[&node].real(local).max(self.now + 1);
        if self
            .wakes
            .get(&node)
            .is_some_and(|scheduled| *scheduled <= real && *scheduled > self.now)
        {
            return;
        }
        self.wakes.insert(node, real);
        self.schedule(real, Event::Wake(node));
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, message } => {
                self.trace.record(self.now, from, to, &message);
                self.deliver(from, to, message);
            }
            Event::Wake(node) => {
                if self.wakes.get(&node) == Some(&self.now) {
                    self.wakes.remove(&node);
                }
                match node {
                    NodeId::Replica(r) => self.run_replica(r, ReplicaInput::Tick, None),
                    NodeId::Coordinator(r) => self.run_coordinator(r, CoordinatorInput::Tick),
                    NodeId::Client(c) => self.run_client(c, ClientInput::Tick),
                    NodeId::LockNode(_) => {}
                }
            }
            Event::ClientNext(c) => {
                let local = self.local_now(NodeId::Client(c));
                let now = self.now;
                let end = self.ops_until();
                let Some(client) = self.clients.get_mut(&c) else {
                    return;
                };
                if client.busy() || now >= end {
                    return;
                }
                let outputs = client.start_next(now, local);
                self.client_outputs(c, outputs);
            }
            Event::Fault => {
                if self.faults_on {
                    crate::faults::inject(self);
                    let next = self.now + self.fault_delay();
                    self.schedule(next, Event::Fault);
                }
            }
            Event::Restart(node) => self.restart(node),
            // Faults end with the safety phase, planned ones too.
            Event::Crash(node, down) if self.faults_on => self.crash(node, down),
            Event::Crash(..) => {}
            Event::Disable(r) => self.disable_coordinator(r),
            Event::Release(hold) => {
                // Everything held is let go at once, in random order.
                for (from, to, message) in self.held.remove(&hold).unwrap_or_default() {
                    let at = self.now + self.rng.below(50_000_000);
                    self.schedule(at, Event::Deliver { from, to, message });
                }
            }
            Event::HealLinks => {
                self.net.heal();
                if let Some((r, extra)) = self.config.lagging.filter(|_| self.faults_on) {
                    self.net.slow_down(NodeId::Replica(r), extra);
                }
            }
            Event::BlockLinks(links, duration) => {
                if self.faults_on {
                    self.block_links(links, duration);
                }
            }
            Event::LockElection => {
                self.elect_lock_leader();
                let next = self.now + ns(Duration::from_millis(200));
                self.schedule(next, Event::LockElection);
            }
            Event::EndSafetyPhase => self.heal_everything(),
        }
    }

    /// When the run ends.
    pub fn end_time(&self) -> u64 {
        self.safety_end + ns(self.config.liveness_phase)
    }

    /// Clients start no operation after this: the last seconds let replicas converge.
    pub fn ops_until(&self) -> u64 {
        self.end_time()
            .saturating_sub(ns(Duration::from_secs(10)))
            .max(self.safety_end)
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, message: Message) {
        match to {
            NodeId::Replica(r) => {
                let handled = match &message {
                    Message::ReplicaRequest(request) => Some(request.clone()),
                    _ => None,
                };
                self.run_replica(r, ReplicaInput::Message { from, message }, handled);
            }
            NodeId::Coordinator(r) => {
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
            NodeId::Client(c) => self.run_client(c, ClientInput::Message { from, message }),
            NodeId::LockNode(n) => {
                if let Message::LockRequest(request) = message {
                    self.serve_lock(n, from, request);
                }
            }
        }
    }

    /// A lock node answers: only the leader serves, and only while it can reach a
    /// majority of the lock nodes (as a Raft leader must).
    fn serve_lock(&mut self, n: LockNodeId, from: NodeId, request: megastore_lock::LockRequest) {
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
    fn elect_lock_leader(&mut self) {
        let (clocks, now, net) = (&self.clocks, self.now, &self.net);
        self.lock
            .model
            .elect(|n| clocks[&NodeId::LockNode(n)].local(now), lock_link(net));
    }

    pub(crate) fn change_lock_leader(&mut self, n: LockNodeId) {
        let now = self.local_now(NodeId::LockNode(n));
        self.lock.model.change_leader(n, now);
    }

    fn run_replica(&mut self, r: ReplicaId, input: ReplicaInput, handled: Option<ReplicaRequest>) {
        let local = self.local_now(NodeId::Replica(r));
        // The same loop as the replica server: writes go to the store buffered, and the
        // batch's messages leave only after its one sync (`Batch::release`).
        let mut batch = Batch::new();
        {
            let node = self.replicas.get_mut(&r).expect("replica exists");
            let Some(core) = node.core.as_mut() else {
                return;
            };
            core.step_into(local, input, &node.store, &mut batch)
                .expect("the memory store does not fail");
        }
        let counts = batch.counts();
        self.stats.installs += counts.installs;
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
            checks.after_replica_step(self, r, handled.as_ref(), &[]);
            self.checks = Some(checks);
            let down = Duration::from_millis(2 + self.rng.below(80));
            self.crash(NodeId::Replica(r), down);
            return;
        }
        let released = {
            let node = self.replicas.get(&r).expect("replica exists");
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
        checks.after_replica_step(self, r, handled.as_ref(), &replies);
        self.checks = Some(checks);
        if crash {
            let down = Duration::from_millis(2 + self.rng.below(80));
            self.crash(NodeId::Replica(r), down);
            return;
        }
        for (to, message) in released.sends {
            self.send(NodeId::Replica(r), to, message);
        }
        if let Some(t) = released.wake {
            self.wake_at(NodeId::Replica(r), t);
        }
    }

    fn run_coordinator(&mut self, r: ReplicaId, input: CoordinatorInput) {
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

    fn run_client(&mut self, c: ClientId, input: ClientInput) {
        let local = self.local_now(NodeId::Client(c));
        let Some(client) = self.clients.get_mut(&c) else {
            return;
        };
        let outputs = client.core.step(local, input);
        self.client_outputs(c, outputs);
    }

    fn client_outputs(&mut self, c: ClientId, outputs: Vec<ClientOutput>) {
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
                    queue.extend(more);
                    let idle = !client.busy();
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

    fn op_done(&mut self, record: OpRecord) {
        use crate::history::{OpKind, Outcome};
        match (&record.kind, &record.outcome) {
            (_, Outcome::Committed { .. }) => self.stats.commits += 1,
            (_, Outcome::NotCommitted) => self.stats.conflicts += 1,
            (_, Outcome::Unknown) => self.stats.unknown += 1,
            (_, Outcome::ResolvedNotCommitted { .. }) => self.stats.resolved_not_committed += 1,
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
        }
        let mut checks = self.checks.take().expect("checkers are present");
        checks.on_op_done(self, &record);
        self.checks = Some(checks);
        self.trace.note(self.now, &format!("done {:?}", record));
        self.history.push(record);
    }

    /// Crashes a node; it restarts after `down`.
    pub(crate) fn crash(&mut self, node: NodeId, down: Duration) {
        self.stats.faults += 1;
        self.trace.note(self.now, &format!("crash {node}"));
        match node {
            NodeId::Replica(r) => {
                let n = self.replicas.get_mut(&r).expect("replica exists");
                n.core = None;
                n.store.crash();
            }
            NodeId::Coordinator(r) => {
                if let Some(c) = self.coordinators.get_mut(&r) {
                    c.core = None;
                }
            }
            NodeId::LockNode(n) => {
                self.lock.model.set_up(n, false);
            }
            NodeId::Client(_) => return,
        }
        self.wakes.remove(&node);
        let at = self.now + ns(down);
        self.schedule(at, Event::Restart(node));
    }

    /// Crashes `node` after `after`, for `down`.
    pub(crate) fn crash_later(&mut self, node: NodeId, after: Duration, down: Duration) {
        let at = self.now + ns(after);
        self.schedule(at, Event::Crash(node, down));
    }

    /// Wipes a replica's store, as a lost disk would: the replica and its coordinator
    /// go down for `down`, and the replica comes back rejoining.
    pub(crate) fn wipe(&mut self, r: ReplicaId, down: Duration) {
        self.trace.note(self.now, &format!("wipe replica {}", r.0));
        self.crash(NodeId::Replica(r), down);
        if self.coordinators.contains_key(&r) {
            self.crash(NodeId::Coordinator(r), down);
        }
        let n = self.replicas.get_mut(&r).expect("replica exists");
        n.store = MemoryStore::new();
        n.rejoining = true;
        n.wipes += 1;
        self.wiped = true;
        self.stats.wipes += 1;
    }

    fn restart(&mut self, node: NodeId) {
        self.trace.note(self.now, &format!("restart {node}"));
        match node {
            NodeId::Replica(r) => {
                let lock_nodes: Vec<LockNodeId> = self.lock.model.nodes().collect();
                let seed = self.rng.next_u64();
                let rejoining = self.replicas.get(&r).is_some_and(|n| n.rejoining);
                let config = replica_config(
                    &self.config,
                    self.bugs,
                    &self.timeouts,
                    &lock_nodes,
                    r,
                    seed,
                    rejoining,
                );
                let n = self.replicas.get_mut(&r).expect("replica exists");
                if n.core.is_none() {
                    n.core = Some(Replica::new(config));
                    let now = self.now;
                    self.schedule(now, Event::Wake(NodeId::Replica(r)));
                }
            }
            NodeId::Coordinator(r) => {
                // A coordinator that was disabled or stopped comes back only as a new
                // process, like one that crashed.
                let down = |c: &CoordinatorNode| c.core.as_ref().is_none_or(Coordinator::retired);
                if self.coordinators.get(&r).is_some_and(down) {
                    self.start_coordinator(r);
                }
            }
            NodeId::LockNode(n) => {
                self.lock.model.set_up(n, true);
            }
            NodeId::Client(_) => {}
        }
    }

    /// Stops a coordinator cleanly (it stops vouching and gives its lock back); a new
    /// process starts after `down`.
    pub(crate) fn stop_coordinator(&mut self, r: ReplicaId, down: Duration) {
        self.stats.faults += 1;
        self.trace
            .note(self.now, &format!("stop coordinator {}", r.0));
        self.run_coordinator(r, CoordinatorInput::Stop);
        let at = self.now + ns(down);
        self.schedule(at, Event::Restart(NodeId::Coordinator(r)));
    }

    /// An operator disables coordinator `r` after `after`, and restarts it after
    /// `restart_after` (once the partition that called for it has healed).
    pub(crate) fn operator_disables(
        &mut self,
        r: ReplicaId,
        after: Duration,
        restart_after: Duration,
    ) {
        let at = self.now + ns(after);
        self.schedule(at, Event::Disable(r));
        let at = self.now + ns(restart_after);
        self.schedule(at, Event::Restart(NodeId::Coordinator(r)));
    }

    /// `megastore coordinator disable`: revokes the holder of the coordinator's lock,
    /// through the lock service's leader (refused without a majority, as lockd would).
    fn disable_coordinator(&mut self, r: ReplicaId) {
        let lock = megastore_coordinator::lock_name(r);
        let (clocks, now, net) = (&self.clocks, self.now, &self.net);
        let result = self.lock.model.execute_at_leader(
            |n| clocks[&NodeId::LockNode(n)].local(now),
            &LockCommand::RevokeHolder { lock },
            lock_link(net),
        );
        self.trace.note(
            self.now,
            &format!("operator disables coordinator {}: {result:?}", r.0),
        );
    }

    pub(crate) fn block_links(&mut self, links: Vec<(NodeId, NodeId)>, duration: Duration) {
        self.stats.faults += 1;
        self.trace
            .note(self.now, &format!("partition {} links", links.len()));
        for (a, b) in links {
            self.net.block(a, b);
        }
        let at = self.now + ns(duration);
        self.schedule(at, Event::HealLinks);
    }

    /// Cuts `links` for `duration`, starting `after` from now.
    pub(crate) fn block_links_later(
        &mut self,
        links: Vec<(NodeId, NodeId)>,
        after: Duration,
        duration: Duration,
    ) {
        let at = self.now + ns(after);
        self.schedule(at, Event::BlockLinks(links, duration));
    }

    #[cfg(test)]
    /// Delays every message in flight that `pick` selects until `duration` from now
    /// (as a congested or rerouted link might); returns how many.
    pub(crate) fn delay_in_flight(
        &mut self,
        pick: impl Fn(NodeId, NodeId, &Message) -> bool,
        duration: Duration,
    ) -> usize {
        let picked: Vec<u64> = self
            .events
            .iter()
            .filter(|(_, e)| matches!(e, Event::Deliver { from, to, message } if pick(*from, *to, message)))
            .map(|(seq, _)| *seq)
            .collect();
        let at = self.now + ns(duration);
        for seq in &picked {
            if let Some(event) = self.events.remove(seq) {
                self.schedule(at, event);
            }
        }
        if !picked.is_empty() {
            self.stats.faults += 1;
            self.trace.note(
                self.now,
                &format!("delay {} messages in flight", picked.len()),
            );
        }
        picked.len()
    }

    /// Holds every message of `hold` for `duration`, then releases them together.
    pub(crate) fn hold(&mut self, hold: Hold, duration: Duration) {
        if self.held.contains_key(&hold) {
            return;
        }
        self.stats.faults += 1;
        self.trace.note(self.now, &format!("hold {hold:?}"));
        self.held.insert(hold, Vec::new());
        let at = self.now + ns(duration);
        self.schedule(at, Event::Release(hold));
    }

    /// Every node, by kind (for fault selection).
    pub(crate) fn all_nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.replicas.keys().map(|r| NodeId::Replica(*r)).collect();
        nodes.extend(self.coordinators.keys().map(|r| NodeId::Coordinator(*r)));
        nodes.extend(self.lock.model.nodes().map(NodeId::LockNode));
        nodes.extend(self.clients.keys().map(|c| NodeId::Client(*c)));
        nodes
    }

    pub(crate) fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    pub(crate) fn node_site(&self, node: NodeId) -> SiteId {
        self.site_of(node)
    }

    /// The liveness phase begins: every link heals, per-message faults stop, every
    /// crashed node restarts, and a lock leader with a majority is in place.
    fn heal_everything(&mut self) {
        self.trace.note(self.now, "heal: liveness phase");
        self.faults_on = false;
        self.net.heal();
        self.net.lossy = false;
        for hold in self.held.keys().copied().collect::<Vec<_>>() {
            let now = self.now;
            self.schedule(now, Event::Release(hold));
        }
        for node in self.all_nodes() {
            self.restart(node);
        }
        self.elect_lock_leader();
    }

    /// A reply a replica sent in this step (for checkers).
    pub fn replica_reply_ok(reply: &ReplicaReply) -> bool {
        !matches!(reply, ReplicaReply::Error { .. })
    }
}

/// Whether lock node `a` reaches lock node `b` on `net`.
fn lock_link(net: &Network) -> impl Fn(LockNodeId, LockNodeId) -> bool + '_ {
    move |a, b| net.reachable(NodeId::LockNode(a), NodeId::LockNode(b))
}
