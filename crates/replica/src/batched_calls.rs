//! What the `CallMany` RPCs of the replica and the coordinator share: a batch is
//! checked and decoded whole before any of it reaches a core, and each answer streams
//! back numbered by its request's place, as soon as it comes — and how a `Session` is
//! served: the same requests on one long-lived stream, their replies tagged by id.

use std::pin::Pin;

use futures::FutureExt;
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use megastore_types::limits::{BATCH_BYTES_TARGET, BATCH_REQUESTS_MAX};
use tokio::sync::{oneshot, watch};
use tonic::Status;

/// The most requests of one session in flight at its server (handed to the core and
/// not yet answered). At the bound the server stops reading the session's stream until
/// answers leave, so a sender that outruns the core is held back by HTTP/2's flow
/// control (its own queue then refuses requests at once, `QUEUED_BYTES_MAX` in
/// `megastore_rpc::session`) instead of filling the driver's queue without end. Far
/// above what a closed-loop client keeps in flight: 1,024 tasks sharing one client
/// keep a few thousand. Invariant *session-in-flight-bounded*.
pub(crate) const SESSION_IN_FLIGHT_MAX: usize = 64 * BATCH_REQUESTS_MAX;

/// The stream a `CallMany` answers with.
pub(crate) type Numbered<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Every request of a batch, decoded — or the whole batch refused, naming the first
/// malformed request (or the count, past [`BATCH_REQUESTS_MAX`]), so no answer is
/// left without its call.
pub(crate) fn decode_batch<W, R, E: std::fmt::Display>(
    requests: Vec<W>,
    decode: impl Fn(W) -> Result<R, E>,
) -> Result<Vec<R>, Status> {
    if requests.len() > BATCH_REQUESTS_MAX {
        return Err(Status::invalid_argument(format!(
            "a batch of {} requests: at most {BATCH_REQUESTS_MAX}",
            requests.len()
        )));
    }
    requests
        .into_iter()
        .enumerate()
        .map(|(index, request)| {
            decode(request).map_err(|e| Status::invalid_argument(format!("request {index}: {e}")))
        })
        .collect()
}

/// Streams each answer, as it comes, as `number(index, answer)`; an answer that never
/// comes (the server stopping) ends the stream with `UNAVAILABLE: {stopping}`.
pub(crate) fn stream_numbered<A: Send + 'static, T: Send + 'static>(
    answers: Vec<oneshot::Receiver<A>>,
    number: impl Fn(u32, A) -> T + Send + 'static,
    stopping: &'static str,
) -> Numbered<T> {
    let waiting: FuturesUnordered<_> = answers
        .into_iter()
        .enumerate()
        .map(|(index, answer)| async move {
            let index = u32::try_from(index).expect("at most BATCH_REQUESTS_MAX requests");
            (index, answer.await)
        })
        .collect();
    Box::pin(waiting.map(move |(index, answer)| match answer {
        Ok(answer) => Ok(number(index, answer)),
        Err(_) => Err(Status::unavailable(stopping)),
    }))
}

/// A session message's requests, each with its id, decoded (or why it is not).
pub(crate) type Unpacked<R> = Vec<(u64, Result<R, String>)>;

/// Decodes a session message's requests (`None`: a request left out).
pub(crate) fn unpack_each<W, R, E: std::fmt::Display>(
    requests: impl Iterator<Item = (u64, Option<W>)>,
    decode: impl Fn(W) -> Result<R, E>,
) -> Unpacked<R> {
    requests
        .map(|(id, request)| {
            let request = request
                .ok_or_else(|| "no request".to_string())
                .and_then(|r| decode(r).map_err(|e| e.to_string()));
            (id, request)
        })
        .collect()
}

/// What a `Session` RPC needs of its service's messages.
pub(crate) struct SessionWire<In, R, A, Item, Out> {
    /// A message's requests, each with its id, decoded (or why it is not).
    pub(crate) unpack: fn(In) -> Unpacked<R>,
    /// A reply on the wire, tagged with its request's id.
    pub(crate) tag: fn(u64, A) -> Item,
    /// Replies ready together, as one message.
    pub(crate) pack: fn(Vec<Item>) -> Out,
    /// The status a session ends with when its server stops answering.
    pub(crate) stopping: &'static str,
}

/// The state of one session being served.
struct Serving<In, Sub, W, R, A, Item, Out> {
    /// `None` once the sender closed its side (or it broke): what is in flight is
    /// still answered, then the session ends.
    incoming: Option<tonic::Streaming<In>>,
    submit: Sub,
    waiting: FuturesUnordered<W>,
    wire: SessionWire<In, R, A, Item, Out>,
    observe: Box<dyn Fn(usize) + Send>,
    /// A reply that did not fit the last message: the next one's first.
    carried: Option<Item>,
    /// Set when the server stops: its graceful shutdown waits for every call to end,
    /// and a session would never end by itself.
    stop: watch::Receiver<bool>,
}

impl<In, Sub, W, R, A, Item, Out> Serving<In, Sub, W, R, A, Item, Out> {
    /// `first` and every other reply ready now, up to about [`BATCH_BYTES_TARGET`]
    /// bytes (what does not fit is carried to the next message) — or the session's end
    /// if the core stopped answering.
    fn ready_message(&mut self, first: Item) -> Result<Out, Status>
    where
        Item: prost::Message,
        W: std::future::Future<Output = (u64, Result<A, oneshot::error::RecvError>)>,
    {
        let mut bytes = first.encoded_len();
        let mut ready = vec![first];
        while ready.len() < BATCH_REQUESTS_MAX && bytes < BATCH_BYTES_TARGET {
            let Some(Some((id, answer))) = self.waiting.next().now_or_never() else {
                break;
            };
            let Ok(answer) = answer else {
                self.incoming = None;
                self.waiting = FuturesUnordered::new();
                return Err(Status::unavailable(self.wire.stopping));
            };
            let reply = (self.wire.tag)(id, answer);
            if bytes + reply.encoded_len() > BATCH_BYTES_TARGET {
                self.carried = Some(reply);
                break;
            }
            bytes += reply.encoded_len();
            ready.push(reply);
        }
        Ok((self.wire.pack)(ready))
    }

