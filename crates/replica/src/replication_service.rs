//! The `Replication` gRPC service: turns each call's requests into events for the
//! replica's driver thread and each reply the driver releases into the call's answer.
//!
//! `Call` carries one request; `CallMany` a sender's batch, whose replies stream back
//! one message each, numbered, in the order the driver releases them; `Session` a
//! sender's requests for as long as it keeps the stream, whose replies come back tagged
//! with their requests' ids. Every way, each request is its own event with its own
//! reply: batching changes how requests travel, never what the core sees.

use std::sync::mpsc;

use megastore_metrics::ReplicaMetrics;
use megastore_paxos::ReplicaRequest;
use megastore_rpc::pb::replication as pb;
use megastore_rpc::pb::replication::replication_server::Replication;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use crate::batched_calls::{
    Numbered, SessionWire, decode_batch, serve_session, stream_numbered, unpack_each,
};
use crate::replica_server::Event;

pub(crate) struct ReplicationService {
    pub(crate) events: mpsc::Sender<Event>,
    pub(crate) metrics: ReplicaMetrics,
    /// This replica's shared client: the relay of its site's clients' hot groups.
    pub(crate) relay: megastore_client::Client,
    /// Turns true when the server stops: open sessions end.
    pub(crate) stopped: tokio::sync::watch::Receiver<bool>,
}

impl ReplicationService {
    /// Hands `request` to the driver; the receiver gets its reply once released.
    fn submit(
        &self,
        request: ReplicaRequest,
    ) -> Result<oneshot::Receiver<megastore_paxos::ReplicaReply>, Status> {
        submit_to(&self.events, request)
    }
}

/// Hands `request` to the driver behind `events`; the receiver gets its reply once
/// released.
fn submit_to(
    events: &mpsc::Sender<Event>,
    request: ReplicaRequest,
) -> Result<oneshot::Receiver<megastore_paxos::ReplicaReply>, Status> {
    // Field values are evaluated only when the event is enabled: no group name is
    // formatted per request otherwise.
    tracing::debug!(
        eg = %request.eg().map_or_else(|| "global index".to_string(), ToString::to_string),
        id = request.id(),
        ?request,
        "received"
    );
    let (reply, answer) = oneshot::channel();
    events
        .send(Event::Call { request, reply })
        .map_err(|_| Status::unavailable("replica stopping"))?;
    Ok(answer)
}

/// A replica session's messages.
pub(crate) const SESSION_WIRE: SessionWire<
    pb::SessionRequests,
    ReplicaRequest,
    megastore_paxos::ReplicaReply,
    pb::SessionReply,
    pb::SessionReplies,
> = SessionWire {
    unpack: |message| {
        let requests = message.requests.into_iter();
        unpack_each(
            requests.map(|n| (n.id, n.request)),
            ReplicaRequest::try_from,
        )
    },
    tag: |id, reply| pb::SessionReply {
        id,
        reply: Some(reply.into()),
    },
    pack: |replies| pb::SessionReplies { replies },
    stopping: "replica stopping",
};

#[tonic::async_trait]
impl Replication for ReplicationService {
    async fn call(
        &self,
        request: Request<pb::ReplicaRequest>,
    ) -> Result<Response<pb::ReplicaReply>, Status> {
        self.metrics.call(1);
        let request = ReplicaRequest::try_from(request.into_inner())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let answer = self
            .submit(request)?
            .await
            .map_err(|_| Status::unavailable("replica stopping"))?;
        tracing::debug!(reply = ?answer, "answered");
        Ok(Response::new(answer.into()))
    }

    async fn relay(
        &self,
        request: Request<pb::RelayedCommit>,
    ) -> Result<Response<pb::RelayedOutcome>, Status> {
        let commit = megastore_paxos::RelayedCommit::try_from(request.into_inner())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        megastore_paxos::check_proposed_writes(&commit.eg, &commit.writes)
            .map_err(|e| Status::invalid_argument(format!("writes: {e}")))?;
        let result = self
            .relay
            .commit_for_relay(commit)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(megastore_rpc::relayed_outcome_to_wire(
            result,
        )))
    }

    type CallManyStream = Numbered<pb::NumberedReply>;

    async fn call_many(
        &self,
        request: Request<pb::ReplicaRequests>,
    ) -> Result<Response<Self::CallManyStream>, Status> {
        let requests = decode_batch(request.into_inner().requests, ReplicaRequest::try_from)?;
        self.metrics.call(requests.len());
        let answers = requests
            .into_iter()
            .map(|request| self.submit(request))
            .collect::<Result<Vec<_>, _>>()?;
        let number = |index, reply: megastore_paxos::ReplicaReply| pb::NumberedReply {
            index,
            reply: Some(reply.into()),
        };
        Ok(Response::new(stream_numbered(
            answers,
            number,
            "replica stopping",
        )))
    }

    type SessionStream = Numbered<pb::SessionReplies>;

    async fn session(
        &self,
        request: Request<tonic::Streaming<pb::SessionRequests>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let events = self.events.clone();
        let metrics = self.metrics.clone();
        Ok(Response::new(serve_session(
            request.into_inner(),
            SESSION_WIRE,
            self.stopped.clone(),
            move |requests| metrics.call(requests),
            move |request| std::future::ready(submit_to(&events, request)),
        )))
    }
}
