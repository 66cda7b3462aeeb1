//! Raft between lockd nodes over gRPC: openraft's messages as JSON in one `bytes`
//! field, sent by [`RaftNetworkFactory`] and answered by [`RaftService`].

use std::time::Duration;

use megastore_rpc::Transport;
use megastore_rpc::pb::lock::RaftPayload;
use megastore_rpc::pb::lock::raft_client::RaftClient;
use megastore_rpc::pb::lock::raft_server::Raft as RaftRpc;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft, RaftNetwork, RaftNetworkFactory};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::types::{RaftNodeId, TypeConfig};

/// Connects to peers by the address in their membership entry.
pub(crate) struct Network {
    connect_timeout: Duration,
    transport: Transport,
}

impl Network {
    pub(crate) fn new(connect_timeout: Duration, transport: Transport) -> Self {
        Self {
            connect_timeout,
            transport,
        }
    }
}

/// One peer.
pub(crate) struct Peer {
    target: RaftNodeId,
    client: Option<RaftClient<Channel>>,
    address: String,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: RaftNodeId, node: &BasicNode) -> Peer {
        // Lazy: a peer that is down is found out by the first call, not here.
        let client = self
            .transport
            .channel(&node.addr, self.connect_timeout)
            .ok()
            .map(RaftClient::new);
        Peer {
            target,
            client,
            address: node.addr.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

type RpcResult<T, E> = Result<T, RPCError<RaftNodeId, BasicNode, RaftError<RaftNodeId, E>>>;

impl Peer {
    async fn call<Q, A, E>(
        &mut self,
        kind: Kind,
        request: &Q,
        option: &RPCOption,
    ) -> RpcResult<A, E>
    where
        Q: Serialize,
        A: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let Some(client) = self.client.as_mut() else {
            let e = TransportError(format!("bad peer address {:?}", self.address));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        let json =
            serde_json::to_vec(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut request = Request::new(RaftPayload { json });
        request.set_timeout(option.hard_ttl());
        let answer = match kind {
            Kind::Append => client.append_entries(request).await,
            Kind::Vote => client.vote(request).await,
            Kind::Snapshot => client.install_snapshot(request).await,
        };
        let payload = answer.map_err(|status| {
            let e = TransportError(format!("{}: {}", self.address, status.message()));
            if status.code() == tonic::Code::Unavailable {
                RPCError::Unreachable(Unreachable::new(&e))
            } else {
                RPCError::Network(NetworkError::new(&e))
            }
        })?;
        let result: Result<A, RaftError<RaftNodeId, E>> =
            serde_json::from_slice(&payload.into_inner().json)
                .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Append,
    Vote,
    Snapshot,
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<RaftNodeId>, openraft::error::Infallible> {
        self.call(Kind::Append, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<RaftNodeId>, InstallSnapshotError> {
        self.call(Kind::Snapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<RaftNodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<RaftNodeId>, openraft::error::Infallible> {
        self.call(Kind::Vote, &rpc, &option).await
    }
}

/// Answers peers' Raft messages by handing them to the local node.
pub(crate) struct RaftService {
    pub(crate) raft: Raft<TypeConfig>,
}

fn decode<T: DeserializeOwned>(request: Request<RaftPayload>) -> Result<T, Status> {
    serde_json::from_slice(&request.into_inner().json)
        .map_err(|e| Status::invalid_argument(format!("malformed Raft message: {e}")))
}

fn encode<T: Serialize>(result: &T) -> Result<Response<RaftPayload>, Status> {
    serde_json::to_vec(result)
        .map(|json| Response::new(RaftPayload { json }))
        .map_err(|e| Status::internal(e.to_string()))
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(
        &self,
        request: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc: AppendEntriesRequest<TypeConfig> = decode(request)?;
        encode(&self.raft.append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let rpc: VoteRequest<RaftNodeId> = decode(request)?;
        encode(&self.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc: InstallSnapshotRequest<TypeConfig> = decode(request)?;
        encode(&self.raft.install_snapshot(rpc).await)
    }
}
