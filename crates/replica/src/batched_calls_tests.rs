//! A session served by [`serve_session`] over real gRPC on loopback, against a core
//! that answers only when told: the server reads no more than
//! [`SESSION_IN_FLIGHT_MAX`] requests ahead of its answers, and reads on as they leave.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use megastore_paxos::{ReplicaReply, ReplicaRequest};
use megastore_rpc::pb::replication as pb;
use megastore_rpc::pb::replication::replication_client::ReplicationClient;
use megastore_rpc::pb::replication::replication_server::{Replication, ReplicationServer};
use megastore_types::EgId;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{BATCH_REQUESTS_MAX, Numbered, SESSION_IN_FLIGHT_MAX, serve_session};
use crate::replication_service::SESSION_WIRE;

/// The requests the stand-in core received, each with the sender of its answer.
type Received = Arc<Mutex<Vec<(u64, oneshot::Sender<ReplicaReply>)>>>;

/// A `Replication` service whose sessions hand every request to a core that only
/// collects them.
struct StandIn {
    received: Received,
    stop: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl Replication for StandIn {
    async fn call(
        &self,
        _request: Request<pb::ReplicaRequest>,
    ) -> Result<Response<pb::ReplicaReply>, Status> {
        Err(Status::unimplemented("sessions only"))
    }

    type CallManyStream = Numbered<pb::NumberedReply>;

    async fn call_many(
        &self,
        _request: Request<pb::ReplicaRequests>,
    ) -> Result<Response<Self::CallManyStream>, Status> {
        Err(Status::unimplemented("sessions only"))
    }

    type SessionStream = Numbered<pb::SessionReplies>;

    async fn session(
        &self,
        request: Request<tonic::Streaming<pb::SessionRequests>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let received = Arc::clone(&self.received);
        Ok(Response::new(serve_session(
            request.into_inner(),
            SESSION_WIRE,
            self.stop.clone(),
            |_| {},
            move |request: ReplicaRequest| {
                let (answer, receiver) = oneshot::channel();
                let id = request.id();
                received.lock().expect("not poisoned").push((id, answer));
                std::future::ready(Ok(receiver))
            },
        )))
    }

    async fn relay(
        &self,
        _request: Request<pb::RelayedCommit>,
    ) -> Result<Response<pb::RelayedOutcome>, Status> {
        Err(Status::unimplemented("sessions only"))
    }
}

/// Waits until the core has received `count` requests, and a moment more to see that
/// no more come; returns how many it has.
async fn settles_at(received: &Received, count: usize) -> usize {
    let started = Instant::now();
    while received.lock().expect("not poisoned").len() < count {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the core received {} of {count}",
            received.lock().expect("not poisoned").len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Reading further would take the server well under this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    received.lock().expect("not poisoned").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reads_no_further_than_its_bound_ahead_of_its_answers() {
    let received: Received = Arc::default();
    let (_stopping, stop) = watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    let service = StandIn {
        received: Arc::clone(&received),
        stop,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ReplicationServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut client = ReplicationClient::connect(format!("http://{address}"))
        .await
        .expect("connects");

    // Twice the bound, in full messages, sent as fast as the stream takes them.
    let messages = 2 * SESSION_IN_FLIGHT_MAX / BATCH_REQUESTS_MAX;
    let (sender, outgoing) = mpsc::channel(messages);
    for m in 0..messages {
        let requests = (0..BATCH_REQUESTS_MAX)
            .map(|i| {
                let id = (m * BATCH_REQUESTS_MAX + i) as u64;
                pb::SessionRequest {
                    id,
                    request: Some(
                        ReplicaRequest::LogState {
                            id,
                            eg: EgId(b"g".to_vec()),
                        }
                        .into(),
                    ),
                }
            })
            .collect();
        sender
            .send(pb::SessionRequests { requests })
            .await
            .expect("the channel holds every message");
    }
    let mut replies = client
        .session(ReceiverStream::new(outgoing))
        .await
        .expect("a session")
        .into_inner();

    assert_eq!(
        settles_at(&received, SESSION_IN_FLIGHT_MAX).await,
        SESSION_IN_FLIGHT_MAX,
        "the server stops reading at the bound"
    );

    // Answers leave: the server reads on, and every request is answered once.
    let mut answered = std::collections::BTreeSet::new();
    let started = Instant::now();
    while answered.len() < 2 * SESSION_IN_FLIGHT_MAX {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} of {} answered",
            answered.len(),
            2 * SESSION_IN_FLIGHT_MAX
        );
        let pending: Vec<_> = std::mem::take(&mut *received.lock().expect("not poisoned"));
        for (id, answer) in pending {
            let _ = answer.send(ReplicaReply::LogState {
                id,
                state: megastore_paxos::LogState::default(),
            });
        }
        // Replies to what was answered, or (none yet) a moment for the server to read
        // more, which the next turn answers.
        match tokio::time::timeout(Duration::from_millis(50), replies.next()).await {
            Ok(Some(Ok(batch))) => {
                for reply in batch.replies {
                    assert!(
                        answered.insert(reply.id),
                        "request {} answered twice",
                        reply.id
                    );
                }
            }
            Ok(ended) => panic!("the session ended: {ended:?}"),
            Err(_) => {}
        }
    }
    drop(sender);
}
