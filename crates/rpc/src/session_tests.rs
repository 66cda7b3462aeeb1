//! Sessions against a real gRPC server on loopback: a stand-in `Replication` service
//! that echoes each request's id, and is told by ids what else to do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::call_queue::CallQueue;
use crate::pb::replication as pb;
use crate::pb::replication::replication_client::ReplicationClient;
use crate::pb::replication::replication_server::{Replication, ReplicationServer};
use crate::session::QUEUED_BYTES_MAX;
use crate::transport::Transport;

/// A request with this id is never answered.
const HELD: u64 = 777;
/// A request with this id ends its session with an error, unanswered.
const END_SESSION: u64 = 666;

#[derive(Clone, Default)]
struct Counts {
    calls: Arc<AtomicUsize>,
    sessions: Arc<AtomicUsize>,
    /// Requests with id [`HELD`] received (and left unanswered).
    held: Arc<AtomicUsize>,
}

struct StandIn {
    sessions: bool,
    /// Sessions are opened but never read (a server that stopped reading).
    deaf: bool,
    counts: Counts,
}

fn echo(request: &pb::ReplicaRequest) -> pb::ReplicaReply {
    pb::ReplicaReply {
        id: request.id,
        ..Default::default()
    }
}

type Boxed<T> = std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Replication for StandIn {
    async fn call(
        &self,
        request: Request<pb::ReplicaRequest>,
    ) -> Result<Response<pb::ReplicaReply>, Status> {
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(echo(request.get_ref())))
    }

    type CallManyStream = Boxed<pb::NumberedReply>;

    async fn call_many(
        &self,
        request: Request<pb::ReplicaRequests>,
    ) -> Result<Response<Self::CallManyStream>, Status> {
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        let replies: Vec<_> = request
            .into_inner()
            .requests
            .iter()
            .enumerate()
            .map(|(index, request)| {
                Ok(pb::NumberedReply {
                    index: u32::try_from(index).unwrap(),
                    reply: Some(echo(request)),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(replies))))
    }

    type SessionStream = Boxed<pb::SessionReplies>;

    async fn session(
        &self,
        request: Request<tonic::Streaming<pb::SessionRequests>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        if !self.sessions {
            return Err(Status::unimplemented("no sessions here"));
        }
        self.counts.sessions.fetch_add(1, Ordering::Relaxed);
        let mut incoming = request.into_inner();
        let held = Arc::clone(&self.counts.held);
        if self.deaf {
            let never = futures::stream::pending();
            tokio::spawn(async move {
                // Holds the session open, unread, for as long as the server runs.
                std::future::pending::<()>().await;
                drop(incoming);
            });
            return Ok(Response::new(Box::pin(never)));
        }
        let (replies, outgoing) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(message)) = incoming.message().await {
                let mut answered = Vec::new();
                for numbered in message.requests {
                    let request = numbered.request.unwrap();
                    match request.id {
                        HELD => {
                            held.fetch_add(1, Ordering::Relaxed);
                        }
                        END_SESSION => {
                            let _ = replies.send(Err(Status::aborted("ended on purpose")));
                            return;
                        }
                        _ => answered.push(pb::SessionReply {
                            id: numbered.id,
                            reply: Some(echo(&request)),
                        }),
                    }
                }
                let _ = replies.send(Ok(pb::SessionReplies { replies: answered }));
            }
        });
        let outgoing = futures::stream::unfold(outgoing, |mut outgoing| async move {
            outgoing.recv().await.map(|reply| (reply, outgoing))
        });
        Ok(Response::new(Box::pin(outgoing)))
    }

    async fn relay(
        &self,
        _request: Request<pb::RelayedCommit>,
    ) -> Result<Response<pb::RelayedOutcome>, Status> {
        Err(Status::unimplemented("not here"))
    }
}

/// Serves a stand-in on a free loopback port; returns its call queue and counts.
async fn serve(sessions: bool) -> (CallQueue<ReplicationClient<Channel>>, Counts) {
    serve_as(sessions, false).await
}

async fn serve_as(sessions: bool, deaf: bool) -> (CallQueue<ReplicationClient<Channel>>, Counts) {
    let (address, counts) = stand_in(sessions, deaf).await;
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_lazy();
    (CallQueue::new(ReplicationClient::new(channel)), counts)
}

