//! One lockd node: its Raft instance on its RocksDB directory, serving the lock
//! service and Raft over gRPC on one address.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use megastore_config::{ClusterConfig, resolve_address};
use megastore_lock::{LockCommand, LockError, LockRequest, LockResponse};
use megastore_rowstore_rocksdb::RocksStore;
use megastore_rpc::Transport;
use megastore_rpc::pb::lock as pb;
use megastore_rpc::pb::lock::lock_server::{Lock, LockServer};
use megastore_rpc::pb::lock::raft_server::RaftServer;
use megastore_types::Time;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, Raft, ServerState};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

use megastore_metrics::{LockdMetrics, MetricsServer, Registry};

use crate::LockdError;
use crate::network::{Network, RaftService};
use crate::state_machine::{AppliedState, StateMachine};
use crate::storage::{Cells, LogStore, OpenStore};
use crate::types::{LeaseClock, LockEntry, RaftNodeId, TypeConfig};

const STAMP: &[u8] = b"lockd/stamp";

/// What a data directory belongs to; a node refuses a directory stamped for another.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    cluster: String,
    node: u16,
}

/// A running lockd node.
pub struct LockdNode {
    raft: Raft<TypeConfig>,
    id: RaftNodeId,
    stop_serving: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
    metrics_server: Option<MetricsServer>,
    /// Fires once the store has closed.
    store_closed: Option<oneshot::Receiver<()>>,
}

impl LockdNode {
    /// Starts the node called `name` in `config`: opens (or creates) its data
    /// directory and binds its address; the node with the lowest id, on a fresh
    /// directory, proposes the initial membership (every lockd node of the config).
    pub async fn start(config: &ClusterConfig, name: &str) -> Result<Self, LockdError> {
        let me = config
            .lockd_node(name)
            .ok_or_else(|| LockdError::UnknownNode {
                name: name.to_string(),
                known: ClusterConfig::names(config.lockd.iter().map(|l| l.name.as_str())),
            })?;
        let store =
            RocksStore::open(&me.data_dir).map_err(|e| LockdError::Storage(e.to_string()))?;
        let (store, store_closed) = OpenStore::new(store);
        let cells = Cells::new(store);
        let stamp = Stamp {
            cluster: config.cluster.name.clone(),
            node: me.id,
        };
        match cells.get::<Stamp>(STAMP).map_err(LockdError::Storage)? {
            None => cells.put(STAMP, &stamp).map_err(LockdError::Storage)?,
            Some(found) if found == stamp => {}
            Some(found) => {
                return Err(LockdError::WrongDataDir {
                    dir: me.data_dir.display().to_string(),
                    found: format!("cluster {:?}, lockd id {}", found.cluster, found.node),
                    expected: format!("cluster {:?}, lockd id {}", stamp.cluster, stamp.node),
                });
            }
        }

        let transport =
            Transport::from_config(config).map_err(|e| LockdError::Config(e.to_string()))?;
        let timeouts = &config.timeouts;
        let raft_config = openraft::Config {
            cluster_name: config.cluster.name.clone(),
            election_timeout_min: timeouts.election_timeout_ms,
            election_timeout_max: timeouts.election_timeout_ms * 2,
            heartbeat_interval: timeouts.heartbeat_ms,
            install_snapshot_timeout: timeouts.rpc_ms.max(timeouts.heartbeat_ms * 2),
            ..Default::default()
        }
        .validate()
        .map_err(|e| LockdError::Config(e.to_string()))?;
        let log = LogStore::new(cells.clone());
        let state_machine =
            StateMachine::open(cells, timeouts.lock_lease()).map_err(LockdError::Storage)?;
        let id = RaftNodeId::from(me.id);
        let raft = Raft::new(
            id,
            Arc::new(raft_config),
            Network::new(timeouts.rpc(), transport.clone()),
            log,
            state_machine.clone(),
        )
        .await
        .map_err(|e| LockdError::Raft(e.to_string()))?;

        let address = resolve_address(&me.address).map_err(LockdError::Config)?;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|e| LockdError::Bind(me.address.clone(), e.to_string()))?;
        let metrics = LockdMetrics::default();
        let metrics_server = match &me.metrics_address {
            Some(address) => {
                let mut registry = Registry::default();
                metrics.register(&mut registry);
                let (raft, metrics) = (raft.clone(), metrics.clone());
                let refresh = move || {
                    let m = raft.metrics().borrow().clone();
                    metrics.raft(
                        m.state == ServerState::Leader,
                        m.current_term,
                        m.last_log_index.unwrap_or(0),
                        m.last_applied.map_or(0, |l| l.index),
                    );
                };
                Some(
                    MetricsServer::start(
                        address,
                        registry,
                        Some(Arc::new(refresh)),
                        config.tls.as_ref(),
                    )
                    .await
                    .map_err(|e| LockdError::Config(e.to_string()))?,
                )
            }
            None => None,
        };
        let (stop_serving, stopped) = oneshot::channel::<()>();
        let operator = megastore_rpc::OperatorAuth::from_config(config, &format!("lockd {name}"))
            .map_err(LockdError::Config)?;
        let lock_service = LockService {
            operator,
            metrics,
            raft: raft.clone(),
            lease_clock: state_machine.lease_clock(),
            applied: state_machine.applied(),
            incarnation: rand::random(),
            id,
            clock: Instant::now(),
        };
        let server = transport
            .server()
            .map_err(|e| LockdError::Config(e.to_string()))?
            .add_service(InterceptedService::new(
                LockServer::new(lock_service),
                megastore_rpc::members_only,
            ))
            .add_service(InterceptedService::new(
                RaftServer::new(RaftService { raft: raft.clone() }),
                megastore_rpc::members_only,
            ))
            .serve_with_incoming_shutdown(Transport::incoming(listener), async {
                let _ = stopped.await;
            });
        let served = tokio::spawn(server);

