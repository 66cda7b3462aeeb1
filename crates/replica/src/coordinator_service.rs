//! The `Coordinator` gRPC service: turns each call's requests into events for the
//! coordinator's driver and each answer into the call's reply. `CallMany` carries a
//! sender's batch (`megastore-rpc`'s lanes) and `Session` a sender's requests on one long-lived
//! stream; each request is still its own event.
//! `KnowsMove` is a move's (and a full replica's removal's) fence, asked by the operator.

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_rpc::coordinator_reply_to_wire;
use megastore_rpc::pb::coordinator as pb;
use megastore_rpc::pb::coordinator::coordinator_server::Coordinator as CoordinatorRpc;
use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status};

use crate::batched_calls::{
    Numbered, SessionWire, decode_batch, serve_session, stream_numbered, unpack_each,
};
use crate::coordinator::Event;

pub(crate) struct CoordinatorService {
    pub(crate) events: mpsc::Sender<Event>,
    /// Where a move's fence reads the newest placement.
    pub(crate) lockd: megastore_rpc::LockdClient,
    pub(crate) topology: megastore_types::Topology,
    /// Turns true when the server stops: open sessions end.
    pub(crate) stopped: tokio::sync::watch::Receiver<bool>,
}

impl CoordinatorService {
    /// Hands `request` to the driver; the receiver gets its answer.
    async fn submit(
        &self,
        request: CoordinatorRequest,
    ) -> Result<oneshot::Receiver<Option<CoordinatorReply>>, Status> {
        submit_to(self.events.clone(), request).await
    }
}

/// Hands `request` to the coordinator behind `events`; the receiver gets its answer.
async fn submit_to(
    events: mpsc::Sender<Event>,
    request: CoordinatorRequest,
) -> Result<oneshot::Receiver<Option<CoordinatorReply>>, Status> {
    let (reply, answer) = oneshot::channel();
    events
        .send(Event::Request { request, reply })
        .await
        .map_err(|_| Status::unavailable("coordinator stopping"))?;
    Ok(answer)
}

/// A coordinator session's messages.
const SESSION_WIRE: SessionWire<
    pb::SessionRequests,
    CoordinatorRequest,
    Option<CoordinatorReply>,
    pb::SessionReply,
    pb::SessionReplies,
> = SessionWire {
    unpack: |message| {
        let requests = message.requests.into_iter();
        unpack_each(
            requests.map(|n| (n.id, n.request)),
            CoordinatorRequest::try_from,
        )
    },
    tag: |id, reply| pb::SessionReply {
        id,
        reply: Some(coordinator_reply_to_wire(reply)),
    },
    pack: |replies| pb::SessionReplies { replies },
    stopping: "coordinator stopping",
};

#[tonic::async_trait]
impl CoordinatorRpc for CoordinatorService {
    async fn call(
        &self,
        request: Request<pb::CoordinatorRequest>,
    ) -> Result<Response<pb::CoordinatorReply>, Status> {
        let request = CoordinatorRequest::try_from(request.into_inner())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let answer = self
            .submit(request)
            .await?
            .await
            .map_err(|_| Status::unavailable("coordinator stopping"))?;
        Ok(Response::new(coordinator_reply_to_wire(answer)))
    }

    async fn knows_move(
        &self,
        request: Request<pb::KnowsMoveRequest>,
    ) -> Result<Response<pb::KnowsMoveResponse>, Status> {
        let move_id = megastore_placement::Version(request.into_inner().move_id);
        let stopping = |_| Status::unavailable("coordinator stopping");
        // The newest placement first, so a coordinator whose poll is behind the move
        // answers for the move at once (the core ignores a placement it has).
        let stored = megastore_client::placement_store::load_placement(&self.lockd, &self.topology)
            .await
            .map_err(|e| Status::unavailable(format!("reading the placement: {e}")))?;
        self.events
            .send(Event::Placement(stored.placement))
            .await
            .map_err(stopping)?;
        let (reply, answer) = oneshot::channel();
        self.events
            .send(Event::KnowsMove { move_id, reply })
            .await
            .map_err(stopping)?;
        let knows = answer
            .await
            .map_err(|_| Status::unavailable("coordinator stopping"))?;
        Ok(Response::new(pb::KnowsMoveResponse { knows }))
    }

    type CallManyStream = Numbered<pb::NumberedCoordinatorReply>;

    async fn call_many(
        &self,
        request: Request<pb::CoordinatorRequests>,
    ) -> Result<Response<Self::CallManyStream>, Status> {
        let requests = decode_batch(request.into_inner().requests, CoordinatorRequest::try_from)?;
        let mut answers = Vec::with_capacity(requests.len());
        for request in requests {
            answers.push(self.submit(request).await?);
        }
        let number = |index, reply| pb::NumberedCoordinatorReply {
            index,
            reply: Some(coordinator_reply_to_wire(reply)),
        };
        Ok(Response::new(stream_numbered(
            answers,
            number,
            "coordinator stopping",
        )))
    }

    type SessionStream = Numbered<pb::SessionReplies>;

    async fn session(
        &self,
        request: Request<tonic::Streaming<pb::SessionRequests>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let events = self.events.clone();
        Ok(Response::new(serve_session(
            request.into_inner(),
            SESSION_WIRE,
            self.stopped.clone(),
            |_| {},
            move |request| submit_to(events.clone(), request),
        )))
    }
}
