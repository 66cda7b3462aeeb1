//! What a cluster looks like from outside, for `megastore status`: which processes
//! answer, who holds the coordinator locks and the rebalancer's, how lockd's Raft
//! cluster stands, and how far
//! each replica's log of one entity group goes, with that group's queue backlog.
//!
//! Everything here is a read: a replica's `LogState`, a coordinator `Query`, lockd's
//! `Status` and `Holder` — none of them changes what they are asked about.

use megastore_config::ClusterConfig;
use megastore_coordinator::{CoordinatorReply, CoordinatorRequest, coordinator_lock, lock_name};
use megastore_lock::{LockCommand, LockHolder, LockReply};
use megastore_paxos::{LogState, Message, ReplicaError, ReplicaReply, ReplicaRequest};
use megastore_rpc::NodeStatus;
use megastore_types::{EgId, Epoch, LockNodeId, NodeId, ReplicaId, ReplicaKind};

use megastore_rpc::Peers;

/// The group a health probe asks about when no group is named (any group will do: a
/// `LogState` of a group the replica never saw is all zeros).
const PROBE_GROUP: &[u8] = b"megastore-status-probe";

/// How a replica answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// It answered a log-state request.
    Serving,
    /// It answered that it lost its state and is catching up as a non-voter.
    Rejoining,
    /// It answered with an error.
    Failing(String),
    /// It did not answer within the RPC timeout.
    Unreachable,
}

/// One replica.
#[derive(Debug, Clone)]
pub struct ReplicaStatus {
    /// Its id.
    pub id: ReplicaId,
    /// Its name in the config.
    pub name: String,
    /// Its site.
    pub site: String,
    /// Full, witness or read-only.
    pub kind: ReplicaKind,
    /// Where it serves.
    pub address: String,
    /// How it answered.
    pub health: Health,
    /// Its log of the named group (when a group was named and it answered).
    pub log: Option<LogState>,
    /// Its coordinator, for a full replica.
    pub coordinator: Option<CoordinatorStatus>,
    /// For a replica with data that answered: how far behind what it has heard of it
    /// is (`groups`, `positions`) — what a global index scan there may miss.
    pub behind: Option<megastore_paxos::ReplicaLag>,
    /// For a replica with data that answered: the ranges its server holds and what it
    /// applied in each.
    pub ranges: Option<ServerRanges>,
}

/// The ranges a replica server holds, by the placement it judges by, and the log
/// entries it applied in each.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRanges {
    /// The version of the placement it judges by.
    pub placement_version: u64,
    /// In key order.
    pub ranges: Vec<RangeApplied>,
}

/// One range's writes at one replica server: every replica of a range applies every
/// entry chosen there, so this is the range's commits as that replica has seen them.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeApplied {
    /// The range.
    pub range: megastore_placement::RangeId,
    /// Log entries applied since the server started.
    pub applied: u64,
    /// Per second over the last ten seconds.
    pub per_second: f64,
    /// Bytes its groups' rows take in the server's store, every version, as last
    /// measured (`None`: not measured yet).
    pub bytes: Option<u64>,
}

type AdminClient = megastore_rpc::pb::admin::admin_client::AdminClient<tonic::transport::Channel>;

/// What the admin service of the replica at `address` answers the call `ask` makes
/// (given the client and the config's operator token), within the RPC timeout; `None`
/// if it cannot be reached or does not answer.
async fn ask_admin<T, Asked>(
    config: &ClusterConfig,
    address: &str,
    ask: impl FnOnce(AdminClient, Option<String>) -> Asked,
) -> Option<T>
where
    Asked: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let channel = megastore_rpc::Transport::from_config(config)
        .ok()?
        .channel(address, config.timeouts.rpc())
        .ok()?;
    let token = config.operator_token().ok().flatten();
    let call = ask(AdminClient::new(channel), token);
    let answer = tokio::time::timeout(config.timeouts.rpc(), call)
        .await
        .ok()?;
    answer.ok().map(tonic::Response::into_inner)
}

