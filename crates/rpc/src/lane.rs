//! One sender's requests to one server (a replica or a coordinator), batched under
//! load.
//!
//! Each request used to be its own gRPC call: an HTTP/2 stream, a task and a wakeup on
//! both sides, which under load cost more CPU than the protocol work it carried. A
//! lane sends one call at a time: a request that finds the lane idle leaves at once,
//! alone (`Call`), so an idle sender waits for nothing; requests that arrive while the
//! last call is unanswered queue, and leave together (`CallMany`, up to
//! [`BATCH_REQUESTS_MAX`] requests or about [`BATCH_BYTES_TARGET`] bytes) when it is
//! answered, or after [`LINGER`] if it is slow. Replies stream back one by one, so no
//! request waits for another's reply.
//!
//! What this does not change: every request is still handled on its own and answered
//! on its own; a lost call loses its requests' answers, which the protocol's timers
//! already expect. A request is given up (no answer) once it has waited its timeout,
//! in the queue and on the wire together, as a lone call's was.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use megastore_types::limits::{BATCH_BYTES_TARGET, BATCH_REQUESTS_MAX};
use prost::Message as _;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::pb::coordinator as coordinator_pb;
use crate::pb::coordinator::coordinator_client::CoordinatorClient;
use crate::pb::replication as replication_pb;
use crate::pb::replication::replication_client::ReplicationClient;

/// The longest a lane holds requests back while its last call is unanswered. On a
/// busy local network a call is answered within a few milliseconds (a WAL sync), and
/// what queued meanwhile leaves together; across a WAN, or to a server that does not
/// answer, a request waits at most this long for its turn.
pub(crate) const LINGER: Duration = Duration::from_millis(2);

/// A gRPC service with a one-request `Call` and a batched, streamed `CallMany`.
pub(crate) trait Batching: Clone + Send + 'static {
    type Request: prost::Message + Send + 'static;
    type Reply: Send + 'static;

    /// One request in one call.
    fn call_one(
        self,
        request: tonic::Request<Self::Request>,
    ) -> impl Future<Output = Result<Self::Reply, tonic::Status>> + Send;

    /// Several requests in one call; `deliver` gets each numbered reply as it comes.
    fn call_many(
        self,
        requests: Vec<Self::Request>,
        timeout: Duration,
        deliver: impl FnMut(u32, Option<Self::Reply>) + Send,
    ) -> impl Future<Output = Result<(), tonic::Status>> + Send;
}

impl Batching for ReplicationClient<Channel> {
    type Request = replication_pb::ReplicaRequest;
    type Reply = replication_pb::ReplicaReply;

    async fn call_one(
        mut self,
        request: tonic::Request<Self::Request>,
    ) -> Result<Self::Reply, tonic::Status> {
        Ok(self.call(request).await?.into_inner())
    }

    async fn call_many(
        mut self,
        requests: Vec<Self::Request>,
        timeout: Duration,
        mut deliver: impl FnMut(u32, Option<Self::Reply>) + Send,
    ) -> Result<(), tonic::Status> {
        let mut call = tonic::Request::new(replication_pb::ReplicaRequests { requests });
        call.set_timeout(timeout);
        let mut stream = ReplicationClient::call_many(&mut self, call)
            .await?
            .into_inner();
        while let Some(numbered) = stream.message().await? {
            deliver(numbered.index, numbered.reply);
        }
        Ok(())
    }
}

impl Batching for CoordinatorClient<Channel> {
    type Request = coordinator_pb::CoordinatorRequest;
    type Reply = coordinator_pb::CoordinatorReply;

    async fn call_one(
        mut self,
        request: tonic::Request<Self::Request>,
    ) -> Result<Self::Reply, tonic::Status> {
        Ok(self.call(request).await?.into_inner())
    }

    async fn call_many(
        mut self,
        requests: Vec<Self::Request>,
        timeout: Duration,
        mut deliver: impl FnMut(u32, Option<Self::Reply>) + Send,
    ) -> Result<(), tonic::Status> {
        let mut call = tonic::Request::new(coordinator_pb::CoordinatorRequests { requests });
        call.set_timeout(timeout);
        let mut stream = CoordinatorClient::call_many(&mut self, call)
            .await?
            .into_inner();
        while let Some(numbered) = stream.message().await? {
            deliver(numbered.index, numbered.reply);
        }
        Ok(())
    }
}

/// A request waiting for its turn.
struct Queued<S: Batching> {
    request: S::Request,
    bytes: usize,
    deadline: Instant,
    reply: oneshot::Sender<S::Reply>,
}

