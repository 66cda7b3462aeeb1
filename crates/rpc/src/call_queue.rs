//! One sender's requests to one server (a replica or a coordinator): on its session
//! ([`crate::session`]) while the server has sessions, else in calls batched under load,
//! as follows.
//!
//! Each request used to be its own gRPC call: an HTTP/2 stream, a task and a wakeup on
//! both sides, which under load cost more CPU than the protocol work it carried.
//!
//! - **Idle.** A request that finds fewer than [`CALLS_IN_FLIGHT`] calls in flight
//!   and none queued leaves at once, alone (`Call`), from its caller's own task: no
//!   queue, no timer, no extra task.
//! - **Busy.** Any other request queues. When a call is answered, everything queued
//!   leaves together (`CallMany`, up to [`BATCH_REQUESTS_MAX`]
//!   requests or about [`BATCH_BYTES_TARGET`] bytes).
//! - **Slow.** If no call is answered within [`LINGER`] of the last one leaving, the
//!   first request in the queue sends the queue itself: across a WAN, or to a server
//!   that does not answer, a request waits at most that long for its turn. (Not
//!   bounded so: requests left queued behind a full batch, or behind a watching
//!   request whose caller gave up. They leave with the next answer or timeout.)
//!
//! Replies stream back one by one, so no request waits for another's reply.
//!
//! What this does not change: every request is still handled on its own and answered
//! on its own; a lost call loses its requests' answers, which the protocol's timers
//! already expect. A request is given up (no answer) once it has waited its timeout,
//! in the queue and on the wire together, as a lone call's was.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use megastore_types::limits::{BATCH_BYTES_TARGET, BATCH_REQUESTS_MAX};
use prost::Message as _;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::pb::coordinator as coordinator_pb;
use crate::pb::coordinator::CoordinatorRequests;
use crate::pb::coordinator::coordinator_client::CoordinatorClient;
use crate::pb::replication as replication_pb;
use crate::pb::replication::ReplicaRequests;
use crate::pb::replication::replication_client::ReplicationClient;
use crate::session::{Outgoing, Replies, Sessions};

/// The longest a call queue holds requests back while its last call is unanswered. On a
/// busy local network a call is answered within a few milliseconds (a WAL sync), and
/// what queued meanwhile leaves together; across a WAN, or to a server that does not
/// answer, a request waits at most this long for its turn.
pub(crate) const LINGER: Duration = Duration::from_millis(2);

/// Calls a queue lets leave at once, each from its caller's task; requests beyond them
/// queue. Two, not one: a lone client's next request to a replica often overlaps the
/// visibility mark of its last commit there, and should not wait for it.
pub(crate) const CALLS_IN_FLIGHT: usize = 2;

/// A gRPC service with a one-request `Call`, a batched, streamed `CallMany` and a
/// long-lived `Session`.
pub(crate) trait Batching: Clone + Send + Sync + 'static {
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

    /// Opens a session: each message of `requests` leaves as one message of
    /// numbered requests, and the replies come back as they are released.
    fn session(
        self,
        requests: Outgoing<Self::Request>,
    ) -> impl Future<Output = Result<Replies<Self::Reply>, tonic::Status>> + Send;
}

/// `Batching` for a generated client whose service has `Call(request) → reply` and
/// `CallMany(requests) → stream of numbered replies`.
macro_rules! batching_for {
    ($client:ident, $pb:ident, $request:ty, $reply:ty, $requests:ident) => {
        impl Batching for $client<Channel> {
            type Request = $request;
            type Reply = $reply;

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
                let mut call = tonic::Request::new($requests { requests });
                call.set_timeout(timeout);
                let mut stream = $client::call_many(&mut self, call).await?.into_inner();
                while let Some(numbered) = stream.message().await? {
                    deliver(numbered.index, numbered.reply);
                }
                Ok(())
            }

            async fn session(
                mut self,
                requests: Outgoing<Self::Request>,
            ) -> Result<Replies<Self::Reply>, tonic::Status> {
                fn to_wire(message: Vec<(u64, $request)>) -> $pb::SessionRequests {
                    $pb::SessionRequests {
                        requests: message
                            .into_iter()
                            .map(|(id, request)| $pb::SessionRequest {
                                id,
                                request: Some(request),
                            })
                            .collect(),
                    }
                }
                fn from_wire(
                    message: Result<$pb::SessionReplies, tonic::Status>,
                ) -> Result<Vec<(u64, Option<$reply>)>, tonic::Status> {
                    message.map(|m| m.replies.into_iter().map(|r| (r.id, r.reply)).collect())
                }
                let replies = $client::session(&mut self, requests.map(to_wire))
                    .await?
                    .into_inner();
                Ok(replies.map(from_wire).boxed())
            }
        }
    };
}

