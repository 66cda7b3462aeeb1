//! One sender's requests to one server on one long-lived gRPC stream (`Session`), and
//! their replies back on it, tagged with the requests' ids.
//!
//! A call per request, or per batch (`CallMany`), costs an HTTP/2 stream with its
//! headers and trailers, and a task on both sides. Under load that cost more CPU than
//! the protocol work it carried: a server's tokio workers spent half their time in
//! the per-call task alone. A session pays for that once.
//!
//! - **Sending.** A request is registered under a fresh id and pushed to the session's
//!   channel; what is queued when the stream is next written leaves in one message
//!   (bounded in requests and bytes). A server that stops reading holds at most
//!   [`QUEUED_BYTES_MAX`] of requests; beyond, a request gets no answer at once.
//! - **Answers.** The session's reader hands each reply to the request with its id. A
//!   request waits at most its timeout; one given up (or whose caller went away)
//!   forgets its id, so a late reply is dropped.
//! - **Ends.** When the stream ends or breaks (the server restarted, the connection
//!   dropped), or its reader's runtime stops, every request still waiting gets no
//!   answer at once, as on a call that failed, and the next request opens a new
//!   session. The protocol's timers already expect lost answers. A connection gone
//!   silent (a black hole) is dropped by the channel's keepalive pings
//!   (`Transport::channel`), which ends the session too.
//! - **Older servers.** A server that answers `Session` with "unimplemented" gets
//!   calls from then on ([`crate::call_queue`]); the requests of that first session get
//!   no answer.
//!
//! Invariant (*one answer per id*): a reply reaches the request that registered its id,
//! and only while that request waits; ids are never reused within a sender.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};
use megastore_types::limits::{BATCH_BYTES_TARGET, BATCH_REQUESTS_MAX};
use prost::Message as _;
use tokio::sync::{mpsc, oneshot};

use crate::call_queue::Batching;

/// A request on its way: its id, and its encoded size.
pub(crate) struct Queued<Q> {
    id: u64,
    request: Q,
    bytes: usize,
}

/// A session's requests as they leave: what is queued when the stream is written, in
/// one message of at most [`BATCH_REQUESTS_MAX`] requests and about
/// [`BATCH_BYTES_TARGET`] bytes, so that it stays far within the server's message limit.
/// It ends when every sender is gone (the `Sessions` and every request waiting), which
/// ends the server's side too.
pub(crate) struct Outgoing<Q> {
    queued: mpsc::UnboundedReceiver<Queued<Q>>,
    /// Bytes queued and not yet taken into a message (shared with the senders).
    queued_bytes: Arc<AtomicUsize>,
    /// A request taken that did not fit the last message: the next one's first.
    carried: Option<Queued<Q>>,
}

impl<Q> Outgoing<Q> {
    fn add_to(&mut self, queued: Queued<Q>, message: &mut Vec<(u64, Q)>, bytes: &mut usize) {
        self.queued_bytes.fetch_sub(queued.bytes, Ordering::Relaxed);
        *bytes += queued.bytes;
        message.push((queued.id, queued.request));
    }
}

impl<Q> Unpin for Outgoing<Q> {}

impl<Q> Stream for Outgoing<Q> {
    type Item = Vec<(u64, Q)>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let first = match self.carried.take() {
            Some(carried) => carried,
            None => match std::task::ready!(self.queued.poll_recv(cx)) {
                Some(first) => first,
                None => return Poll::Ready(None),
            },
        };
        let (mut message, mut bytes) = (Vec::new(), 0);
        self.add_to(first, &mut message, &mut bytes);
        while message.len() < BATCH_REQUESTS_MAX {
            let Ok(next) = self.queued.try_recv() else {
                break;
            };
            if bytes + next.bytes > BATCH_BYTES_TARGET {
                self.carried = Some(next);
                break;
            }
            self.add_to(next, &mut message, &mut bytes);
        }
        Poll::Ready(Some(message))
    }
}

/// A session's replies: each message's replies with their requests' ids.
pub(crate) type Replies<R> = BoxStream<'static, Result<Vec<(u64, Option<R>)>, tonic::Status>>;

/// The sessions to one server: the one open now, if any, and whether the server has
/// them at all.
pub(crate) struct Sessions<S: Batching> {
    client: S,
    open: Mutex<Option<Session<S>>>,
    next_id: AtomicU64,
    unsupported: Arc<AtomicBool>,
}

/// One open session.
struct Session<S: Batching> {
    outgoing: mpsc::UnboundedSender<Queued<S::Request>>,
    /// Bytes of requests queued and not yet written: bounded by [`QUEUED_BYTES_MAX`].
    queued_bytes: Arc<AtomicUsize>,
    waiting: Arc<Mutex<Waiting<S::Reply>>>,
}

impl<S: Batching> Clone for Session<S> {
    fn clone(&self) -> Self {
        Self {
            outgoing: self.outgoing.clone(),
            queued_bytes: Arc::clone(&self.queued_bytes),
            waiting: Arc::clone(&self.waiting),
        }
    }
}

