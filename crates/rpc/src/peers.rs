//! Sending protocol messages to other processes over gRPC.
//!
//! A request goes out, its reply comes back, and is handed to the sender's state
//! machine as a message *from* the process it was sent to — exactly as the simulator
//! delivers it. Requests to a replica or a coordinator travel through its [`CallQueue`],
//! which carries them in `Call` alone or, under load, several in one `CallMany`.
//!
//! Requests name replicas and coordinators by *slot* (the `ReplicaId` the groups' logs
//! know). With several servers per slot (`[[servers]]`), a request about a group goes
//! to the server the host's placement names for that slot of the group's range
//! ([`Peers::route_by`]: the host hands it the placement its core judges or routes
//! by, so the two never disagree), as the simulator's `route` does. A server that
//! does not hold the range refuses (`WrongServer`, `Frozen`, `NotServed`): routing is
//! never what keeps the protocol safe, only what lets it make progress.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use megastore_config::ClusterConfig;
use megastore_paxos::Message;
use megastore_placement::{Placement, ServerId};
use megastore_types::limits::{MESSAGE_BYTES_MAX, REPLICATION_REPLY_BYTES_MAX};
use megastore_types::{EgId, NodeId, ReplicaId};
use tonic::transport::Channel;

use crate::call_queue::CallQueue;
use crate::coordinator::reply_from_wire as coordinator_reply_from_wire;
use crate::lockd_client::LockdClient;
use crate::pb;
use crate::pb::coordinator::coordinator_client::CoordinatorClient;
use crate::pb::replication::replication_client::ReplicationClient;
use crate::transport::Transport;

/// Connections to every replica, coordinator and lockd node of a cluster.
pub struct Peers {
    /// Each replica's first server, by its slot.
    replicas: BTreeMap<ReplicaId, CallQueue<ReplicationClient<Channel>>>,
    coordinators: BTreeMap<ReplicaId, CallQueue<CoordinatorClient<Channel>>>,
    /// Every other replica server (`[[servers]]`), by server id, and its coordinator.
    servers: BTreeMap<u16, CallQueue<ReplicationClient<Channel>>>,
    server_coordinators: BTreeMap<u16, CallQueue<CoordinatorClient<Channel>>>,
    /// The placement requests about groups are routed by, and its version (0: none,
    /// every request to its slot's first server).
    routing: RwLock<Option<Arc<Placement>>>,
    routing_version: AtomicU64,
    lockd: LockdClient,
    rpc_timeout: Duration,
    /// The emulated round trip to each replica's site (and its coordinator's), from
    /// the site these connections are used at (config `[[wan]]`).
    wan_rtt: BTreeMap<ReplicaId, Duration>,
}

impl Peers {
    /// Lazy connections to everything in `config` (call inside a tokio runtime), with no
    /// emulated wide-area delay.
    pub fn new(config: &ClusterConfig) -> Result<Arc<Self>, String> {
        Self::build(config, None)
    }

    /// Connections used at `site`: requests to other sites wait the emulated round trip
    /// the config's `[[wan]]` links give (none without them).
    pub fn at_site(config: &ClusterConfig, site: &str) -> Result<Arc<Self>, String> {
        Self::build(config, Some(site))
    }

    fn build(config: &ClusterConfig, site: Option<&str>) -> Result<Arc<Self>, String> {
        let rpc_timeout = config.timeouts.rpc();
        let transport = Transport::from_config(config).map_err(|e| e.to_string())?;
        let channel = |address: &str, timeout| {
            transport
                .channel(address, timeout)
                .map_err(|e| e.to_string())
        };
        let mut replicas = BTreeMap::new();
        let mut coordinators = BTreeMap::new();
        let mut servers = BTreeMap::new();
        let mut server_coordinators = BTreeMap::new();
        for server in config.server_processes() {
            let r = &server.process;
            // Snapshot replies carry a whole group: allow more than gRPC's 4 MiB
            // default, as much as the replica server sends; requests as much as it
            // accepts.
            let client = ReplicationClient::new(channel(&r.address, rpc_timeout)?)
                .max_decoding_message_size(REPLICATION_REPLY_BYTES_MAX)
                .max_encoding_message_size(MESSAGE_BYTES_MAX);
            let coordinator = r
                .coordinator_address
                .as_ref()
                .map(|address| {
                    channel(address, rpc_timeout).map(|c| CallQueue::new(CoordinatorClient::new(c)))
                })
                .transpose()?;
            if server.first {
                let id = ReplicaId(r.id);
                replicas.insert(id, CallQueue::new(client));
                coordinators.extend(coordinator.map(|c| (id, c)));
            } else {
                servers.insert(server.server, CallQueue::new(client));
                server_coordinators.extend(coordinator.map(|c| (server.server, c)));
            }
        }
        let wan_rtt = config
            .replicas
            .iter()
            .map(|r| {
                let rtt = site.map_or(Duration::ZERO, |from| config.wan_rtt(from, &r.site));
                (ReplicaId(r.id), rtt)
            })
            .filter(|(_, rtt)| !rtt.is_zero())
            .collect();
        Ok(Arc::new(Self {
            replicas,
            coordinators,
            servers,
            server_coordinators,
            routing: RwLock::new(None),
            routing_version: AtomicU64::new(0),
            lockd: LockdClient::new(config)?,
            rpc_timeout,
            wan_rtt,
        }))
    }

