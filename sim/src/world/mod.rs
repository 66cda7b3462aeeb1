//! The simulated world: nodes, clocks, the network, and the event loop that feeds the
//! protocol state machines. Drivers here only move messages, time and storage; every
//! decision is made by `megastore-paxos`, `megastore-coordinator` and `megastore-lock`.

mod build;
mod catch_up;
mod drive;
mod moves;
mod outages;
mod placement;
mod removals;
mod routing;

pub(crate) use routing::server_at;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use megastore_coordinator::Input as CoordinatorInput;
use megastore_paxos::{ClientInput, Message, ReplicaInput, Timeouts};
use megastore_types::{ClientId, EgId, NodeId, ReplicaId, SiteId, Time};

use crate::clock::Clock;
use crate::config::SimConfig;
use crate::faults::Hold;
use crate::history::OpRecord;
use crate::invariants::Checkers;
use crate::network::{Delivery, Network};
use crate::nodes::{Bugs, CoordinatorNode, LockModel, ReplicaNode, Stats};
use crate::observation::Observation;
use crate::rng::Rng;
use crate::trace::Trace;
use crate::workload::ClientNode;

#[derive(Debug, Clone)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        message: Message,
    },
    Wake(NodeId),
    ClientNext(ClientId),
    /// A client's process dies in the middle of this cross-group commit of its own (it
    /// planned it), and a new one starts under a new client id.
    ClientCrash(ClientId, u64),
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
    /// The operator splits a range (`megastore range split`).
    Split,
    /// This process asks lockd for the placement (its poll); the answer is the newest
    /// placement now, and arrives later.
    ReadPlacement(NodeId),
    /// The answer to a placement read reaches this process.
    PlacementAnswer(NodeId, Box<megastore_placement::Placement>),
    /// The operator takes the next step of its move (`moves.rs`).
    Operate,
    /// The operator removes a replica from ranges (`removals.rs`).
    RemoveReplica,
    /// The operator's round of voter catch-up passes, then the second removal
    /// (`catch_up.rs`).
    CatchUpVoters,
}

/// One simulated run.
pub(crate) struct World {
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
    /// The id the next restarted client process runs under (ids no client had).
    next_client_id: u32,
    /// The relay beside each full replica's server, by address (its client node),
    /// with relays on.
    relays: BTreeMap<ReplicaId, ClientId>,
    /// Groups whose prepared transactions the full replicas' sweep settles, and from
    /// when (real time, ns).
    prepared_due: BTreeMap<EgId, u64>,
    /// Coordinator groups whose old decisions the full replicas' collection looks at,
    /// from when (real time, ns), and the page to start from.
    decided_due: BTreeMap<EgId, (u64, Option<Vec<u8>>)>,
    /// The collection passes past their first page (what the pages before kept).
    collection_passes: BTreeMap<EgId, megastore_paxos::CollectionPass>,
    /// The placement lockd holds (`placement.rs`).
    placement: megastore_placement::Placement,
    /// The version of the lock service's placement file (0: not written yet).
    placement_file_version: u64,
    /// The move the operator carries out, and what it did since it (re)started.
    moving: Option<(
        megastore_placement::MoveRequest,
        megastore_placement::Progress,
    )>,
    /// The range and slot of the operator's last move: its next often moves the same
    /// slot back (`moves.rs`).
    last_moved: Option<(megastore_placement::RangeId, ReplicaId)>,
    /// The copy under way at a move's target, a page per operator step (`moves.rs`).
    copying: Option<moves::Copying>,
    /// Requests sent by servers away from their slot's home address, by (the address
    /// asked, request id): where the reply goes (`routing.rs`).
    asked: BTreeMap<(NodeId, u64), NodeId>,
    /// The operator's choices, drawn apart from the world's, so that the traces of
    /// seeds without an operator stay as they were.
    operator_rng: Rng,
    /// The removal's choices (`removals.rs`), until it is made.
    removal_rng: Option<Rng>,
    /// The witness the operator removes once the first removal is caught up
    /// (`catch_up.rs`), until it is removed.
    second_removal: Option<ReplicaId>,
    /// The removal chosen (replica, ranges), until it is made: a full replica's takes
    /// several steps (`removals.rs`).
    removing: Option<(ReplicaId, Vec<megastore_placement::RangeId>)>,
    /// The servers whose coordinators the removal's operator found fenced, for which
    /// placement (`removals.rs`).
    fenced:
        std::collections::BTreeSet<(megastore_placement::ServerId, megastore_placement::Version)>,
    /// The voter catch-up passes that ended, at which server address, not yet looked
    /// at by the operator.
    pass_reports: Vec<(ReplicaId, megastore_paxos::VoterPassReport)>,
    /// The passes that found every group held: (server address, range, change).
    passes_held: std::collections::BTreeSet<(
        ReplicaId,
        megastore_placement::RangeId,
        megastore_placement::Version,
    )>,
}

