//! The `Replication` gRPC service: turns each call's requests into events for the
//! replica's driver thread and each reply the driver releases into the call's answer.
//!
//! `Call` carries one request; `CallMany` a sender's batch, whose replies stream back
//! one message each, numbered, in the order the driver releases them. Either way every
//! request is its own event with its own reply: batching changes how requests travel,
//! never what the core sees.

use std::pin::Pin;
use std::sync::mpsc;

use futures::stream::{FuturesUnordered, Stream, StreamExt};
use megastore_metrics::ReplicaMetrics;
use megastore_paxos::ReplicaRequest;
use megastore_rpc::pb::replication as pb;
use megastore_rpc::pb::replication::replication_server::Replication;
use megastore_types::limits::BATCH_REQUESTS_MAX;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use crate::replica_server::Event;

pub(crate) struct ReplicationService {
    pub(crate) events: mpsc::Sender<Event>,
    pub(crate) metrics: ReplicaMetrics,
}

type NumberedReplies = Pin<Box<dyn Stream<Item = Result<pb::NumberedReply, Status>> + Send>>;

impl ReplicationService {
    /// Hands `request` to the driver; the receiver gets its reply once released.
    fn submit(
        &self,
        request: ReplicaRequest,
    ) -> Result<oneshot::Receiver<megastore_paxos::ReplicaReply>, Status> {
        let eg = request
            .eg()
            .map_or_else(|| "global index".to_string(), ToString::to_string);
        tracing::debug!(eg = %eg, id = request.id(), ?request, "received");
        let (reply, answer) = oneshot::channel();
        self.events
            .send(Event::Call { request, reply })
            .map_err(|_| Status::unavailable("replica stopping"))?;
        Ok(answer)
    }
}

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

    type CallManyStream = NumberedReplies;

    async fn call_many(
        &self,
        request: Request<pb::ReplicaRequests>,
    ) -> Result<Response<Self::CallManyStream>, Status> {
        let requests = request.into_inner().requests;
        if requests.len() > BATCH_REQUESTS_MAX {
            return Err(Status::invalid_argument(format!(
                "a batch of {} requests: at most {BATCH_REQUESTS_MAX}",
                requests.len()
            )));
        }
        self.metrics.call(requests.len());
        // All or nothing: a malformed request refuses the batch before any of it
        // reaches the core, so no reply is left without its call.
        let requests = requests
            .into_iter()
            .enumerate()
            .map(|(index, request)| {
                ReplicaRequest::try_from(request)
                    .map_err(|e| Status::invalid_argument(format!("request {index}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let waiting = FuturesUnordered::new();
        for (index, request) in requests.into_iter().enumerate() {
            let answer = self.submit(request)?;
            let index = u32::try_from(index).expect("at most BATCH_REQUESTS_MAX requests");
            waiting.push(async move { (index, answer.await) });
        }
        let replies = waiting.map(|(index, answer)| match answer {
            Ok(reply) => Ok(pb::NumberedReply {
                index,
                reply: Some(reply.into()),
            }),
            Err(_) => Err(Status::unavailable("replica stopping")),
        });
        Ok(Response::new(Box::pin(replies)))
    }
}
