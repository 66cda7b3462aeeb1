//! Building a world: every node of the seed's topology, its clock and its core.

use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use megastore_coordinator::{Coordinator, CoordinatorConfig, Input as CoordinatorInput};
use megastore_lock::{LockCore, QuorumModel};
use megastore_paxos::{
    ClientConfig, ClientCore, ProposerConfig, RelayRole, Replica, ReplicaConfig, SweepConfig,
    Timeouts,
};
use megastore_rowstore::MemoryStore;
use megastore_types::{ClientId, LockNodeId, NodeId, ProposerId, ReplicaId, ReplicaKind};

use crate::clock::Clock;
use crate::config::SimConfig;
use crate::invariants::Checkers;
use crate::network::Network;
use crate::nodes::{Bugs, CoordinatorNode, LockModel, ReplicaNode, Stats};
use crate::rng::Rng;
use crate::trace::Trace;
use crate::workload::ClientNode;

use super::{Event, World, ns};

/// A replica's configuration: its sweep proposes as `ProposerId::replica(id)`.
pub(super) fn replica_config(
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
        log_kept: 0,
        // Small, so that busy groups are probed out of their turn within a run.
        probe_above: 8,
        // Small, so that a replica down or cut off for a few seconds holds truncation
        // back no longer, and installs snapshots when it is back.
        outage_log_max: 16,
    };
    ReplicaConfig {
        id,
        topology: config.topology.clone(),
        bugs: bugs.protocol,
        sweep: Some(sweep),
        rejoining,
        cache_groups: config.replica_cache,
    }
}

/// The client ids of the relays beside the full replicas' servers: `RELAY_IDS` + the
/// server's address (between the workload's clients and restarted ones).
pub(super) const RELAY_IDS: u32 = 1 << 15;

/// A relay's client core: it commits what is relayed to it, and, with
/// [`SimConfig::gateway_workload`], a workload of its own (whose commits of groups it
/// loses races for it relays to the position leader's relay).
#[allow(clippy::too_many_arguments)]
pub(super) fn relay_core(
    config: &SimConfig,
    timeouts: &megastore_paxos::Timeouts,
    lock_nodes: &[LockNodeId],
    bugs: Bugs,
    (id, site): (ClientId, megastore_types::SiteId),
    seed: u64,
    wall_clock_offset_ms: i64,
) -> ClientCore {
    ClientCore::new(ClientConfig {
        id,
        site,
        proposer: ProposerConfig {
            topology: config.topology.clone(),
            proposer: ProposerId::client(id),
            lock_nodes: lock_nodes.to_vec(),
            timeouts: timeouts.clone(),
            bugs: bugs.protocol,
        },
        seed,
        delivery_batch: 3,
        wall_clock_offset_ms,
        relay_role: RelayRole::Relay,
    })
}

impl World {
    /// Builds the world a seed describes, with `bugs`.
    pub(crate) fn new(seed: u64, bugs: Bugs, trace: Trace) -> Self {
        let mut rng = Rng::new(seed);
        let mut config = SimConfig::from_seed(&mut rng);
        config.coordinator_bounds = SimConfig::coordinator_bounds(seed);
        config.replica_cache = SimConfig::replica_cache(seed);
        config.relays = SimConfig::relays(seed);
        config.gateway_workload = SimConfig::gateway_workload(seed);
        config.splits = SimConfig::splits(seed);
        config.spares = SimConfig::spares(seed);
        config.removals = SimConfig::removals(seed);
        config.whole_copies = SimConfig::whole_copies(seed);
        if config.coordinator_bounds.is_some() || config.replica_cache.is_some() {
            // Bounds matter with more groups than they hold.
            config.groups = 3;
        }
        Self::from_config(config, rng, bugs, trace)
    }

