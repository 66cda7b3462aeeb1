//! What the `CallMany` RPCs of the replica and the coordinator share: a batch is
//! checked and decoded whole before any of it reaches a core, and each answer streams
//! back numbered by its request's place, as soon as it comes.

use std::pin::Pin;

use futures::stream::{FuturesUnordered, Stream, StreamExt};
use megastore_types::limits::BATCH_REQUESTS_MAX;
use tokio::sync::oneshot;
use tonic::Status;

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