/// How far behind a replica is, asked of its admin service.
async fn replica_lag(config: &ClusterConfig, address: &str) -> Option<megastore_paxos::ReplicaLag> {
    let answer = ask_admin(config, address, |mut admin, token| async move {
        let request = megastore_rpc::pb::admin::LagRequest {};
        admin
            .lag(megastore_rpc::with_operator_token(
                request,
                token.as_deref(),
            ))
            .await
    })
    .await?;
    Some(megastore_paxos::ReplicaLag {
        groups: answer.groups_behind,
        positions: answer.positions_behind,
    })
}

/// The ranges a replica server holds and what it applied in each, asked of its admin
/// service.
async fn replica_ranges(config: &ClusterConfig, address: &str) -> Option<ServerRanges> {
    let answer = ask_admin(config, address, |mut admin, token| async move {
        let request = megastore_rpc::pb::admin::RangesRequest {};
        admin
            .ranges(megastore_rpc::with_operator_token(
                request,
                token.as_deref(),
            ))
            .await
    })
    .await?;
    Some(ServerRanges {
        placement_version: answer.placement_version,
        ranges: answer
            .ranges
            .into_iter()
            .map(|r| RangeApplied {
                range: megastore_placement::RangeId(r.range),
                applied: r.applied,
                per_second: r.applied_per_second,
                bytes: r.bytes,
            })
            .collect(),
    })
}

/// The version of the placement replica server `server` judges by, asked of its admin
/// service (`None`: no such server in the config, or it did not answer).
pub async fn server_placement_version(
    config: &ClusterConfig,
    server: megastore_placement::ServerId,
) -> Option<u64> {
    let process = config
        .server_processes()
        .into_iter()
        .find(|p| p.server == server.0)?;
    replica_ranges(config, process.process.admin_endpoint())
        .await
        .map(|ranges| ranges.placement_version)
}

/// The coordinator of one full replica.
#[derive(Debug, Clone)]
pub struct CoordinatorStatus {
    /// Where it serves.
    pub address: String,
    /// Whether it answered a query.
    pub answering: bool,
    /// The epoch it serves in (it holds its lock), as it says.
    pub epoch: Option<Epoch>,
    /// Whether it vouches for the named group.
    pub vouched: Option<bool>,
    /// It says it is disabled (or stopping): it vouches for nothing until its process
    /// restarts.
    pub disabled: bool,
    /// Who holds its lock, as lockd says (`None`: nobody, or lockd did not answer).
    pub holder: Option<LockHolder>,
}

/// One replica server beyond its replica's first (a `[[servers]]` entry): ranges come
/// to it only by moves.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    /// Its name in the config.
    pub name: String,
    /// Its server id in the placement.
    pub server: u16,
    /// The replica whose slot it serves, by name.
    pub replica: String,
    /// Its site.
    pub site: String,
    /// Where it serves.
    pub address: String,
    /// The ranges it holds by the placement it judges by (`None`: its administration
    /// service did not answer).
    pub ranges: Option<ServerRanges>,
    /// Who holds its coordinator's lock, for a full replica's server (`Some(None)`:
    /// nobody, or lockd did not answer).
    pub coordinator_holder: Option<Option<LockHolder>>,
}

/// One lockd node.
#[derive(Debug, Clone)]
pub struct LockdStatus {
    /// Its name in the config.
    pub name: String,
    /// Its site.
    pub site: String,
    /// Where it serves.
    pub address: String,
    /// Its config id (its Raft node id).
    pub id: u16,
    /// How it sees Raft (`None`: it did not answer).
    pub raft: Option<NodeStatus>,
}

/// The whole cluster.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    /// The cluster's name.
    pub cluster: String,
    /// Every replica, in config order.
    pub replicas: Vec<ReplicaStatus>,
    /// Every replica server beyond the replicas' first ones, in config order.
    pub servers: Vec<ServerStatus>,
    /// Every lockd node, in config order.
    pub lockd: Vec<LockdStatus>,
    /// The group whose log positions were asked for.
    pub group: Option<EgId>,
    /// That group's queue backlog.
    pub queues: Option<QueueStatus>,
    /// The applied schema, when lockd answered and one is applied.
    pub schema: Option<SchemaStatus>,
    /// Where groups live, when lockd answered.
    pub placement: Option<crate::placement_store::StoredPlacement>,
    /// Who leads the background rebalancers (holds [`crate::operator_lock::REBALANCER_LOCK`]):
    /// `None` when lockd was not asked (no leader), `Some(None)` when none runs.
    pub rebalancer: Option<Option<LockHolder>>,
    /// Whether the replicas' administration service needs the operator token
    /// (`[auth]` in the config).
    pub admin_auth: bool,
    /// Whether the public API serves only users (`[auth] require_users`).
    pub users_required: bool,
}