    /// Builds a world from an explicit configuration (measurements use quiet ones).
    pub(crate) fn from_config(config: SimConfig, mut rng: Rng, bugs: Bugs, trace: Trace) -> Self {
        let max_latency = config.max_latency();
        let config_quiet = config.quiet;
        // Spares run from the start, outside the placement until the operator adds
        // each (before its first move to it).
        let placement = megastore_placement::Placement::one_server_per_replica(&config.topology);
        let operator_rng = Rng::new(config.splits.unwrap_or_default());
        let removal_rng = config.removals.map(Rng::new);
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
            let node_clock = Clock::new(rng.below(10_000_000_000), drift);
            clocks.insert(node, node_clock);
            node_clock
        };
        let mut replicas = BTreeMap::new();
        let mut coordinators = BTreeMap::new();
        // Every home server, then the spares (their draws come after the homes', so
        // the other seeds' stay as they were).
        let spares = config
            .topology
            .replicas()
            .iter()
            .filter(|_| config.spares)
            .map(|info| (super::placement::spare_address(info.id), info));
        let servers: Vec<(ReplicaId, megastore_types::ReplicaInfo)> = config
            .topology
            .replicas()
            .iter()
            .map(|info| (info.id, info))
            .chain(spares)
            .map(|(address, info)| (address, info.clone()))
            .collect();
        for (address, info) in servers {
            clock(&mut rng, NodeId::Replica(address));
            let replica_config = replica_config(
                &config,
                bugs,
                &timeouts,
                &lock_nodes,
                info.id,
                rng.next_u64(),
                false,
            );
            let store = MemoryStore::new();
            let core = super::placement::placed_replica(
                Replica::new(replica_config),
                address,
                &store,
                &placement,
                bugs.placement,
            );
            replicas.insert(
                address,
                ReplicaNode {
                    slot: info.id,
                    core: Some(core),
                    store,
                    site: info.site,
                    rejoining: false,
                    wipes: 0,
                    starts: 0,
                },
            );
            if info.kind == ReplicaKind::Full {
                clock(&mut rng, NodeId::Coordinator(address));
                coordinators.insert(
                    address,
                    CoordinatorNode {
                        slot: info.id,
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
            let client_clock = clock(&mut rng, NodeId::Client(id));
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
                // A few: outboxes then span many batches.
                delivery_batch: 3,
                // Its wall clock reads real time (plus its drift): the clients' clocks
                // disagree by no more than the drift bound allows.
                wall_clock_offset_ms: -client_clock.offset_ms(),
                relay_role: if config.relays {
                    RelayRole::Writer
                } else {
                    RelayRole::Direct
                },
            })
            .placed(placement.clone());
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
            node.verified_scans = config.verified_scans;
            node.queues = config.queues;
            node.two_phase = config.two_phase;
            node.two_phase_only = config.two_phase_only;
            if config.deliver_late {
                node.deliver_from = ns(config.safety_phase);
            }
            node.role = config
                .client_roles
                .get(i)
                .copied()
                .unwrap_or(crate::workload::Role::Mixed);
            clients.insert(id, node);
        }
        // A relay beside each full replica's server (a spare too): a client core of
        // its own that commits what clients relay to the server, and dies with it.
        let mut relays = BTreeMap::new();
        if config.relays {
            let full_servers: Vec<(ReplicaId, megastore_types::SiteId)> = replicas
                .iter()
                .filter(|(_, n)| config.topology.kind(n.slot) == Some(ReplicaKind::Full))
                .map(|(address, n)| (*address, n.site))
                .collect();
            for (r, site) in full_servers {
                let id = ClientId(RELAY_IDS + u32::from(r.0));
                let relay_clock = clock(&mut rng, NodeId::Client(id));
                let core = relay_core(
                    &config,
                    &timeouts,
                    &lock_nodes,
                    bugs,
                    (id, site),
                    rng.next_u64(),
                    -relay_clock.offset_ms(),
                )
                .placed(placement.clone());
                let (groups, keys) = if config.gateway_workload {
                    (config.groups, config.keys_per_group)
                } else {
                    (0, 0)
                };
                let mut node = ClientNode::new(id, site, core, rng.next_u64(), groups, keys);
                node.relay_of = Some(r);
                node.gateway = config.gateway_workload;
                node.writes_only = config.writes_only;
                node.role = crate::workload::Role::Writer;
                clients.insert(id, node);
                relays.insert(r, id);
            }
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
            next_client_id: 1 << 16,
            relays,
            prepared_due: BTreeMap::new(),
            decided_due: BTreeMap::new(),
            collection_passes: BTreeMap::new(),
            placement,
            placement_file_version: 0,
            asked: BTreeMap::new(),
            moving: None,
            copying: None,
            last_moved: None,
            operator_rng,
            removal_rng,
            second_removal: None,
            removing: None,
            fenced: Default::default(),
            pass_reports: Vec::new(),
            passes_held: std::collections::BTreeSet::new(),
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
        world.schedule_first_split();
        world.schedule_first_move();
        world.schedule_removal();
        world
    }

    /// The config of the coordinator beside the server at address `r`.
    pub(super) fn coordinator_config(&mut self, r: ReplicaId) -> CoordinatorConfig {
        let lease = self.config.lock_lease;
        CoordinatorConfig {
            replica: self.coordinators.get(&r).map_or(r, |c| c.slot),
            lock_nodes: self.lock.model.nodes().collect(),
            lock_attempt_timeout: self.config.max_latency() * 4 + Duration::from_millis(40),
            keepalive_interval: lease / 4,
            max_clock_drift_ppm: self.config.max_drift_ppm,
            lease_margin: Duration::from_millis(5),
            retry_delay: lease / 4,
            first_request_id: self.rng.next_u64(),
            valid_max: self
                .config
                .coordinator_bounds
                .map_or(megastore_coordinator::VALID_TRACKED_MAX, |b| b.0),
            invalid_max: self
                .config
                .coordinator_bounds
                .map_or(megastore_coordinator::INVALID_TRACKED_MAX, |b| b.1),
            bugs: self.bugs.coordinator,
        }
    }

    pub(super) fn start_coordinator(&mut self, r: ReplicaId) {
        let core = Coordinator::new(self.coordinator_config(r));
        let core = super::placement::placed_coordinator(core, r, &self.placement);
        if let Some(node) = self.coordinators.get_mut(&r) {
            node.core = Some(core);
        }
        self.run_coordinator(r, CoordinatorInput::Start);
    }
}