/// How long the simulated replicas keep decisions: short, so that collections race
/// with the settles and resolutions that read them (a real cluster keeps them at
/// least four prepared timeouts).
fn decision_retention(timeouts: &megastore_paxos::Timeouts) -> Duration {
    timeouts.prepared * 2
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl World {
    /// The node's clock reading now.
    /// What the checkers see of the run now.
    pub(crate) fn observation(&self) -> Observation<'_> {
        let mut obs = Observation::new(
            self.now,
            &self.config.topology,
            &self.history,
            &self.replicas,
            &self.coordinators,
            &self.clocks,
            &self.placement,
        );
        if self.now >= self.end_time() {
            obs.decisions_finished_before = self.decisions_finished_before();
        }
        obs
    }

    /// The real time (ns) before which every cross-group transaction finished
    /// everywhere (its decision written, no record left) must have its decision
    /// collected by the run's end (*decisions-collected*): the collection looks at a
    /// group one retention after a decision lands and again every retention while it
    /// keeps rows, so a row finished two retentions (and 2 s for the collection's own
    /// reads and commit) before the sweeps stop has had a look after it finished.
    fn decisions_finished_before(&self) -> Option<u64> {
        if !self.config.two_phase {
            return None;
        }
        let retention = decision_retention(&self.timeouts);
        self.sweeps_until()
            .checked_sub(ns(retention * 2 + Duration::from_secs(2)))
    }

    /// Wakes every client that sweeps at `due`: after the workload each may have gone
    /// idle, waiting only for the dues it knew of.
    pub(super) fn wake_sweepers(&mut self, due: u64) {
        let at = due.max(self.now + 1);
        let sweepers: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, client)| client.two_phase)
            .map(|(c, _)| *c)
            .collect();
        for c in sweepers {
            self.schedule(at, Event::ClientNext(c));
        }
    }

    /// When the replicas' sweeps (settling, collecting) stop: they go on after the
    /// workload stops, as on real servers, until the run's last seconds of converging.
    fn sweeps_until(&self) -> u64 {
        self.end_time().saturating_sub(ns(Duration::from_secs(5)))
    }

    pub(crate) fn local_now(&self, node: NodeId) -> Time {
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
    pub(crate) fn run_until(&mut self, end: u64) {
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
            checks.after_event(&self.observation());
            self.checks = Some(checks);
        }
        self.now = self.now.max(end);
    }

    /// Runs the checks of the run's end (liveness among them) on the world as it is.
    pub(crate) fn finish_checks(&mut self) {
        let mut checks = self.checks.take().expect("checkers are present");
        checks.finish(&self.observation());
        self.checks = Some(checks);
    }

    /// The checkers, after the run.
    pub(crate) fn into_checkers(mut self) -> (Checkers, World) {
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
        let to = self.route(from, to, &message);
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
                if !self.client_process_up(c) {
                    // A relay whose replica is down: it starts again with the replica.
                    return;
                }
                let sweeps_until = self.sweeps_until();
                let Some(client) = self.clients.get_mut(&c) else {
                    return;
                };
                let workload = now < end;
                if client.busy() || (!workload && now >= sweeps_until) {
                    return;
                }
                let sweep = client
                    .two_phase
                    .then(|| {
                        self.prepared_due
                            .iter()
                            .find(|(_, due)| **due <= now)
                            .map(|(eg, _)| eg.clone())
                    })
                    .flatten();
                let collect = client
                    .two_phase
                    .then(|| {
                        self.decided_due
                            .iter()
                            .find(|(_, (due, _))| *due <= now)
                            .map(|(eg, _)| eg.clone())
                    })
                    .flatten();
                let retention = decision_retention(&self.timeouts);
                let outputs = match (sweep, collect) {
                    (Some(eg), _) => {
                        self.prepared_due.remove(&eg);
                        client.settle_group(now, local, eg)
                    }
                    (None, Some(eg)) => {
                        let (_, after) = self.decided_due.remove(&eg).unwrap_or_default();
                        client.collect_group(now, local, eg, after, retention)
                    }
                    (None, None) if workload => client.start_next(now, local),
                    (None, None) => {
                        // Come back when the next sweep is due.
                        let next = client
                            .two_phase
                            .then(|| {
                                let prepared = self.prepared_due.values().copied();
                                let decided = self.decided_due.values().map(|(due, _)| *due);
                                prepared.chain(decided).min()
                            })
                            .flatten()
                            .filter(|due| *due < sweeps_until);
                        if let Some(due) = next {
                            self.schedule(due.max(now + 1), Event::ClientNext(c));
                        }
                        return;
                    }
                };
                self.client_outputs(c, outputs);
            }
            Event::ClientCrash(c, serial) => {
                let now = self.now;
                let new_id = ClientId(self.next_client_id);
                let seed = self.rng.next_u64();
                let Some(client) = self.clients.get_mut(&c) else {
                    return;
                };
                if let Some(record) = client.crash_in_two_phase(now, serial, new_id, seed) {
                    self.next_client_id += 1;
                    self.trace.note(
                        now,
                        &format!("client {} dies, restarts as {}", c.0, new_id.0),
                    );
                    self.op_done(record);
                    self.schedule(now, Event::ClientNext(c));
                }
            }
            Event::Fault => {
                if self.faults_on {
                    let faults = crate::faults::choose(&self.scene(), &mut self.rng);
                    for fault in faults {
                        self.carry_out(fault);
                    }
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
            Event::Split => self.split(),
            Event::RemoveReplica => self.remove_replica(),
            Event::CatchUpVoters => self.catch_up_voters(),
            Event::ReadPlacement(node) => self.read_placement(node),
            Event::PlacementAnswer(node, placement) => self.placement_answer(node, *placement),
            Event::Operate => self.operate(),
        }
    }

    /// When the run ends.
    pub(crate) fn end_time(&self) -> u64 {
        self.safety_end + ns(self.config.liveness_phase)
    }

    /// Whether replica `r`'s process runs now.
    pub(crate) fn replica_up(&self, r: ReplicaId) -> bool {
        self.replicas.get(&r).is_some_and(|n| n.core.is_some())
    }

    /// Clients start no operation after this: the last seconds let replicas converge.
    pub(crate) fn ops_until(&self) -> u64 {
        self.end_time()
            .saturating_sub(ns(Duration::from_secs(10)))
            .max(self.safety_end)
    }
}