batching_for!(
    ReplicationClient,
    replication_pb,
    replication_pb::ReplicaRequest,
    replication_pb::ReplicaReply,
    ReplicaRequests
);
batching_for!(
    CoordinatorClient,
    coordinator_pb,
    coordinator_pb::CoordinatorRequest,
    coordinator_pb::CoordinatorReply,
    CoordinatorRequests
);

/// A request waiting for its turn.
struct Queued<S: Batching> {
    request: S::Request,
    bytes: usize,
    deadline: Instant,
    /// The caller's whole timeout, for the call's `grpc-timeout` header.
    timeout: Duration,
    reply: oneshot::Sender<S::Reply>,
}

/// The calls in flight, and who waits.
struct State<S: Batching> {
    /// Calls sent and not yet answered (or given up).
    in_flight: usize,
    /// When the last call left.
    last_sent: Instant,
    queue: VecDeque<Queued<S>>,
}

struct Shared<S: Batching> {
    client: S,
    /// The long-lived stream requests take while the server has it.
    sessions: Sessions<S>,
    state: Mutex<State<S>>,
    /// The server answered `CallMany` with "unimplemented" (an older version): every
    /// request goes alone from then on.
    singles_only: AtomicBool,
}

/// The batching queue in front of one server's connection.
pub(crate) struct CallQueue<S: Batching> {
    shared: Arc<Shared<S>>,
}

impl<S: Batching> CallQueue<S> {
    pub(crate) fn new(client: S) -> Self {
        Self {
            shared: Arc::new(Shared {
                sessions: Sessions::new(client.clone()),
                client,
                state: Mutex::new(State {
                    in_flight: 0,
                    last_sent: Instant::now(),
                    queue: VecDeque::new(),
                }),
                singles_only: AtomicBool::new(false),
            }),
        }
    }

    /// The connection itself, for a call that is not the queue's kind.
    pub(crate) fn connection(&self) -> S {
        self.shared.client.clone()
    }

    /// Sends `request` alone, outside the queue and its count of calls in flight, and
    /// returns the reply, or `None` if none came within `timeout`: for a request the
    /// server holds (a watcher's long poll), which would otherwise keep one of the
    /// calls' turns for its whole wait.
    pub(crate) async fn request_alone(
        &self,
        request: S::Request,
        timeout: Duration,
    ) -> Option<S::Reply> {
        let deadline = Instant::now() + timeout;
        call_one(self.shared.client.clone(), request, deadline, timeout).await
    }

    /// Sends `request` (on the session, while the server has sessions) and returns the
    /// server's reply, or `None` if none came within `timeout`.
    pub(crate) async fn request(&self, request: S::Request, timeout: Duration) -> Option<S::Reply> {
        if self.shared.sessions.supported() {
            return self.shared.sessions.request(request, timeout).await;
        }
        // Boxed: a gRPC call's future is kilobytes, and inline it would make every
        // request's future as large, sessions' included (each is boxed and moved once
        // per request: `Peers::request`).
        Box::pin(self.request_by_calls(request, timeout)).await
    }

    /// [`CallQueue::request`] to a server without sessions: alone or batched, as the
    /// module doc says.
    async fn request_by_calls(&self, request: S::Request, timeout: Duration) -> Option<S::Reply> {
        let deadline = Instant::now() + timeout;
        let (reply, mut answer) = oneshot::channel();
        let queued = {
            let mut state = self.shared.lock();
            if state.in_flight < CALLS_IN_FLIGHT && state.queue.is_empty() {
                state.in_flight += 1;
                state.last_sent = Instant::now();
                Err(request)
            } else {
                state.queue.push_back(Queued {
                    bytes: request.encoded_len(),
                    request,
                    deadline,
                    timeout,
                    reply,
                });
                // The first request to queue watches the linger for everyone behind it.
                Ok(state.queue.len() == 1)
            }
        };
        let guards_the_queue = match queued {
            Ok(first) => first,
            Err(request) => {
                // Few calls in flight and none queued: this request leaves now, alone,
                // from the caller's own task (no queue, no timer, no task).
                let _answered = Answered(Arc::clone(&self.shared));
                return call_one(self.shared.client.clone(), request, deadline, timeout).await;
            }
        };
        if !guards_the_queue {
            return answer.await.ok();
        }
        loop {
            let wake = self.shared.lock().last_sent + LINGER;
            tokio::select! {
                answered = &mut answer => return answered.ok(),
                () = tokio::time::sleep_until(wake) => {
                    let lingered = {
                        let mut state = self.shared.lock();
                        if state.queue.is_empty() {
                            None
                        } else if Instant::now() >= state.last_sent + LINGER {
                            state.take_batch()
                        } else {
                            // Another call left meanwhile: linger from it.
                            continue;
                        }
                    };
                    match lingered {
                        Some(batch) => self.shared.send(batch),
                        // Everything queued has left: only the answer is left to wait.
                        None => return answer.await.ok(),
                    }
                }
            }
        }
    }
}

