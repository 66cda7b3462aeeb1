//! Measurements of the protocol on quiet, hand-built topologies (no faults): commit
//! latency against the round trip to the farthest full replica, the fast-path ratio,
//! the share of current reads served locally, and conflicts against the per-group
//! write rate. `megastore-sim --measure` prints them; docs/protocol.md quotes them.

use std::time::Duration;

use hdrhistogram::Histogram;
use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology};

use crate::config::SimConfig;
use crate::history::{OpKind, Outcome};
use crate::nodes::Bugs;
use crate::rng::Rng;
use crate::trace::Trace;
use crate::world::World;

/// What one measured run showed.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Commit latencies (from the commit call to the acknowledgement), microseconds.
    pub commit_latency_us: Histogram<u64>,
    /// Acknowledged writes.
    pub committed: u64,
    /// Writes that conflicted (or aborted).
    pub conflicts: u64,
    /// Chosen transaction entries, and how many were chosen at ballot 0.
    pub chosen: (usize, usize),
    /// Current reads served locally / by majority read.
    pub reads: (u64, u64),
    /// Simulated seconds measured.
    pub seconds: f64,
    /// Entity groups written.
    pub groups: u16,
    /// Broken invariants (none expected).
    pub violations: usize,
    /// Commit latencies of acknowledged transactions across groups (from the commit
    /// call, after their reads, to the acknowledgement), microseconds.
    pub two_phase_latency_us: Histogram<u64>,
}

impl Measured {
    /// Acknowledged writes per second per group.
    pub fn write_rate_per_group(&self) -> f64 {
        self.committed as f64 / self.seconds / f64::from(self.groups)
    }

    /// Share of writes that conflicted.
    pub fn conflict_rate(&self) -> f64 {
        let attempts = self.committed + self.conflicts;
        if attempts == 0 {
            0.0
        } else {
            self.conflicts as f64 / attempts as f64
        }
    }

    /// Share of chosen writes that took the fast path.
    pub fn fast_path_ratio(&self) -> f64 {
        if self.chosen.0 == 0 {
            0.0
        } else {
            self.chosen.1 as f64 / self.chosen.0 as f64
        }
    }

    /// Share of current reads served locally.
    pub fn local_read_share(&self) -> f64 {
        let total = self.reads.0 + self.reads.1;
        if total == 0 {
            0.0
        } else {
            self.reads.0 as f64 / total as f64
        }
    }
}

/// Two full replicas (sites 0 and 1) and a witness (site 2), every pair of sites
/// `rtt_ms` apart (round trip); clients at the given sites.
pub fn three_sites(rtt_ms: u32, clients: &[u16]) -> SimConfig {
    three_sites_with_witness_at(rtt_ms, rtt_ms, clients)
}

/// Like [`three_sites`], but the witness is `witness_rtt_ms` from site 0.
pub fn three_sites_with_witness_at(rtt_ms: u32, witness_rtt_ms: u32, clients: &[u16]) -> SimConfig {
    let replica = |id, kind, site| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(site),
    };
    let topology = Topology::new(vec![
        replica(1, ReplicaKind::Full, 0),
        replica(2, ReplicaKind::Full, 1),
        replica(3, ReplicaKind::Witness, 2),
    ])
    .expect("a valid topology");
    let one_way = |a: usize, b: usize| match (a.min(b), a.max(b)) {
        _ if a == b => 1,
        (0, 2) => witness_rtt_ms / 2,
        _ => rtt_ms / 2,
    };
    let latency_ms = (0..3)
        .map(|a| (0..3).map(|b| one_way(a, b)).collect())
        .collect();
    SimConfig {
        topology,
        sites: 3,
        latency_ms,
        jitter: 0.0,
        lock_sites: vec![SiteId(0), SiteId(1), SiteId(2)],
        client_sites: clients.iter().map(|s| SiteId(*s)).collect(),
        client_roles: clients
            .iter()
            .map(|_| crate::workload::Role::Mixed)
            .collect(),
        groups: 1,
        keys_per_group: 3,
        safety_phase: Duration::from_secs(30),
        liveness_phase: Duration::from_secs(1),
        drop: 0.0,
        duplicate: 0.0,
        reorder_ms: 0,
        long_delay: 0.0,
        long_delay_max: Duration::ZERO,
        fault_interval: Duration::from_secs(3600),
        max_drift_ppm: 0,
        lock_lease: Duration::from_secs(5),
        coordinator_bounds: None,
        replica_cache: None,
        relays: false,
        gateway_workload: false,
        restart_storm: false,
        crash_after_persist: 0.0,
        lagging: None,
        quiet: true,
        writes_only: false,
        verified_scans: false,
        queues: false,
        two_phase: false,
        two_phase_only: false,
        deliver_late: false,
        think_ms: 30,
        splits: None,
        spares: false,
        removals: None,
        whole_copies: false,
    }
}