/// Starts a stand-in server; its address.
async fn stand_in(sessions: bool, deaf: bool) -> (SocketAddr, Counts) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let counts = Counts::default();
    let service = ReplicationServer::new(StandIn {
        sessions,
        deaf,
        counts: counts.clone(),
    });
    tokio::spawn(
        Transport::plain()
            .server()
            .unwrap()
            .add_service(service)
            .serve_with_incoming(Transport::incoming(listener)),
    );
    (address, counts)
}

fn request(id: u64) -> pb::ReplicaRequest {
    pb::ReplicaRequest {
        id,
        ..Default::default()
    }
}

/// Sends requests `ids` at once; the ids of the replies, in the requests' order.
async fn ask(
    queue: &CallQueue<ReplicationClient<Channel>>,
    ids: std::ops::Range<u64>,
) -> Vec<Option<u64>> {
    let asks = ids.map(|id| async move {
        queue
            .request(request(id), Duration::from_secs(5))
            .await
            .map(|reply| reply.id)
    });
    futures::future::join_all(asks).await
}

#[tokio::test]
async fn concurrent_requests_share_one_session_and_each_gets_its_own_reply() {
    let (queue, counts) = serve(true).await;
    let replies = ask(&queue, 0..300).await;
    assert_eq!(replies, (0..300).map(Some).collect::<Vec<_>>());
    let more = ask(&queue, 300..310).await;
    assert_eq!(more, (300..310).map(Some).collect::<Vec<_>>());
    assert_eq!(counts.sessions.load(Ordering::Relaxed), 1);
    assert_eq!(counts.calls.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_server_without_sessions_gets_calls() {
    let (queue, counts) = serve(false).await;
    // The first request learns that there are no sessions (and gets no answer).
    let _ = queue.request(request(1), Duration::from_secs(5)).await;
    let started = Instant::now();
    loop {
        let reply = queue.request(request(2), Duration::from_secs(5)).await;
        if reply.is_some_and(|r| r.id == 2) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no answer by calls"
        );
    }
    assert_eq!(
        ask(&queue, 10..110).await,
        (10..110).map(Some).collect::<Vec<_>>()
    );
    assert!(counts.calls.load(Ordering::Relaxed) >= 2);
    assert_eq!(counts.sessions.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn an_ended_session_answers_nothing_at_once_and_the_next_request_opens_another() {
    let (queue, counts) = serve(true).await;
    assert_eq!(ask(&queue, 0..3).await, vec![Some(0), Some(1), Some(2)]);
    let queue = Arc::new(queue);
    let held = {
        let queue = Arc::clone(&queue);
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = queue.request(request(HELD), Duration::from_secs(30)).await;
            (reply, started.elapsed())
        })
    };
    // The held request reaches the server before the session ends.
    let started = Instant::now();
    while counts.held.load(Ordering::Relaxed) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the held request never arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        queue
            .request(request(END_SESSION), Duration::from_secs(30))
            .await,
        None
    );
    let (reply, waited) = held.await.unwrap();
    assert_eq!(reply, None);
    assert!(
        waited < Duration::from_secs(5),
        "a request of an ended session waited {waited:?}"
    );
    assert_eq!(
        ask(&queue, 10..13).await,
        vec![Some(10), Some(11), Some(12)]
    );
    assert_eq!(counts.sessions.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_request_given_up_is_forgotten_and_its_session_goes_on() {
    let (queue, _counts) = serve(true).await;
    assert_eq!(
        queue
            .request(request(HELD), Duration::from_millis(100))
            .await,
        None
    );
    assert_eq!(
        ask(&queue, 0..5).await,
        (0..5).map(Some).collect::<Vec<_>>()
    );
}

/// A request of about `bytes` bytes.
fn large(id: u64, bytes: usize) -> pb::ReplicaRequest {
    pb::ReplicaRequest {
        id,
        eg: vec![7; bytes],
        ..Default::default()
    }
}

#[tokio::test]
async fn large_requests_queued_together_leave_in_messages_the_server_takes() {
    // The stand-in takes messages of at most tonic's default 4 MiB: twelve requests of
    // 1 MiB sent at once fit only if they leave in several messages.
    let (queue, _counts) = serve(true).await;
    let asks = (0..12).map(|id| {
        let queue = &queue;
        async move {
            queue
                .request(large(id, 1 << 20), Duration::from_secs(10))
                .await
                .map(|reply| reply.id)
        }
    });
    let replies = futures::future::join_all(asks).await;
    assert_eq!(replies, (0..12).map(Some).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_server_that_stops_reading_holds_a_bounded_queue() {
    let (queue, _counts) = serve_as(true, true).await;
    let queue = Arc::new(queue);
    // More than the queue holds, each waiting long: the requests beyond the bound get
    // no answer at once.
    let count = QUEUED_BYTES_MAX / (1 << 20) + 32;
    let waiting: Vec<_> = (0..count)
        .map(|id| {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                let id = u64::try_from(id).unwrap();
                let _ = queue
                    .request(large(id, 1 << 20), Duration::from_secs(600))
                    .await;
            })
        })
        .collect();
    let started = Instant::now();
    loop {
        let refused = queue.request(large(0, 1 << 20), Duration::from_secs(600));
        if tokio::time::timeout(Duration::from_millis(200), refused)
            .await
            .is_ok_and(|reply| reply.is_none())
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "requests to a server that stopped reading kept queuing"
        );
    }
    for task in waiting {
        task.abort();
    }
}

#[test]
fn a_session_whose_runtime_stopped_is_replaced_in_the_next() {
    // The stand-in and the connection live on `server`; the session's reader on the
    // runtime of the request that opened it.
    let server = tokio::runtime::Runtime::new().unwrap();
    let (queue, counts) = server.block_on(serve(true));
    let opener = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(
        opener.block_on(ask(&queue, 0..3)),
        vec![Some(0), Some(1), Some(2)]
    );
    drop(opener);
    let later = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    assert_eq!(
        later.block_on(ask(&queue, 3..6)),
        vec![Some(3), Some(4), Some(5)]
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "requests waited for a session whose reader was gone: {:?}",
        started.elapsed()
    );
    assert_eq!(counts.sessions.load(Ordering::Relaxed), 2);
}

/// A TCP proxy on loopback that can black-hole the connections it holds: from then on
/// they take in every byte and deliver none, and stay open — as a partition that drops
/// packets does, so no side learns of it from TCP. Connections made later pass.
struct BlackHole {
    address: SocketAddr,
    /// Connections made before the last black-holing (of an older generation) pass
    /// nothing.
    generation: Arc<AtomicU64>,
}

impl BlackHole {
    async fn to(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let generation = Arc::new(AtomicU64::new(0));
        let current = Arc::clone(&generation);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                    continue;
                };
                let born = current.load(Ordering::SeqCst);
                let (in_read, in_write) = inbound.into_split();
                let (out_read, out_write) = outbound.into_split();
                tokio::spawn(Self::pipe(in_read, out_write, Arc::clone(&current), born));
                tokio::spawn(Self::pipe(out_read, in_write, Arc::clone(&current), born));
            }
        });
        Self {
            address,
            generation,
        }
    }

    async fn pipe(
        mut from: OwnedReadHalf,
        mut to: OwnedWriteHalf,
        generation: Arc<AtomicU64>,
        born: u64,
    ) {
        let mut buffer = vec![0; 16 << 10];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            if generation.load(Ordering::SeqCst) == born
                && to.write_all(&buffer[..read]).await.is_err()
            {
                return;
            }
        }
    }

    /// Every connection held now passes nothing from now on.
    fn swallow_open_connections(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// A session whose connection goes silent (a black hole) is dropped by the channel's
/// keepalive pings, and the next request reaches the server on a new connection.
/// Without the pings the session would write into the dead connection until TCP gave
/// up, minutes later.
#[tokio::test]
async fn a_session_on_a_black_holed_connection_is_dropped_and_the_next_reaches_the_server() {
    let (server, counts) = stand_in(true, false).await;
    let proxy = BlackHole::to(server).await;
    let channel = Transport::plain()
        .channel(&proxy.address.to_string(), Duration::from_millis(200))
        .unwrap();
    let queue = CallQueue::new(ReplicationClient::new(channel));
    assert_eq!(ask(&queue, 0..3).await, vec![Some(0), Some(1), Some(2)]);
    proxy.swallow_open_connections();
    let started = Instant::now();
    let mut id = 10;
    loop {
        let reply = queue.request(request(id), Duration::from_millis(300)).await;
        if reply.is_some_and(|r| r.id == id) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no answer within 10 s of the black hole: the dead connection was kept"
        );
        id += 1;
    }
    assert!(
        id > 10,
        "the first request after the black hole was answered"
    );
    assert_eq!(counts.sessions.load(Ordering::Relaxed), 2);
}