impl<S: Batching> State<S> {
    /// Takes the next batch from the queue (counting it as a call in flight), or
    /// `None` if nothing queued is still awaited.
    fn take_batch(&mut self) -> Option<Vec<Queued<S>>> {
        let now = Instant::now();
        let mut batch = Vec::new();
        let mut bytes = 0;
        while batch.len() < BATCH_REQUESTS_MAX && bytes < BATCH_BYTES_TARGET {
            let Some(queued) = self.queue.pop_front() else {
                break;
            };
            // Dropping a request whose caller stopped waiting answers it with nothing.
            if queued.deadline > now && !queued.reply.is_closed() {
                bytes += queued.bytes;
                batch.push(queued);
            }
        }
        if batch.is_empty() {
            return None;
        }
        self.in_flight += 1;
        self.last_sent = now;
        Some(batch)
    }
}

impl<S: Batching> Shared<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<S>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A call ended: what queued behind it leaves now.
    fn answered(self: &Arc<Self>) {
        let batch = {
            let mut state = self.lock();
            state.in_flight -= 1;
            state.take_batch()
        };
        if let Some(batch) = batch {
            self.send(batch);
        }
    }

    /// Sends `batch` (counted in flight already) from a task of its own.
    fn send(self: &Arc<Self>, batch: Vec<Queued<S>>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send from (a drop outside one): the batch gets no answers.
            self.lock().in_flight -= 1;
            return;
        };
        let shared = Arc::clone(self);
        runtime.spawn(async move {
            let _answered = Answered(Arc::clone(&shared));
            let client = shared.client.clone();
            if batch.len() == 1 || shared.singles_only.load(Ordering::Relaxed) {
                futures::future::join_all(batch.into_iter().map(|q| send_one(client.clone(), q)))
                    .await;
            } else {
                send_many(client, batch, &shared.singles_only).await;
            }
        });
    }
}

/// Held by whoever waits for a call: its end (answered, given up, or the caller gone)
/// lets the queue move.
struct Answered<S: Batching>(Arc<Shared<S>>);

impl<S: Batching> Drop for Answered<S> {
    fn drop(&mut self) {
        self.0.answered();
    }
}

/// One request in one call, answered by its deadline or not at all. The
/// `grpc-timeout` header carries the caller's whole `timeout`, not what is left of
/// it: a header that is the same on every call stays in HTTP/2's header table, while
/// one that changes is encoded and decoded anew each time.
async fn call_one<S: Batching>(
    client: S,
    request: S::Request,
    deadline: Instant,
    timeout: Duration,
) -> Option<S::Reply> {
    let mut call = tonic::Request::new(request);
    call.set_timeout(timeout);
    let left = deadline.saturating_duration_since(Instant::now());
    tokio::time::timeout(left, client.call_one(call))
        .await
        .ok()?
        .ok()
}

async fn send_one<S: Batching>(client: S, queued: Queued<S>) {
    if let Some(reply) = call_one(client, queued.request, queued.deadline, queued.timeout).await {
        let _ = queued.reply.send(reply);
    }
}

async fn send_many<S: Batching>(client: S, batch: Vec<Queued<S>>, singles_only: &AtomicBool) {
    let deadline = batch
        .iter()
        .map(|q| q.deadline)
        .min()
        .expect("a batch holds a request");
    let timeout = batch
        .iter()
        .map(|q| q.timeout)
        .min()
        .expect("a batch holds a request");
    let left = deadline.saturating_duration_since(Instant::now());
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
    let streamed = tokio::time::timeout(left, client.call_many(requests, timeout, deliver)).await;
    if let Ok(Err(status)) = streamed
        && status.code() == tonic::Code::Unimplemented
    {
        // An older server: from now on each request goes alone. This batch's go
        // unanswered, like the requests of any lost call.
        tracing::info!("a server does not take batched calls; sending requests one by one");
        singles_only.store(true, Ordering::Relaxed);
    }
}
