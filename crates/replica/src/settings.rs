//! Protocol settings derived from `cluster.toml`'s timeouts.

use std::time::Duration;

use megastore_client::proposer_timeouts;
use megastore_config::ClusterConfig;
use megastore_paxos::{ProposerConfig, SweepConfig};
use megastore_types::{ProposerId, ReplicaId};

/// The sweep of replica `id`: how it finishes abandoned positions, catches up,
/// truncates and rejoins. Seeded afresh on every start.
pub fn sweep_config(
    config: &ClusterConfig,
    id: ReplicaId,
    topology: megastore_types::Topology,
) -> SweepConfig {
    SweepConfig {
        interval: Duration::from_millis(config.timeouts.sweep_ms),
        proposer: ProposerConfig {
            topology,
            proposer: ProposerId::replica(id),
            lock_nodes: config.lockd_ids(),
            timeouts: proposer_timeouts(config),
            bugs: megastore_paxos::ProtocolBugs::NONE,
        },
        seed: rand::random(),
        history_kept: config.history.kept_positions,
        log_kept: config.history.log_positions,
        probe_above: config.history.log_positions + megastore_paxos::TRUNCATE_EVERY,
        outage_log_max: config.history.outage_log_bound(),
    }
}