/// The cluster's catalog: its version, and how each index stands.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaStatus {
    /// The schema's name.
    pub name: String,
    /// The catalog's version in lockd.
    pub version: u64,
    /// Every index, in declaration order.
    pub indexes: Vec<IndexStatus>,
}

/// One index of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexStatus {
    /// Its name.
    pub name: String,
    /// Local, inline or global.
    pub kind: megastore_schema::IndexKind,
    /// Its table.
    pub table: String,
    /// Ready, or building.
    pub state: megastore_schema::IndexState,
    /// A building index's recorded backfill progress.
    pub backfill: Option<crate::backfill::BackfillProgress>,
}

/// The applied schema and its indexes' states (`None`: none applied, or lockd did not
/// answer).
async fn schema_status(peers: &Peers) -> Option<SchemaStatus> {
    let (catalog, version) = crate::schema_store::load_catalog(peers.lockd())
        .await
        .ok()??;
    let mut indexes = Vec::new();
    for index in &catalog.indexes {
        let backfill = if index.state.is_ready() {
            None
        } else {
            crate::backfill::load_progress(peers.lockd(), index.id)
                .await
                .ok()
                .map(|(progress, _)| progress)
        };
        indexes.push(IndexStatus {
            name: index.name.clone(),
            kind: index.kind,
            table: catalog
                .table_by_id(index.table)
                .map_or_else(|| "?".into(), |t| t.name.clone()),
            state: index.state,
            backfill,
        });
    }
    Some(SchemaStatus {
        name: catalog.name.clone(),
        version,
        indexes,
    })
}

impl ClusterStatus {
    /// Each range's writes as the replica server that applied most of them saw them:
    /// every replica of a range applies every entry chosen there, so the most
    /// caught-up one counts them all (one restarted since counts from its start); and
    /// its size, the largest any server measured (a witness keeps only the log).
    pub fn range_writes(
        &self,
    ) -> std::collections::BTreeMap<megastore_placement::RangeId, RangeApplied> {
        let mut writes = std::collections::BTreeMap::new();
        let replicas = self.replicas.iter().filter_map(|r| r.ranges.as_ref());
        let servers = self.servers.iter().filter_map(|s| s.ranges.as_ref());
        for range in replicas.chain(servers).flat_map(|s| &s.ranges) {
            writes
                .entry(range.range)
                .and_modify(|seen: &mut RangeApplied| {
                    let bytes = seen.bytes.max(range.bytes);
                    if range.applied > seen.applied {
                        *seen = range.clone();
                    }
                    seen.bytes = bytes;
                })
                .or_insert_with(|| range.clone());
        }
        writes
    }

    /// The lockd leader: the node that a majority of all lockd nodes name as leader
    /// (a minority cut off with a stale leader in mind does not count).
    pub fn lockd_leader(&self) -> Option<u64> {
        let leaders: Vec<u64> = self
            .lockd
            .iter()
            .filter_map(|l| l.raft.as_ref()?.leader)
            .collect();
        leaders.iter().copied().find(|candidate| {
            leaders.iter().filter(|l| *l == candidate).count() * 2 > self.lockd.len()
        })
    }
}

async fn replica_log(peers: &Peers, replica: ReplicaId, eg: &EgId) -> (Health, Option<LogState>) {
    let request = ReplicaRequest::LogState {
        id: 0,
        eg: eg.clone(),
    };
    match peers
        .request(NodeId::Replica(replica), Message::ReplicaRequest(request))
        .await
    {
        Some(Message::ReplicaReply(ReplicaReply::LogState { state, .. })) => {
            (Health::Serving, Some(state))
        }
        Some(Message::ReplicaReply(ReplicaReply::Error {
            error: ReplicaError::Rejoining,
            ..
        })) => (Health::Rejoining, None),
        // It answers by its placement, which puts the group's range on another server
        // (moved away) or freezes it there: the server serves, that group elsewhere.
        Some(Message::ReplicaReply(ReplicaReply::Error {
            error: ReplicaError::WrongServer { .. } | ReplicaError::Frozen { .. },
            ..
        })) => (Health::Serving, None),
        Some(Message::ReplicaReply(ReplicaReply::Error { error, .. })) => {
            (Health::Failing(error.to_string()), None)
        }
        Some(other) => (
            Health::Failing(format!("unexpected answer {other:?}")),
            None,
        ),
        None => (Health::Unreachable, None),
    }
}