    /// The lock service client.
    pub fn lockd(&self) -> &LockdClient {
        &self.lockd
    }

    /// Routes requests about groups by `placement` from now on, if it is newer than
    /// the one they are routed by (placements never go back).
    pub fn route_by(&self, placement: &Placement) {
        let version = placement.version().0;
        if version <= self.routing_version.load(Ordering::Acquire) {
            return;
        }
        let mut routing = self
            .routing
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if routing.as_ref().is_none_or(|p| p.version().0 < version) {
            *routing = Some(Arc::new(placement.clone()));
            self.routing_version.store(version, Ordering::Release);
        }
    }

    /// The version of the placement requests are routed by (0: none yet).
    pub fn routing_version(&self) -> u64 {
        self.routing_version.load(Ordering::Acquire)
    }

    /// The server (other than its first) of slot `slot` that a request goes to: the
    /// one it names (`named`, a global index scan's), else the one the routing
    /// placement names for the slot of its group `eg`; `None`: the slot's first
    /// server (or no group to route by).
    fn routed_server(
        &self,
        slot: ReplicaId,
        eg: Option<&EgId>,
        named: Option<ServerId>,
    ) -> Option<u16> {
        if self.servers.is_empty() {
            return None;
        }
        if let Some(server) = named {
            return (server.0 != slot.0).then_some(server.0);
        }
        let eg = eg?;
        let routing = self
            .routing
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let server = routing.as_ref()?.range_of(&eg.0).slot(slot)?.server.0;
        (server != slot.0).then_some(server)
    }

    /// The queue of slot `slot`'s replica server that a request about `eg` goes to.
    fn replica_queue(
        &self,
        slot: ReplicaId,
        eg: Option<&EgId>,
        named: Option<ServerId>,
    ) -> Option<&CallQueue<ReplicationClient<Channel>>> {
        match self.routed_server(slot, eg, named) {
            Some(server) => self.servers.get(&server),
            None => self.replicas.get(&slot),
        }
    }

    /// The queue of the coordinator beside slot `slot`'s server that a request about
    /// `eg` goes to.
    fn coordinator_queue(
        &self,
        slot: ReplicaId,
        eg: Option<&EgId>,
    ) -> Option<&CallQueue<CoordinatorClient<Channel>>> {
        match self.routed_server(slot, eg, None) {
            Some(server) => self.server_coordinators.get(&server),
            None => self.coordinators.get(&slot),
        }
    }

    /// Sends replica `to` a request it may hold for up to `held` (a watcher's long
    /// poll, [`megastore_paxos::ReplicaRequest::AwaitVisible`]) on a call of its own,
    /// so that it takes no turn from the replica's call queue; the answer, or `None`
    /// if none came within `held` plus the RPC timeout.
    pub async fn request_held(
        &self,
        to: ReplicaId,
        request: megastore_paxos::ReplicaRequest,
        held: std::time::Duration,
    ) -> Option<megastore_paxos::ReplicaReply> {
        if let Some(rtt) = self.wan_rtt.get(&to) {
            tokio::time::sleep(*rtt).await;
        }
        let queue = self.replica_queue(to, request.eg(), request.named_server())?;
        let request = pb::replication::ReplicaRequest::from(request);
        let reply = queue
            .request_alone(request, held + self.rpc_timeout)
            .await?;
        megastore_paxos::ReplicaReply::try_from(reply)
            .map_err(|e| tracing::warn!("malformed reply from replica {}: {e}", to.0))
            .ok()
    }