        // Only the node with the lowest id proposes the initial membership: a proposal
        // makes its node a candidate at once, so proposals from several nodes would
        // depose the first leader right after it is elected. The others wait to hear
        // from it (a cluster forms once that node is up).
        let founder = config.lockd.iter().map(|l| l.id).min() == Some(me.id);
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| LockdError::Raft(e.to_string()))?;
        if founder && !initialized {
            let members: BTreeMap<RaftNodeId, BasicNode> = config
                .lockd
                .iter()
                .map(|l| (RaftNodeId::from(l.id), BasicNode::new(&l.address)))
                .collect();
            // NotAllowed means it already has a log: the goal is met.
            if let Err(e) = raft.initialize(members).await {
                tracing::debug!("initialize: {e}");
            }
        }
        Ok(Self {
            raft,
            id,
            stop_serving: Some(stop_serving),
            served: Some(served),
            metrics_server,
            store_closed: Some(store_closed),
        })
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The Raft handle (metrics, leadership).
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// Whether this node leads now.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Stops serving and stops Raft.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop_serving.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            let _ = served.await;
        }
        if let Some(metrics) = self.metrics_server.take() {
            metrics.shutdown().await;
        }
        let _ = self.raft.shutdown().await;
        drop(self.raft);
        // Connections still open finish on their own; the directory is free (and may be
        // opened again, as a restart in the same process does) once they have.
        if let Some(closed) = self.store_closed.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), closed).await;
        }
    }
}

/// The lock service of one node: commands go through the Raft log; only the leader
/// takes them.
struct LockService {
    /// Who may ask administrative commands (`[auth]`).
    operator: megastore_rpc::OperatorAuth,
    metrics: LockdMetrics,
    raft: Raft<TypeConfig>,
    lease_clock: Arc<std::sync::Mutex<LeaseClock>>,
    /// The applied state, which answers commands that only read.
    applied: AppliedState,
    /// Drawn at start: tells this process's clock from the one it had before a
    /// restart.
    incarnation: u64,
    id: RaftNodeId,
    clock: Instant,
}

