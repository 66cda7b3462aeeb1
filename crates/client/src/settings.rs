//! Protocol settings derived from `cluster.toml`.

use megastore_config::ClusterConfig;
use megastore_paxos::Timeouts;

/// The proposer's time limits: one RPC round is `rpc_ms`; the accept-leader step gets
/// a quarter of it before two-phase Paxos; the invalidation step waits for a lease
/// three times over before giving up.
pub fn proposer_timeouts(config: &ClusterConfig) -> Timeouts {
    let t = &config.timeouts;
    let rpc = t.rpc();
    Timeouts {
        rpc,
        leader: rpc / 4,
        invalidate: rpc / 2,
        backoff: rpc / 10,
        lock_attempt: rpc,
        max_rounds: 10,
        invalidate_patience: t.lock_lease() * 3,
    }
}