/// The most bytes of requests a session holds before they are written. A server that
/// stopped reading (SIGSTOPped, or cut off without the connection breaking) would
/// otherwise have every request sent to it kept until it reads again; past this, a
/// request gets no answer at once, as on a call that could not be sent.
pub(crate) const QUEUED_BYTES_MAX: usize = 64 << 20;

/// The requests of a session that wait for their replies.
struct Waiting<R> {
    /// The stream ended: nothing registers any more.
    ended: bool,
    replies: HashMap<u64, oneshot::Sender<R>>,
}

impl<R> Waiting<R> {
    fn lock(waiting: &Mutex<Self>) -> std::sync::MutexGuard<'_, Self> {
        waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Marks its session ended when dropped: every request still waiting gets no answer.
struct Ended<R>(Arc<Mutex<Waiting<R>>>);

impl<R> Drop for Ended<R> {
    fn drop(&mut self) {
        let mut waiting = Waiting::lock(&self.0);
        waiting.ended = true;
        waiting.replies.clear();
    }
}

/// Forgets a request's id when its caller stops waiting, answered or not.
struct Forget<'a, R> {
    waiting: &'a Mutex<Waiting<R>>,
    id: u64,
}

impl<R> Drop for Forget<'_, R> {
    fn drop(&mut self) {
        Waiting::lock(self.waiting).replies.remove(&self.id);
    }
}

impl<S: Batching> Sessions<S> {
    pub(crate) fn new(client: S) -> Self {
        Self {
            client,
            open: Mutex::new(None),
            next_id: AtomicU64::new(0),
            unsupported: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether the server has sessions, as far as known (until it says otherwise).
    pub(crate) fn supported(&self) -> bool {
        !self.unsupported.load(Ordering::Relaxed)
    }

    /// Sends `request` on the open session (opening one if none is) and returns its
    /// reply, or `None` if none came within `timeout` or the session ended first.
    pub(crate) async fn request(&self, request: S::Request, timeout: Duration) -> Option<S::Reply> {
        let session = self.session()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        {
            let mut waiting = Waiting::lock(&session.waiting);
            if waiting.ended {
                return None;
            }
            let earlier = waiting.replies.insert(id, reply);
            assert!(
                earlier.is_none(),
                "one answer per id: id {id} registered twice"
            );
        }
        let _forget = Forget {
            waiting: &session.waiting,
            id,
        };
        let bytes = request.encoded_len();
        if session.queued_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes > QUEUED_BYTES_MAX {
            session.queued_bytes.fetch_sub(bytes, Ordering::Relaxed);
            return None;
        }
        session.outgoing.send(Queued { id, request, bytes }).ok()?;
        tokio::time::timeout(timeout, answer).await.ok()?.ok()
    }

    /// The open session, or a new one if none is open or the last one ended; `None`
    /// without a runtime to run its reader on.
    fn session(&self) -> Option<Session<S>> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(session) = open.as_ref()
            && !Waiting::lock(&session.waiting).ended
        {
            return Some(session.clone());
        }
        let session = self.start()?;
        *open = Some(session.clone());
        Some(session)
    }

    /// Opens a session: its stream of requests, and a task that reads its replies.
    fn start(&self) -> Option<Session<S>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (outgoing, queued) = mpsc::unbounded_channel();
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let waiting = Arc::new(Mutex::new(Waiting {
            ended: false,
            replies: HashMap::new(),
        }));
        let requests = Outgoing {
            queued,
            queued_bytes: Arc::clone(&queued_bytes),
            carried: None,
        };
        let client = self.client.clone();
        let unsupported = Arc::clone(&self.unsupported);
        let reader_waiting = Arc::clone(&waiting);
        runtime.spawn(async move {
            // However the reader ends — the stream over, or the task dropped with its
            // runtime — whoever still waits gets no answer now, not at its timeout, and
            // the next request opens a new session.
            let _ended = Ended(Arc::clone(&reader_waiting));
            match client.session(requests).await {
                Ok(mut replies) => {
                    while let Some(Ok(message)) = replies.next().await {
                        let mut waiting = Waiting::lock(&reader_waiting);
                        for (id, reply) in message {
                            // A request given up forgot its id: its late reply is dropped.
                            if let (Some(waiter), Some(reply)) =
                                (waiting.replies.remove(&id), reply)
                            {
                                let _ = waiter.send(reply);
                            }
                        }
                    }
                }
                Err(status) if status.code() == tonic::Code::Unimplemented => {
                    tracing::info!("a server does not take sessions; sending it calls");
                    unsupported.store(true, Ordering::Relaxed);
                }
                Err(status) => tracing::debug!("opening a session failed: {status}"),
            }
        });
        Some(Session {
            outgoing,
            queued_bytes,
            waiting,
        })
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