/// A group's queue backlog as a replica with data has applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    /// The replica it was read at.
    pub replica: String,
    /// The position it reflects.
    pub at: Option<megastore_types::Position>,
    /// The backlog.
    pub backlog: megastore_paxos::queue::Backlog,
}

/// `eg`'s queue backlog at the first replica with data that answers (its applied
/// state: a snapshot read of the group's queue rows).
async fn queue_status(config: &ClusterConfig, peers: &Peers, eg: &EgId) -> Option<QueueStatus> {
    for r in config
        .replicas
        .iter()
        .filter(|r| r.kind != ReplicaKind::Witness)
    {
        let request = ReplicaRequest::Read {
            id: 0,
            eg: eg.clone(),
            at: megastore_paxos::ReadAt::Applied,
            query: megastore_paxos::DataQuery::Scan {
                range: megastore_paxos::queue::queue_range(eg),
                limit: None,
                reverse: false,
            },
        };
        let answer = peers
            .request(
                NodeId::Replica(ReplicaId(r.id)),
                Message::ReplicaRequest(request),
            )
            .await;
        if let Some(Message::ReplicaReply(ReplicaReply::Data { at, rows, .. })) = answer {
            return Some(QueueStatus {
                replica: r.name.clone(),
                at,
                backlog: megastore_paxos::queue::backlog(eg, &rows),
            });
        }
    }
    None
}

async fn coordinator_query(
    peers: &Peers,
    replica: ReplicaId,
    eg: &EgId,
) -> Option<(bool, Option<Epoch>, bool)> {
    let request = CoordinatorRequest::Query {
        id: 0,
        eg: eg.clone(),
    };
    match peers
        .request(
            NodeId::Coordinator(replica),
            Message::CoordinatorRequest(request),
        )
        .await?
    {
        Message::CoordinatorReply(CoordinatorReply::Query {
            vouched,
            epoch,
            retired,
            ..
        }) => Some((vouched, epoch, retired)),
        _ => None,
    }
}

