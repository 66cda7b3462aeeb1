//! Talking to lockd from a process: find the leader, send a command, get its result.
//!
//! A command keeps one request id across its resends, and lockd applies a request id at
//! most once (it remembers recent results), so a command is sent again after any
//! failure — a node that is not the leader, a refused connection, a timeout, a broken
//! connection — until it is answered or the client's patience runs out.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::Transport;
use crate::pb::lock as pb;
use crate::pb::lock::lock_client::LockClient as GrpcLockClient;
use megastore_config::ClusterConfig;
use megastore_lock::{LockCommand, LockError, LockReply, LockRequest, LockResponse, LockService};
use megastore_types::LockNodeId;
use tonic::transport::Channel;

/// How one lockd node sees the Raft cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// "leader", "follower", "candidate", "learner" or "shutdown".
    pub state: String,
    /// The Raft term it is in.
    pub term: u64,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// The voting members.
    pub voters: Vec<u64>,
    /// Members that replicate but do not vote.
    pub learners: Vec<u64>,
    /// Its last log index.
    pub last_log_index: Option<u64>,
    /// The last index applied to its state machine.
    pub applied_index: Option<u64>,
}

/// A client of a lockd cluster.
pub struct LockdClient {
    nodes: Vec<(LockNodeId, GrpcLockClient<Channel>)>,
    /// Where the last leader was found.
    leader: AtomicUsize,
    next_id: AtomicU64,
    rpc_timeout: Duration,
    /// How long to keep looking for a leader.
    patience: Duration,
    /// The operator token (`[auth]`), sent with every command when this process can
    /// read it: lockd asks for it on administrative commands only.
    operator_token: Option<String>,
}

impl LockdClient {
    /// A client of the lockd nodes of `config` (connections are made lazily; call it
    /// inside a tokio runtime).
    pub fn new(config: &ClusterConfig) -> Result<Self, String> {
        let rpc_timeout = config.timeouts.rpc();
        let transport = Transport::from_config(config).map_err(|e| e.to_string())?;
        let nodes = config
            .lockd
            .iter()
            .map(|l| {
                let channel = transport
                    .channel(&l.address, rpc_timeout)
                    .map_err(|e| format!("lockd node {}: {e}", l.name))?;
                Ok((LockNodeId(l.id), GrpcLockClient::new(channel)))
            })
            .collect::<Result<Vec<_>, String>>()?;
        // Elections take one to two election timeouts, more when votes split.
        let patience =
            Duration::from_millis(config.timeouts.election_timeout_ms * 10) + rpc_timeout;
        Ok(Self {
            nodes,
            leader: AtomicUsize::new(0),
            // Request ids start at a random point on every start, so a late reply to an
            // earlier process is never taken for an answer to this one.
            next_id: AtomicU64::new(rand::random::<u64>() >> 1),
            rpc_timeout,
            patience,
            operator_token: config.operator_token().ok().flatten(),
        })
    }

    /// Sends one request to one node (for drivers of [`megastore_lock::LockClient`],
    /// which pick nodes themselves). `None`: the node is not there.
    pub async fn send(&self, node: LockNodeId, request: LockRequest) -> Option<LockResponse> {
        let (_, client) = self.nodes.iter().find(|(id, _)| *id == node)?;
        let mut call = tonic::Request::new(pb::LockRequest::from(request));
        call.set_timeout(self.rpc_timeout);
        let response = client.clone().call(call).await.ok()?;
        LockResponse::try_from(response.into_inner()).ok()
    }

    /// How `node` sees the Raft cluster; `None`: it did not answer.
    pub async fn node_status(&self, node: LockNodeId) -> Option<NodeStatus> {
        let (_, client) = self.nodes.iter().find(|(id, _)| *id == node)?;
        let mut call = tonic::Request::new(pb::NodeStatusRequest {});
        call.set_timeout(self.rpc_timeout);
        let status = client.clone().status(call).await.ok()?.into_inner();
        Some(NodeStatus {
            state: status.state,
            term: status.term,
            leader: status.leader,
            voters: status.voters,
            learners: status.learners,
            last_log_index: status.last_log_index,
            applied_index: status.applied_index,
        })
    }

    /// Executes a command at the leader, looking for it as long as an election takes.
    pub async fn execute(&self, command: LockCommand) -> Result<LockReply, LockError> {
        let started = tokio::time::Instant::now();
        let mut at = self.leader.load(Ordering::Relaxed) % self.nodes.len().max(1);
        let mut misses = 0usize;
        // One id for every resend: lockd answers a resend from its first application.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        loop {
            let (_, client) = &self.nodes[at];
            let request = LockRequest {
                id,
                command: command.clone(),
            };
            let mut call = crate::with_operator_token(
                pb::LockRequest::from(request),
                self.operator_token.as_deref(),
            );
            call.set_timeout(self.rpc_timeout);
            if let Ok(response) = client.clone().call(call).await
                && let Ok(response) = LockResponse::try_from(response.into_inner())
                && response.id == id
            {
                match response.result {
                    Err(LockError::NotLeader | LockError::Unavailable) => {}
                    result => {
                        self.leader.store(at, Ordering::Relaxed);
                        return result;
                    }
                }
            }
            if started.elapsed() >= self.patience {
                return Err(LockError::Unavailable);
            }
            at = (at + 1) % self.nodes.len();
            misses += 1;
            if misses.is_multiple_of(self.nodes.len()) {
                // A whole round without a leader: an election is under way.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The synchronous [`LockService`] over a [`LockdClient`], for tools and the
/// conformance suite; it blocks on `runtime`.
pub struct BlockingLockdClient {
    client: LockdClient,
    runtime: tokio::runtime::Handle,
}

impl BlockingLockdClient {
    /// Wraps `client`; calls run on `runtime` and must not be made from inside it.
    pub fn new(client: LockdClient, runtime: tokio::runtime::Handle) -> Self {
        Self { client, runtime }
    }
}

impl LockService for BlockingLockdClient {
    fn execute(&self, command: LockCommand) -> Result<LockReply, LockError> {
        self.runtime.block_on(self.client.execute(command))
    }
}