impl LockService {
    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.clock.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    async fn write(&self, entry: LockEntry) -> Result<megastore_lock::LockReply, LockError> {
        match self.raft.client_write(entry).await {
            Ok(response) => response.data,
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(LockError::NotLeader)
            }
            Err(e) => {
                tracing::warn!("lock command not applied: {e}");
                Err(LockError::Unavailable)
            }
        }
    }

    /// Confirms, for a command that only reads (a file: every server's and
    /// coordinator's placement poll), that its answer from the applied state will be
    /// linearizable without a log entry: a read-index round (openraft's
    /// `ensure_linearizable`) confirms this node still leads, and waits until it
    /// applied every entry committed before the round began, so its applied state
    /// holds every write acknowledged before the read. That costs heartbeats to a
    /// majority instead of a synced entry on one. Leases play no part in a file, so it
    /// need not wait for this leader's `RestartLeases`.
    async fn confirm_leading(&self) -> Result<(), LockError> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_))) => {
                Err(LockError::NotLeader)
            }
            Err(e) => {
                tracing::warn!("lock read not confirmed: {e}");
                Err(LockError::Unavailable)
            }
        }
    }

    async fn execute(
        &self,
        request: u64,
        command: LockCommand,
    ) -> Result<megastore_lock::LockReply, LockError> {
        let (leader, term) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            (m.current_leader, m.current_term)
        };
        if leader != Some(self.id) {
            return Err(LockError::NotLeader);
        }
        if command.only_reads() {
            self.confirm_leading().await?;
            if let Some(answer) = self.applied.read(&command) {
                return answer;
            }
        }
        let mine = LeaseClock {
            term,
            incarnation: self.incarnation,
        };
        let current = *self.lease_clock.lock().unwrap_or_else(|p| p.into_inner());
        if current != mine {
            self.write(LockEntry::RestartLeases {
                at: self.now(),
                clock: mine,
            })
            .await?;
        }
        self.write(LockEntry::Command {
            at: self.now(),
            command,
            request: Some(request),
        })
        .await
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn call(
        &self,
        request: Request<pb::LockRequest>,
    ) -> Result<Response<pb::LockResponse>, Status> {
        // Administration needs the operator token, and is audited; the refusal is an
        // answer (not a transport error), so the caller is told at once rather than
        // retrying.
        let (metadata, extensions, message) = request.into_parts();
        let command =
            LockRequest::try_from(message).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let authorized = if command.command.is_administrative() {
            let what = match &command.command {
                megastore_lock::LockCommand::RevokeHolder { lock } => {
                    format!("lockd RevokeHolder {lock}")
                }
                megastore_lock::LockCommand::WriteFile { name, .. } => {
                    format!("lockd WriteFile {name}")
                }
                megastore_lock::LockCommand::ReadFile { name } => {
                    format!("lockd ReadFile {name}")
                }
                other => format!("lockd {other:?}"),
            };
            // Gateways read users and roles every second: only refusals of a read are
            // worth a record.
            let record = !matches!(
                command.command,
                megastore_lock::LockCommand::ReadFile { .. }
            );
            let parts = Request::from_parts(metadata, extensions, ());
            self.operator.admit(&parts, &what, record)
        } else {
            Ok(())
        };
        let request = command;
        let result = match authorized {
            Err(denied) => Err(LockError::PermissionDenied(denied.message().to_string())),
            Ok(()) => self.execute(request.id, request.command).await,
        };
        self.metrics.command(match &result {
            Ok(_) => "ok",
            Err(LockError::NotLeader) => "not_leader",
            Err(LockError::Unavailable) => "unavailable",
            Err(_) => "refused",
        });
        Ok(Response::new(
            LockResponse {
                id: request.id,
                result,
            }
            .into(),
        ))
    }

    async fn status(
        &self,
        _request: Request<pb::NodeStatusRequest>,
    ) -> Result<Response<pb::NodeStatus>, Status> {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let state = match metrics.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        Ok(Response::new(pb::NodeStatus {
            id: self.id,
            state: state.to_string(),
            term: metrics.current_term,
            leader: metrics.current_leader,
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            last_log_index: metrics.last_log_index,
            applied_index: metrics.last_applied.map(|log_id| log_id.index),
        }))
    }
}