    /// Ends the session after the item being returned.
    fn ended(mut self) -> Self {
        self.incoming = None;
        self.waiting = FuturesUnordered::new();
        self
    }
}

/// Serves one `Session`: every request of `incoming` goes to `submit` in the order it
/// came, and the replies stream back tagged with their requests' ids as the core
/// releases them — what is ready together in one message of at most about
/// [`BATCH_BYTES_TARGET`] bytes (a large reply goes alone, as on `CallMany`). A
/// message with a malformed request, or of more than [`BATCH_REQUESTS_MAX`], reaches
/// no core: it ends the session with `INVALID_ARGUMENT` naming the request (the
/// session's requests in flight get no answer, as on any broken call). With
/// [`SESSION_IN_FLIGHT_MAX`] requests in flight, the next message is read only once
/// answers have left. `observe` is told each message's number of requests. The session
/// ends at once when `stop` turns true (the server stopping), answered or not.
pub(crate) fn serve_session<In, R, A, Item, Out, Sub, Fut>(
    incoming: tonic::Streaming<In>,
    wire: SessionWire<In, R, A, Item, Out>,
    stop: watch::Receiver<bool>,
    observe: impl Fn(usize) + Send + 'static,
    submit: Sub,
) -> Numbered<Out>
where
    In: Send + 'static,
    R: Send + 'static,
    A: Send + 'static,
    Item: prost::Message + Send + 'static,
    Out: Send + 'static,
    Sub: FnMut(R) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<oneshot::Receiver<A>, Status>> + Send,
{
    let serving = Serving {
        incoming: Some(incoming),
        submit,
        waiting: FuturesUnordered::new(),
        wire,
        observe: Box::new(observe),
        carried: None,
        stop,
    };
    Box::pin(futures::stream::unfold(serving, |mut serving| async move {
        loop {
            if let Some(carried) = serving.carried.take() {
                let message = serving.ready_message(carried);
                return Some((message, serving));
            }
            if serving.incoming.is_none() && serving.waiting.is_empty() {
                return None;
            }
            tokio::select! {
                biased;
                () = stopping(&mut serving.stop) => return None,
                Some((id, answer)) = serving.waiting.next(), if !serving.waiting.is_empty() => {
                    let Ok(answer) = answer else {
                        let stopping = Status::unavailable(serving.wire.stopping);
                        return Some((Err(stopping), serving.ended()));
                    };
                    let first = (serving.wire.tag)(id, answer);
                    let message = serving.ready_message(first);
                    return Some((message, serving));
                }
                // A message holds at most BATCH_REQUESTS_MAX requests (else it ends
                // the session), so reading one only below this keeps the bound.
                message = next_message(&mut serving.incoming), if serving.incoming.is_some()
                    && serving.waiting.len() + BATCH_REQUESTS_MAX <= SESSION_IN_FLIGHT_MAX => {
                    let Some(message) = message else {
                        // The sender closed its side, or it broke: answer what is in
                        // flight (nobody may read it), then end.
                        serving.incoming = None;
                        continue;
                    };
                    let requests = (serving.wire.unpack)(message);
                    if requests.len() > BATCH_REQUESTS_MAX {
                        let status = Status::invalid_argument(format!(
                            "a session message of {} requests: at most {BATCH_REQUESTS_MAX}",
                            requests.len()
                        ));
                        return Some((Err(status), serving.ended()));
                    }
                    // Checked whole before any of it reaches the core, as a batch is.
                    let decoded: Result<Vec<_>, Status> = requests
                        .into_iter()
                        .map(|(id, request)| {
                            request.map(|request| (id, request)).map_err(|e| {
                                Status::invalid_argument(format!("request {id}: {e}"))
                            })
                        })
                        .collect();
                    let requests = match decoded {
                        Ok(requests) => requests,
                        Err(status) => return Some((Err(status), serving.ended())),
                    };
                    (serving.observe)(requests.len());
                    for (id, request) in requests {
                        match (serving.submit)(request).await {
                            Ok(answer) => serving.waiting.push(tagged(id, answer)),
                            Err(status) => return Some((Err(status), serving.ended())),
                        }
                    }
                    assert!(
                        serving.waiting.len() <= SESSION_IN_FLIGHT_MAX,
                        "session-in-flight-bounded: {} in flight",
                        serving.waiting.len()
                    );
                }
            }
        }
    }))
}

/// Returns once `stop` turns true (or its sender is gone).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// The next message of a session's sender; `None` once it closed its side or broke.
async fn next_message<In>(incoming: &mut Option<tonic::Streaming<In>>) -> Option<In> {
    incoming.as_mut()?.message().await.ok().flatten()
}

/// An answer, tagged with its request's id.
async fn tagged<A>(
    id: u64,
    answer: oneshot::Receiver<A>,
) -> (u64, Result<A, oneshot::error::RecvError>) {
    (id, answer.await)
}

#[cfg(test)]
#[path = "batched_calls_tests.rs"]
mod tests;