/// Asks every process of `config` how it stands; `group` names an entity group whose
/// log positions (and coordinator vouching) to report.
pub async fn cluster_status(
    config: &ClusterConfig,
    peers: &Peers,
    group: Option<&EgId>,
) -> ClusterStatus {
    let mut lockd = Vec::new();
    for node in &config.lockd {
        lockd.push(LockdStatus {
            name: node.name.clone(),
            site: node.site.clone(),
            address: node.address.clone(),
            id: node.id,
            raft: peers.lockd().node_status(LockNodeId(node.id)).await,
        });
    }
    let probe = crate::group(PROBE_GROUP).expect("the probe group's name is within the limit");
    let eg = group.unwrap_or(&probe);
    let mut status = ClusterStatus {
        cluster: config.cluster.name.clone(),
        replicas: Vec::new(),
        servers: Vec::new(),
        lockd,
        group: group.cloned(),
        queues: None,
        schema: None,
        placement: None,
        rebalancer: None,
        admin_auth: config.auth.is_some(),
        users_required: config.auth.as_ref().is_some_and(|a| a.require_users),
    };
    // Without a lockd leader a holder query would wait out an election's patience.
    let lockd_serving = status.lockd_leader().is_some();
    if lockd_serving {
        status.schema = schema_status(peers).await;
        if let Ok(topology) = config.topology() {
            status.placement = crate::placement_store::load_placement(peers.lockd(), &topology)
                .await
                .ok();
        }
        let rebalancer = LockCommand::Holder {
            lock: crate::operator_lock::operator_lock_name(crate::operator_lock::REBALANCER_LOCK),
        };
        status.rebalancer = match peers.lockd().execute(rebalancer).await {
            Ok(LockReply::Holder(holder)) => Some(holder),
            _ => None,
        };
    }
    for r in &config.replicas {
        let id = ReplicaId(r.id);
        let (health, log) = replica_log(peers, id, eg).await;
        let coordinator = match &r.coordinator_address {
            Some(address) if r.kind == ReplicaKind::Full => {
                let answer = coordinator_query(peers, id, eg).await;
                let holder = if lockd_serving {
                    match peers
                        .lockd()
                        .execute(LockCommand::Holder {
                            lock: lock_name(id),
                        })
                        .await
                    {
                        Ok(LockReply::Holder(holder)) => holder,
                        _ => None,
                    }
                } else {
                    None
                };
                Some(CoordinatorStatus {
                    address: address.clone(),
                    answering: answer.is_some(),
                    epoch: answer.and_then(|(_, epoch, _)| epoch),
                    vouched: group.and(answer.map(|(vouched, _, _)| vouched)),
                    disabled: answer.is_some_and(|(_, _, retired)| retired),
                    holder,
                })
            }
            _ => None,
        };
        let (behind, ranges) = if r.kind != ReplicaKind::Witness && health == Health::Serving {
            (
                replica_lag(config, r.admin_endpoint()).await,
                replica_ranges(config, r.admin_endpoint()).await,
            )
        } else {
            (None, None)
        };
        status.replicas.push(ReplicaStatus {
            id,
            name: r.name.clone(),
            site: r.site.clone(),
            kind: r.kind,
            address: r.address.clone(),
            health,
            log: group.and(log),
            coordinator,
            behind,
            ranges,
        });
    }
    for server in config.server_processes().into_iter().filter(|p| !p.first) {
        let p = &server.process;
        let coordinator_holder = match p.kind {
            ReplicaKind::Full if lockd_serving => Some(
                match peers
                    .lockd()
                    .execute(LockCommand::Holder {
                        lock: coordinator_lock(megastore_placement::ServerId(server.server)),
                    })
                    .await
                {
                    Ok(LockReply::Holder(holder)) => holder,
                    _ => None,
                },
            ),
            ReplicaKind::Full => Some(None),
            _ => None,
        };
        status.servers.push(ServerStatus {
            name: p.name.clone(),
            server: server.server,
            replica: config
                .replica_by_id(ReplicaId(p.id))
                .map_or_else(|| p.id.to_string(), |r| r.name.clone()),
            site: p.site.clone(),
            address: p.address.clone(),
            ranges: replica_ranges(config, p.admin_endpoint()).await,
            coordinator_holder,
        });
    }
    if let Some(eg) = group {
        status.queues = queue_status(config, peers, eg).await;
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u16, leader: Option<Option<u64>>) -> LockdStatus {
        LockdStatus {
            name: format!("lock-{id}"),
            site: "A".into(),
            address: String::new(),
            id,
            raft: leader.map(|leader| NodeStatus {
                state: "follower".into(),
                term: 1,
                leader,
                voters: vec![1, 2, 3],
                learners: Vec::new(),
                last_log_index: None,
                applied_index: None,
            }),
        }
    }

    fn status(lockd: Vec<LockdStatus>) -> ClusterStatus {
        ClusterStatus {
            cluster: "t".into(),
            replicas: Vec::new(),
            servers: Vec::new(),
            lockd,
            group: None,
            queues: None,
            schema: None,
            placement: None,
            rebalancer: None,
            admin_auth: false,
            users_required: false,
        }
    }

    #[test]
    fn the_leader_is_the_one_a_majority_of_all_nodes_name() {
        let agreed = status(vec![
            node(1, Some(Some(1))),
            node(2, Some(Some(1))),
            node(3, None),
        ]);
        assert_eq!(agreed.lockd_leader(), Some(1));
        // One node that answers and still believes in a leader is not a majority.
        let alone = status(vec![node(1, Some(Some(1))), node(2, None), node(3, None)]);
        assert_eq!(alone.lockd_leader(), None);
        let split = status(vec![
            node(1, Some(Some(1))),
            node(2, Some(Some(2))),
            node(3, Some(None)),
        ]);
        assert_eq!(split.lockd_leader(), None);
    }
}