/// The batching queue in front of one server's connection.
pub(crate) struct Lane<S: Batching> {
    client: S,
    /// Where requests queue; `None` until the first request starts the sending task
    /// (on the caller's runtime, which may not be the one that built the lane).
    queue: Mutex<Option<mpsc::UnboundedSender<Queued<S>>>>,
    /// The server answered `CallMany` with "unimplemented" (an older version): every
    /// request goes alone from then on.
    singles_only: Arc<AtomicBool>,
}

impl<S: Batching> Lane<S> {
    pub(crate) fn new(client: S) -> Self {
        Self {
            client,
            queue: Mutex::new(None),
            singles_only: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Sends `request` and returns the server's reply, or `None` if none came within
    /// `timeout`.
    pub(crate) async fn request(&self, request: S::Request, timeout: Duration) -> Option<S::Reply> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(Queued {
            bytes: request.encoded_len(),
            request,
            deadline: Instant::now() + timeout,
            reply,
        });
        answer.await.ok()
    }

    fn enqueue(&self, queued: Queued<S>) {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let queued = match queue.as_ref() {
            Some(sender) => match sender.send(queued) {
                Ok(()) => return,
                Err(mpsc::error::SendError(queued)) => queued,
            },
            None => queued,
        };
        // The first request, or the runtime that ran the last sending task is gone.
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(send_batches(
            self.client.clone(),
            receiver,
            Arc::clone(&self.singles_only),
        ));
        let _ = sender.send(queued);
        *queue = Some(sender);
    }
}

/// The lane's sending task: takes everything queued into one call, then waits until
/// that call is answered or [`LINGER`] has passed before taking the next.
async fn send_batches<S: Batching>(
    client: S,
    mut queue: mpsc::UnboundedReceiver<Queued<S>>,
    singles_only: Arc<AtomicBool>,
) {
    while let Some(first) = queue.recv().await {
        let now = Instant::now();
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(queued) = next.take() {
            // Dropping a request whose caller stopped waiting answers it with nothing.
            if queued.deadline > now && !queued.reply.is_closed() {
                bytes += queued.bytes;
                batch.push(queued);
            }
            let full = batch.len() >= BATCH_REQUESTS_MAX || bytes >= BATCH_BYTES_TARGET;
            if !full {
                next = queue.try_recv().ok();
            }
        }
        if batch.is_empty() {
            continue;
        }
        let client = client.clone();
        let singles_only = Arc::clone(&singles_only);
        let (done, answered) = oneshot::channel::<()>();
        tokio::spawn(async move {
            if batch.len() == 1 || singles_only.load(Ordering::Relaxed) {
                futures::future::join_all(batch.into_iter().map(|q| send_one(client.clone(), q)))
                    .await;
            } else {
                send_many(client, batch, &singles_only).await;
            }
            drop(done);
        });
        let _ = tokio::time::timeout(LINGER, answered).await;
    }
}

async fn send_one<S: Batching>(client: S, queued: Queued<S>) {
    let timeout = queued.deadline.saturating_duration_since(Instant::now());
    let mut call = tonic::Request::new(queued.request);
    call.set_timeout(timeout);
    if let Ok(Ok(reply)) = tokio::time::timeout(timeout, client.call_one(call)).await {
        let _ = queued.reply.send(reply);
    }
}

async fn send_many<S: Batching>(client: S, batch: Vec<Queued<S>>, singles_only: &AtomicBool) {
    let deadline = batch
        .iter()
        .map(|q| q.deadline)
        .min()
        .expect("a batch holds a request");
    let timeout = deadline.saturating_duration_since(Instant::now());
    let (requests, mut replies): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|q| (q.request, Some(q.reply)))
        .unzip();
    let deliver = |index: u32, answer: Option<S::Reply>| {
        let slot = usize::try_from(index).ok().and_then(|i| replies.get_mut(i));
        match (slot.and_then(Option::take), answer) {
            (Some(reply), Some(answer)) => {
                let _ = reply.send(answer);
            }
            _ => tracing::warn!(index, "a batched reply names no waiting request"),
        }
    };
    let streamed =
        tokio::time::timeout(timeout, client.call_many(requests, timeout, deliver)).await;
    if let Ok(Err(status)) = streamed
        && status.code() == tonic::Code::Unimplemented
    {
        // An older server: from now on each request goes alone. This batch's go
        // unanswered, like the requests of any lost call.
        tracing::info!("a server does not take batched calls; sending requests one by one");
        singles_only.store(true, Ordering::Relaxed);
    }
}
