//! What each replica server's public API is doing, for `megastore top`: its counters,
//! its replica's lag and its hottest groups, asked of its `Admin.Activity`. A read
//! only; one poll asks every replica at once.

use megastore_config::ClusterConfig;
use megastore_metrics::ClientTotals;
use megastore_paxos::ReplicaLag;
use megastore_rpc::pb::admin as pb;
use megastore_types::{EgId, ReplicaKind};

use crate::hot_groups::{GroupCount, HotGroupsNow};

/// One replica server's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaActivity {
    /// Its public API's counters since it started.
    pub totals: ClientTotals,
    /// How far behind its replica is.
    pub lag: ReplicaLag,
    /// Its public API's hottest groups.
    pub hot: HotGroupsNow,
}

/// One replica of the config and what it answered (`None`: it did not, in time).
#[derive(Debug, Clone)]
pub struct ReplicaPoll {
    /// Its name in the config.
    pub name: String,
    /// Its site.
    pub site: String,
    /// Full, witness or read-only.
    pub kind: ReplicaKind,
    /// Its answer.
    pub activity: Option<ReplicaActivity>,
}

/// Asks every replica of `config` for its activity (with its `top` hottest groups of
/// each kind), all at once, each within the RPC timeout; in config order.
pub async fn poll_activity(config: &ClusterConfig, top: u32) -> Vec<ReplicaPoll> {
    let asks = config.replicas.iter().map(|r| async move {
        ReplicaPoll {
            name: r.name.clone(),
            site: r.site.clone(),
            kind: r.kind,
            activity: replica_activity(config, r.admin_endpoint(), top).await,
        }
    });
    futures::future::join_all(asks).await
}

async fn replica_activity(
    config: &ClusterConfig,
    address: &str,
    top: u32,
) -> Option<ReplicaActivity> {
    let channel = megastore_rpc::Transport::from_config(config)
        .ok()?
        .channel(address, config.timeouts.rpc())
        .ok()?;
    let mut admin = pb::admin_client::AdminClient::new(channel);
    let token = config.operator_token().ok().flatten();
    let call = admin.activity(megastore_rpc::with_operator_token(
        pb::ActivityRequest { top },
        token.as_deref(),
    ));
    let a = tokio::time::timeout(config.timeouts.rpc(), call)
        .await
        .ok()?
        .ok()?
        .into_inner();
    let counts = |counts: Vec<pb::GroupCount>| {
        counts
            .into_iter()
            .map(|c| GroupCount {
                group: EgId(c.group),
                count: c.count,
                error: c.error,
            })
            .collect()
    };
    Some(ReplicaActivity {
        totals: ClientTotals {
            commits: a.commits,
            conflicts: a.conflicts,
            unknown_outcomes: a.unknown_outcomes,
            reads_local: a.reads_local,
            reads_majority: a.reads_majority,
            reads_other: a.reads_other,
            read_failures: a.read_failures,
        },
        lag: ReplicaLag {
            groups: a.groups_behind,
            positions: a.positions_behind,
        },
        hot: HotGroupsNow {
            commits: counts(a.hot_commits),
            conflicts: counts(a.hot_conflicts),
        },
    })
}
