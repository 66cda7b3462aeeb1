//! Carrying out faults: crashes, restarts and store wipes, coordinator stops and
//! operator disables, partitions, delays and held-back inboxes (the fault schedule
//! itself is `faults.rs`'s).

use std::time::Duration;

use megastore_coordinator::{Coordinator, Input as CoordinatorInput};
use megastore_lock::LockCommand;
use megastore_paxos::Replica;
use megastore_rowstore::MemoryStore;
use megastore_types::{LockNodeId, NodeId, ReplicaId};

use crate::nodes::CoordinatorNode;

use super::build::replica_config;
use super::drive::lock_link;
use super::{Event, World, ns};
use crate::faults::{Fault, Hold, Scene};

/// How long after its start a replica server that missed a placement reads the newest
/// (its follower's next poll).
const RESTART_PLACEMENT_READ: Duration = Duration::from_secs(1);

impl World {
    /// Crashes a node; it restarts after `down`.
    pub(crate) fn crash(&mut self, node: NodeId, down: Duration) {
        self.stats.faults += 1;
        self.trace.note(self.now, &format!("crash {node}"));
        match node {
            NodeId::Replica(r) => {
                let n = self.replicas.get_mut(&r).expect("replica exists");
                n.core = None;
                n.store.crash();
                self.restart_relay(r);
                let mut checks = self.checks.take().expect("checkers are present");
                checks.after_crash(&self.observation(), r, self.config.replica_cache.is_some());
                self.checks = Some(checks);
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

    pub(super) fn restart(&mut self, node: NodeId) {
        self.trace.note(self.now, &format!("restart {node}"));
        match node {
            NodeId::Replica(r) => {
                let lock_nodes: Vec<LockNodeId> = self.lock.model.nodes().collect();
                let seed = self.rng.next_u64();
                let rejoining = self.replicas.get(&r).is_some_and(|n| n.rejoining);
                let slot = self.replicas.get(&r).map_or(r, |n| n.slot);
                let config = replica_config(
                    &self.config,
                    self.bugs,
                    &self.timeouts,
                    &lock_nodes,
                    slot,
                    seed,
                    rejoining,
                );
                let n = self.replicas.get_mut(&r).expect("replica exists");
                if n.core.is_none() {
                    n.starts += 1;
                    let core = Replica::new(config);
                    n.core = Some(super::placement::placed_replica(
                        core,
                        r,
                        &n.store,
                        &self.placement,
                        self.bugs.placement,
                    ));
                    let behind = n
                        .core
                        .as_ref()
                        .and_then(|core| core.placement())
                        .is_some_and(|p| p.view().version() < self.placement.version());
                    // The core loads what it must look after at its first step
                    // (every registered group, or with a bounded cache those the
                    // open index lists).
                    let now = self.now;
                    self.schedule(now, Event::Wake(NodeId::Replica(r)));
                    // It started on the placement it stored; its placement follower
                    // polls lockd, so a placement announced while it was down (a move
                    // to it aborted: its copy to retire) is read a moment later (seed
                    // 4035: a target down through its move's abort kept the partial
                    // copy to the end). Only then: a read that changes nothing would
                    // only reshuffle every later event of the run.
                    if behind {
                        let read_at = now + ns(RESTART_PLACEMENT_READ);
                        self.schedule(read_at, Event::ReadPlacement(NodeId::Replica(r)));
                    }
                    // Its relay's own workload goes on with it.
                    if let Some(relay) = self.relays.get(&r).copied()
                        && self.clients.get(&relay).is_some_and(|c| c.gateway)
                    {
                        self.schedule(now, Event::ClientNext(relay));
                    }
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
    pub(super) fn disable_coordinator(&mut self, r: ReplicaId) {
        // The coordinator beside the server at `r` holds its server's lock.
        let lock = megastore_coordinator::coordinator_lock(super::routing::server_at(r));
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
        pick: impl Fn(NodeId, NodeId, &megastore_paxos::Message) -> bool,
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
    /// What the fault schedule draws from.
    pub(super) fn scene(&self) -> Scene {
        let nodes = self.all_nodes();
        let sites = nodes.iter().map(|n| (*n, self.site_of(*n))).collect();
        Scene {
            restart_storm: self.config.restart_storm,
            site_count: self.config.sites,
            lock_lease: self.config.lock_lease,
            voters: self.config.topology.voters().collect(),
            nodes,
            sites,
            replicas: self.replicas.keys().copied().collect(),
            coordinators: self.coordinators.keys().copied().collect(),
            clients: self.clients.values().map(|c| (c.id, c.site)).collect(),
            wiped: self.wiped,
            lock_nodes: self.lock.model.len() as u16,
            lock_leader: self.lock.model.leader(),
            lock_up: self
                .lock
                .model
                .nodes()
                .filter(|n| self.lock.model.is_up(*n))
                .collect(),
        }
    }

    /// Carries out one step of a fault the schedule drew.
    pub(super) fn carry_out(&mut self, fault: Fault) {
        match fault {
            Fault::Crash { node, down } => self.crash(node, down),
            Fault::CrashLater { node, after, down } => self.crash_later(node, after, down),
            Fault::Wipe { replica, down } => self.wipe(replica, down),
            Fault::StopCoordinator { replica, down } => self.stop_coordinator(replica, down),
            Fault::OperatorDisables {
                replica,
                after,
                down,
            } => self.operator_disables(replica, after, down),
            Fault::BlockLinks { links, duration } => self.block_links(links, duration),
            Fault::BlockLinksLater {
                links,
                after,
                duration,
            } => self.block_links_later(links, after, duration),
            Fault::Hold { hold, duration } => self.hold(hold, duration),
            Fault::SlowDown { node, extra_ms } => {
                self.net.slow_down(node, extra_ms);
                self.trace
                    .note(self.now, &format!("slow link into {node}: +{extra_ms} ms"));
            }
            Fault::ChangeLockLeader(next) => {
                self.stats.faults += 1;
                self.trace
                    .note(self.now, &format!("lock leader -> {}", next.0));
                self.change_lock_leader(next);
            }
        }
    }

    pub(crate) fn all_nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.replicas.keys().map(|r| NodeId::Replica(*r)).collect();
        nodes.extend(self.coordinators.keys().map(|r| NodeId::Coordinator(*r)));
        nodes.extend(self.lock.model.nodes().map(NodeId::LockNode));
        nodes.extend(self.clients.keys().map(|c| NodeId::Client(*c)));
        nodes
    }

    /// The liveness phase begins: every link heals, per-message faults stop, every
    /// crashed node restarts, and a lock leader with a majority is in place.
    pub(super) fn heal_everything(&mut self) {
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
}
