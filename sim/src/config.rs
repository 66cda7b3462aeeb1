//! Everything about one run that the seed decides: topology, latencies, clocks, fault
//! rates, workload shape (a "swarm": each seed tests a different mix).

use std::time::Duration;

use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology};

use crate::rng::Rng;

/// The shape and fault mix of one simulated run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The replicas.
    pub topology: Topology,
    /// Number of sites.
    pub sites: u16,
    /// One-way latency between sites (ms), `latency[a][b]`.
    pub latency_ms: Vec<Vec<u32>>,
    /// Jitter as a fraction of the one-way latency.
    pub jitter: f64,
    /// Sites of the lock service's nodes.
    pub lock_sites: Vec<SiteId>,
    /// Clients and their sites.
    pub client_sites: Vec<SiteId>,
    /// What each client mostly does.
    pub client_roles: Vec<crate::workload::Role>,
    /// Entity groups in the workload.
    pub groups: u16,
    /// Keys per entity group.
    pub keys_per_group: u8,
    /// How long faults are injected.
    pub safety_phase: Duration,
    /// How long the healed system must make progress.
    pub liveness_phase: Duration,
    /// Per-message probabilities.
    pub drop: f64,
    /// Probability of delivering a message twice.
    pub duplicate: f64,
    /// Extra random delay (reordering), up to this many ms.
    pub reorder_ms: u32,
    /// Probability that a message is held up for a long time (0.3 s up to
    /// `long_delay_max`).
    pub long_delay: f64,
    /// The longest such hold-up.
    pub long_delay_max: Duration,
    /// Replicas crash and restart quickly and often (in the middle of Paxos rounds).
    pub restart_storm: bool,
    /// How often a voter crashes right after a prepare's or accept's durable write,
    /// before its reply leaves (then restarts within moments): the durability boundary
    /// where a write that forgot part of the state shows.
    pub crash_after_persist: f64,
    /// A full replica whose inbound link from other sites is slow through the whole
    /// fault phase (extra ms): it keeps lagging behind acknowledged writes.
    pub lagging: Option<(ReplicaId, u32)>,
    /// No faults at all (measurements).
    pub quiet: bool,
    /// Clients only write (blind writes), for measuring commits.
    pub writes_only: bool,
    /// Clients now and then run a verified global index scan (off: exactly the
    /// operations of the workload before there were any, for scripted interleavings
    /// tuned to it).
    pub verified_scans: bool,
    /// Clients send queue messages in some commits, deliver groups' outboxes and
    /// consume their inboxes (off, like `verified_scans`, for scripted interleavings).
    pub queues: bool,
    /// Clients run transactions across groups by two-phase commit (some of them dying
    /// mid-commit) and settle groups' prepared transactions (off, like `queues`, for
    /// scripted interleavings and measurements).
    pub two_phase: bool,
    /// Clients run only transactions across groups, none of them dying (for measuring
    /// their latency).
    pub two_phase_only: bool,
    /// Clients deliver nothing until the liveness phase: outboxes grow past one
    /// delivery's batch during the faults, then drain batch by batch.
    pub deliver_late: bool,
    /// Each client waits up to this long (uniformly) between operations.
    pub think_ms: u32,
    /// Mean time between disruptive faults (partitions, crashes, leader changes).
    pub fault_interval: Duration,
    /// Clock rate error bound (ppm); each node draws its drift within it.
    pub max_drift_ppm: u32,
    /// Lock service session lease.
    pub lock_lease: Duration,
    /// Coordinators' bounds on the groups they remember, `(valid_max, invalid_max)`
    /// (`None`: the servers' defaults, never reached here): small, they forget valid
    /// groups and restart their epochs all the time.
    pub coordinator_bounds: Option<(usize, usize)>,
    /// Replicas' bound on the groups they keep loaded
    /// (`megastore_paxos::ReplicaConfig::cache_groups`; `None`: unbounded): small, they
    /// evict and reload groups all the time.
    pub replica_cache: Option<usize>,
    /// Clients relay the commits of groups they lately lost races for through a relay
    /// beside each full replica (docs/protocol.md, "Relayed commits"), which dies with
    /// its replica.
    pub relays: bool,
    /// With relays: each relay also runs a workload of its own, as a replica's gateway
    /// commits the gRPC API's transactions (`RelayRole::Relay`): its commits of a group
    /// it loses races for follow the position leader's relay, and its crash with its
    /// replica leaves its own operations' outcomes unknown.
    pub gateway_workload: bool,
    /// An operator splits ranges of the placement while faults run, and the processes
    /// read each new placement late (`world/placement.rs`): the seed of its choices.
    pub splits: Option<u64>,
    /// Every replica's site also runs a spare server for its slot, holding no range
    /// (`world/placement.rs`): servers that hold nothing live through every fault, and
    /// the placement and the lock service know more servers than slots.
    pub spares: bool,
    /// An operator removes a replica from ranges once, while faults run
    /// (`world/removals.rs`): the seed of its choices.
    pub removals: Option<u64>,
    /// A move's copy takes a range in one step (`true`) or a few pages per step, the
    /// source serving and crashing between them (`world/moves.rs`).
    pub whole_copies: bool,
}

