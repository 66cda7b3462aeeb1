//! Protocol settings derived from `cluster.toml`.

use megastore_config::ClusterConfig;
use megastore_paxos::Timeouts;

/// The proposer's time limits for this cluster: one RPC round is `rpc_ms`, and the
/// rest derive from it and the lock lease ([`Timeouts::from_rpc_and_lease`]), but the
/// prepared timeout of cross-group transactions, which `prepared_ms` may set.
pub fn proposer_timeouts(config: &ClusterConfig) -> Timeouts {
    let t = &config.timeouts;
    Timeouts {
        prepared: t.prepared(),
        ..Timeouts::from_rpc_and_lease(t.rpc(), t.lock_lease())
    }
}