    /// Sends a request and returns the answer as a message from `to`, or `None` if
    /// there is none (unreachable, timed out, malformed, or nothing to say). Protocol
    /// timers decide what a missing answer means.
    pub async fn request(&self, to: NodeId, message: Message) -> Option<Message> {
        if let NodeId::Replica(r) | NodeId::Coordinator(r) = to
            && let Some(rtt) = self.wan_rtt.get(&r)
        {
            tokio::time::sleep(*rtt).await;
        }
        let queue = match to {
            NodeId::Replica(r) => {
                self.replica_queue(r, message.routed_group(), message.named_server())
            }
            _ => None,
        };
        let coordinator_queue = match to {
            NodeId::Coordinator(r) => self.coordinator_queue(r, message.routed_group()),
            _ => None,
        };
        match (to, message) {
            (NodeId::Replica(r), Message::ReplicaRequest(request)) => {
                let queue = queue?;
                let request = pb::replication::ReplicaRequest::from(request);
                let reply = queue.request(request, self.rpc_timeout).await?;
                megastore_paxos::ReplicaReply::try_from(reply)
                    .map(Message::ReplicaReply)
                    .map_err(|e| tracing::warn!("malformed reply from replica {}: {e}", r.0))
                    .ok()
            }
            (NodeId::Coordinator(r), Message::CoordinatorRequest(request)) => {
                let queue = coordinator_queue?;
                let request = pb::coordinator::CoordinatorRequest::from(request);
                let reply = queue.request(request, self.rpc_timeout).await?;
                coordinator_reply_from_wire(reply)
                    .map_err(|e| tracing::warn!("malformed reply from coordinator {}: {e}", r.0))
                    .ok()
                    .flatten()
                    .map(Message::CoordinatorReply)
            }
            // Boxed, as are the calls behind them: their futures are kilobytes, and
            // inline they would make every request's future as large (the client's
            // driver boxes one per request it sends).
            (NodeId::Replica(r), Message::Relay { id, commit }) => {
                Box::pin(self.relay(r, queue?, id, *commit)).await
            }
            (NodeId::LockNode(n), Message::LockRequest(request)) => {
                Box::pin(self.lockd.send(n, request))
                    .await
                    .map(Message::LockResponse)
            }
            (to, message) => {
                debug_assert!(false, "no way to send {message:?} to {to}");
                None
            }
        }
    }

    /// A relayed commit to replica `r`, answered once the relay's commit ends (the
    /// sender's core waits as long for it).
    async fn relay(
        &self,
        r: ReplicaId,
        queue: &CallQueue<ReplicationClient<Channel>>,
        id: u64,
        commit: megastore_paxos::RelayedCommit,
    ) -> Option<Message> {
        let mut connection = queue.connection();
        let txn = commit.txn;
        let request = pb::replication::RelayedCommit::from(commit);
        let wait = megastore_paxos::relay_wait(self.rpc_timeout);
        let answer = tokio::time::timeout(wait, connection.relay(request))
            .await
            .ok()?
            .map_err(|status| tracing::debug!("relay to replica {}: {status}", r.0))
            .ok()?;
        crate::relay::relayed_outcome_from_wire(answer.into_inner())
            .map(|result| Message::RelayOutcome { id, txn, result })
            .map_err(|e| tracing::warn!("malformed relay outcome from replica {}: {e}", r.0))
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use megastore_paxos::{Message, ReplicaRequest};
    use megastore_types::{EgId, NodeId, Position, ReplicaId};

    /// A request's future stays small: the client's driver boxes one per request it
    /// sends, and moves it there, so the rare kinds whose futures are kilobytes (a
    /// batched or lone gRPC call, a relay, a lock-service call) are boxed inside it.
    /// All of them inline made it 5,600 bytes in a debug build.
    #[tokio::test]
    async fn a_request_future_stays_small() {
        let text = include_str!("../../config/cluster.example.toml");
        let config = megastore_config::ClusterConfig::parse(text, "cluster.example.toml")
            .expect("the example config parses");
        let peers = super::Peers::new(&config).expect("the example config connects lazily");
        let message = Message::ReplicaRequest(ReplicaRequest::ReadLog {
            id: 0,
            eg: EgId(b"g".to_vec()),
            position: Position(1),
        });
        let request = peers.request(NodeId::Replica(ReplicaId(0)), message);
        let bytes = std::mem::size_of_val(&request);
        assert!(bytes <= 2_048, "a request's future is {bytes} bytes");
    }
}