/// Runs a quiet configuration and measures it.
pub fn run(config: SimConfig, seed: u64) -> Measured {
    run_with_bugs(config, seed, Bugs::default())
}

/// Like [`run`], with mistakes re-introduced (to show what a measurement would catch).
pub fn run_with_bugs(config: SimConfig, seed: u64, bugs: Bugs) -> Measured {
    let seconds = config.safety_phase.as_secs_f64();
    let groups = config.groups;
    let mut world = World::from_config(config, Rng::new(seed), bugs, Trace::new(false));
    let end = world.end_time();
    world.run_until(end);
    let (mut checks, world) = world.into_checkers();
    checks.finish(&world.observation());
    let mut commit_latency_us = Histogram::new(3).expect("3 significant figures is valid");
    let mut two_phase_latency_us = Histogram::new(3).expect("3 significant figures is valid");
    let (mut committed, mut conflicts) = (0, 0);
    for op in world.history.iter().filter(|op| op.end <= world.safety_end) {
        match (&op.kind, &op.outcome) {
            (
                OpKind::TwoPhase,
                Outcome::TwoPhase {
                    result: crate::history::TwoPhaseOutcome::Committed,
                    ..
                },
            ) => {
                let _ = two_phase_latency_us.record((op.end - op.start) / 1000);
            }
            (OpKind::Commit, Outcome::Committed { .. }) => {
                committed += 1;
                let _ = commit_latency_us.record((op.end - op.start) / 1000);
            }
            (OpKind::Commit, Outcome::NotCommitted { .. }) => conflicts += 1,
            _ => {}
        }
    }
    Measured {
        commit_latency_us,
        committed,
        conflicts,
        chosen: checks.chosen.fast_path_counts(),
        reads: (world.stats.reads_local, world.stats.reads_majority),
        seconds,
        groups,
        violations: checks.violations.len(),
        two_phase_latency_us,
    }
}

fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

/// The measurements docs/protocol.md reports, as a markdown report.
pub fn report(rtt_ms: u32) -> String {
    let mut out = format!(
        "Simulated: 2 full replicas + 1 witness at 3 sites, {rtt_ms} ms round trip between any two sites, 30 s per scenario.\n\n"
    );
    out.push_str("| scenario | commits | p50 ms | p90 ms | p99 ms | max ms | fast path | conflicts |\n|---|---|---|---|---|---|---|---|\n");
    let scenarios: [(&str, &[u16]); 2] = [
        ("one writer, at the leader's site", &[0]),
        ("writers at both full sites, one group", &[0, 1]),
    ];
    for (name, sites) in scenarios {
        let mut config = three_sites(rtt_ms, sites);
        config.writes_only = true;
        let m = run(config, 1);
        let h = &m.commit_latency_us;
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {:.0} % | {:.1} % |\n",
            m.committed,
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.9)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max()),
            100.0 * m.fast_path_ratio(),
            100.0 * m.conflict_rate()
        ));
    }
    let mixed = run(three_sites(rtt_ms, &[0, 0, 1, 1]), 2);
    out.push_str(&format!(
        "\nMixed workload (4 clients at the two full sites, reads and writes): {:.1} % of {} current reads served locally.\n",
        100.0 * mixed.local_read_share(),
        mixed.reads.0 + mixed.reads.1
    ));
    let mut config = three_sites(rtt_ms, &[0]);
    config.groups = 2;
    config.two_phase_only = true;
    let m = run(config, 4);
    let h = &m.two_phase_latency_us;
    out.push_str(&format!(
        "\nTransactions across two or three groups, one client at a full replica's site: {} committed; commit p50 {} ms, p90 {} ms, p99 {} ms, max {} ms.\n",
        h.len(),
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.9)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max())
    ));
    out.push_str("\nConflicts against the write rate of one group (4 writers, 2 at each full site):\n\n| think time | writes/s per group | conflicts | fast path |\n|---|---|---|---|\n");
    for think_ms in [2000, 500, 150, 40] {
        let mut config = three_sites(rtt_ms, &[0, 0, 1, 1]);
        config.writes_only = true;
        config.think_ms = think_ms;
        let m = run(config, 3);
        out.push_str(&format!(
            "| up to {think_ms} ms | {:.1} | {:.1} % | {:.0} % |\n",
            m.write_rate_per_group(),
            100.0 * m.conflict_rate(),
            100.0 * m.fast_path_ratio()
        ));
    }
    out
}
