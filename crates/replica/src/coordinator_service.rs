//! The `Coordinator` gRPC service: turns each call's requests into events for the
//! coordinator's driver and each answer into the call's reply. `CallMany` carries a
//! sender's batch (`megastore-rpc`'s lanes); each request is still its own event.

use std::pin::Pin;

use futures::stream::{FuturesUnordered, Stream, StreamExt};
use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_rpc::coordinator_reply_to_wire;
use megastore_rpc::pb::coordinator as pb;
use megastore_rpc::pb::coordinator::coordinator_server::Coordinator as CoordinatorRpc;
use megastore_types::limits::BATCH_REQUESTS_MAX;
use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status};

use crate::coordinator::Event;

pub(crate) struct CoordinatorService {
    pub(crate) events: mpsc::Sender<Event>,
}

type NumberedReplies =
    Pin<Box<dyn Stream<Item = Result<pb::NumberedCoordinatorReply, Status>> + Send>>;

impl CoordinatorService {
    /// Hands `request` to the driver; the receiver gets its answer.
    async fn submit(
        &self,
        request: CoordinatorRequest,
    ) -> Result<oneshot::Receiver<Option<CoordinatorReply>>, Status> {
        let (reply, answer) = oneshot::channel();
        self.events
            .send(Event::Request { request, reply })
            .await
            .map_err(|_| Status::unavailable("coordinator stopping"))?;
        Ok(answer)
    }
}

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

    type CallManyStream = NumberedReplies;

    async fn call_many(
        &self,
        request: Request<pb::CoordinatorRequests>,
    ) -> Result<Response<Self::CallManyStream>, Status> {
        let requests = request.into_inner().requests;
        if requests.len() > BATCH_REQUESTS_MAX {
            return Err(Status::invalid_argument(format!(
                "a batch of {} requests: at most {BATCH_REQUESTS_MAX}",
                requests.len()
            )));
        }
        // All or nothing: a malformed request refuses the batch before any of it
        // reaches the coordinator.
        let requests = requests
            .into_iter()
            .enumerate()
            .map(|(index, request)| {
                CoordinatorRequest::try_from(request)
                    .map_err(|e| Status::invalid_argument(format!("request {index}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let waiting = FuturesUnordered::new();
        for (index, request) in requests.into_iter().enumerate() {
            let answer = self.submit(request).await?;
            let index = u32::try_from(index).expect("at most BATCH_REQUESTS_MAX requests");
            waiting.push(async move { (index, answer.await) });
        }
        let replies = waiting.map(|(index, answer)| match answer {
            Ok(reply) => Ok(pb::NumberedCoordinatorReply {
                index,
                reply: Some(coordinator_reply_to_wire(reply)),
            }),
            Err(_) => Err(Status::unavailable("coordinator stopping")),
        });
        Ok(Response::new(Box::pin(replies)))
    }
}