fn pick<T: Clone>(rng: &mut Rng, options: &[T]) -> T {
    options[rng.below(options.len() as u64) as usize].clone()
}

impl SimConfig {
    /// The configuration a seed draws.
    pub fn from_seed(rng: &mut Rng) -> Self {
        // Topologies from the issue: 2 full + 1 witness, 3 full, 3 full + 2 witnesses,
        // each with or without a read-only replica.
        let shapes: [&[ReplicaKind]; 3] = [
            &[ReplicaKind::Full, ReplicaKind::Full, ReplicaKind::Witness],
            &[ReplicaKind::Full, ReplicaKind::Full, ReplicaKind::Full],
            &[
                ReplicaKind::Full,
                ReplicaKind::Full,
                ReplicaKind::Full,
                ReplicaKind::Witness,
                ReplicaKind::Witness,
            ],
        ];
        let mut kinds = shapes[rng.below(3) as usize].to_vec();
        if rng.chance(0.5) {
            kinds.push(ReplicaKind::ReadOnly);
        }
        let sites = kinds.len() as u16;
        let replicas = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| ReplicaInfo {
                id: ReplicaId(i as u16 + 1),
                kind: *kind,
                site: SiteId(i as u16),
            })
            .collect();
        let topology = Topology::new(replicas).expect("generated topologies are valid");
        // WAN-like: tens of milliseconds between sites, symmetric.
        let n = sites as usize;
        let mut between = std::collections::BTreeMap::new();
        for a in 0..n {
            for b in a + 1..n {
                between.insert((a, b), 10 + rng.below(60) as u32);
            }
        }
        let latency_ms = (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| {
                        if a == b {
                            1
                        } else {
                            between[&(a.min(b), a.max(b))]
                        }
                    })
                    .collect()
            })
            .collect();
        let lock_sites = (0..3.min(sites)).map(SiteId).collect();
        let clients = 2 + rng.below(5) as usize;
        let full_sites: Vec<(ReplicaId, SiteId)> = kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| **k == ReplicaKind::Full)
            .map(|(i, _)| (ReplicaId(i as u16 + 1), SiteId(i as u16)))
            .collect();
        // Spread over the sites, or crowded at one full replica's site, so that local
        // readers race each other and the writers there.
        let crowd = rng
            .chance(0.4)
            .then(|| full_sites[rng.below(full_sites.len() as u64) as usize].1);
        let lagging = rng.chance(0.3).then(|| {
            // The crowded site's replica, if clients crowd, else any full replica.
            let r = match crowd {
                Some(site) => full_sites
                    .iter()
                    .find(|(_, s)| *s == site)
                    .map(|(r, _)| *r)
                    .expect("crowds gather at full replicas"),
                None => full_sites[rng.below(full_sites.len() as u64) as usize].0,
            };
            (r, 80 + rng.below(220) as u32)
        });
        let client_roles = (0..clients)
            .map(|_| match rng.below(4) {
                0 => crate::workload::Role::Reader,
                1 => crate::workload::Role::Writer,
                _ => crate::workload::Role::Mixed,
            })
            .collect();
        let client_sites = (0..clients)
            .map(|_| match crowd {
                Some(site) if !rng.chance(0.25) => site,
                _ => SiteId(rng.below(u64::from(sites)) as u16),
            })
            .collect();
        SimConfig {
            topology,
            sites,
            latency_ms,
            jitter: pick(rng, &[0.0, 0.1, 0.3]),
            lock_sites,
            client_sites,
            client_roles,
            groups: 1 + rng.below(3) as u16,
            keys_per_group: 2 + rng.below(3) as u8,
            safety_phase: Duration::from_secs(20),
            liveness_phase: Duration::from_secs(20),
            drop: pick(rng, &[0.0, 0.0, 0.01, 0.05]),
            duplicate: pick(rng, &[0.0, 0.01, 0.03]),
            reorder_ms: pick(rng, &[0, 0, 5, 30]),
            long_delay: pick(rng, &[0.0, 0.001, 0.005, 0.02]),
            long_delay_max: Duration::from_millis(pick(rng, &[2500, 6000])),
            restart_storm: rng.chance(0.15),
            lagging,
            quiet: false,
            writes_only: false,
            verified_scans: true,
            queues: true,
            two_phase: true,
            two_phase_only: false,
            think_ms: 30,
            fault_interval: Duration::from_millis(pick(rng, &[400, 1000, 2500, 6000])),
            max_drift_ppm: pick(rng, &[0, 200, 1000]),
            lock_lease: Duration::from_millis(pick(rng, &[1000, 2000, 3000])),
            crash_after_persist: pick(rng, &[0.0, 0.0, 0.01, 0.05, 0.25]),
            deliver_late: rng.chance(0.25),
            coordinator_bounds: None,
            replica_cache: None,
            relays: false,
            gateway_workload: false,
            splits: None,
            spares: false,
            removals: None,
            whole_copies: false,
        }
    }

    /// [`SimConfig::splits`] for `seed`: half the seeds, drawn apart from the seed's
    /// other choices, so that the traces of the other seeds stay as they were.
    pub fn splits(seed: u64) -> Option<u64> {
        let mut rng = Rng::new(seed ^ 0x5b11_7a7e_d0c0_ffee);
        rng.chance(0.5).then(|| rng.next_u64())
    }

    /// [`SimConfig::spares`] for `seed`: half the seeds whose operator splits, drawn
    /// apart from the seed's other choices.
    pub fn spares(seed: u64) -> bool {
        Self::splits(seed).is_some() && Rng::new(seed ^ 0x05a2_e5e2_0e25_0000).chance(0.5)
    }

    /// [`SimConfig::removals`] for `seed`: a quarter of the seeds, drawn apart from the
    /// seed's other choices.
    pub fn removals(seed: u64) -> Option<u64> {
        let mut rng = Rng::new(seed ^ 0x2e30_7e5e_ed00_0001);
        rng.chance(0.25).then(|| rng.next_u64())
    }

    /// [`SimConfig::whole_copies`] for `seed`: a third of the seeds, drawn apart from
    /// the seed's other choices. A copy in one step leaves no page for a write to land
    /// between, and moves the steps after it (freeze, fence, finish) earlier against
    /// the writers and the faults: the timing under which the simulator first caught
    /// `record-frozen-unfenced` and `vouch-moved-in-range` (seeds 213 and 241), before
    /// copies were paged.
    pub fn whole_copies(seed: u64) -> bool {
        Rng::new(seed ^ 0x0c09_1e5a_11a7_0ce5).chance(1.0 / 3.0)
    }

    /// [`SimConfig::relays`] for `seed`: half the seeds, drawn apart from the seed's
    /// other choices, so that the traces of the other seeds stay as they were.
    pub fn relays(seed: u64) -> bool {
        Rng::new(seed ^ 0x5e1a_7ed0_c0aa_11e5).chance(0.5)
    }

    /// [`SimConfig::gateway_workload`] for `seed`: half the seeds with relays, drawn
    /// apart from the seed's other choices, so that the traces of the other seeds stay
    /// as they were.
    pub fn gateway_workload(seed: u64) -> bool {
        Self::relays(seed) && Rng::new(seed ^ 0x6a7e_3a75_0000_0a1d).chance(0.5)
    }

    /// [`SimConfig::coordinator_bounds`] for `seed`: small for a third of the seeds
    /// (one invalid group, one or two valid ones). Drawn apart from the seed's other
    /// choices, so that the traces of the other seeds stay as they were.
    pub fn coordinator_bounds(seed: u64) -> Option<(usize, usize)> {
        let mut rng = Rng::new(seed ^ 0x00c0_0d1a_7035_b0d5);
        rng.chance(1.0 / 3.0)
            .then(|| (1 + rng.below(2) as usize, 1))
    }

    /// [`SimConfig::replica_cache`] for `seed`: one or two groups for a third of the
    /// seeds, drawn apart from the seed's other choices (and from the coordinators'
    /// bounds), so that the traces of the other seeds stay as they were.
    pub fn replica_cache(seed: u64) -> Option<usize> {
        let mut rng = Rng::new(seed ^ 0x0ca0_c4e5_91b0_77e1);
        rng.chance(1.0 / 3.0).then(|| 1 + rng.below(2) as usize)
    }

    /// The largest one-way latency between any two sites.
    pub fn max_latency(&self) -> Duration {
        let ms = self.latency_ms.iter().flatten().max().copied().unwrap_or(1);
        Duration::from_millis(u64::from(ms))
    }
}
