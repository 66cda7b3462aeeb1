//! Batched requests to replicas and coordinators (`Session`, and `CallMany` for
//! servers without sessions), against real processes: a sender's concurrent requests
//! share messages, each still gets its own reply, a stopped replica costs its requests
//! their answers but not the session, malformed batches are refused whole and a
//! malformed request ends its session, naming it.

use std::time::{Duration, Instant};

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_e2e::{metric_value, scrape_metrics};
use megastore_paxos::{Message, ReplicaReply, ReplicaRequest};
use megastore_rpc::Peers;
use megastore_rpc::pb::coordinator as coordinator_pb;
use megastore_rpc::pb::coordinator::coordinator_client::CoordinatorClient;
use megastore_rpc::pb::replication as pb;
use megastore_rpc::pb::replication::replication_client::ReplicationClient;
use megastore_types::{NodeId, ReplicaId};

use crate::support::{connect, start_cluster};

/// How many requests and calls replica `metrics` has received so far.
fn calls_and_requests(metrics: &str) -> (f64, f64) {
    let text = scrape_metrics(metrics);
    let value = |sample| metric_value(&text, sample).unwrap_or(0.0);
    (
        value("megastore_replica_call_requests_count"),
        value("megastore_replica_call_requests_sum"),
    )
}

/// A session's outgoing side: what is sent on the sender goes out as a message.
fn outgoing<T: Send + 'static>() -> (
    tokio::sync::mpsc::UnboundedSender<T>,
    impl futures::Stream<Item = T> + Send + 'static,
) {
    let (send, requests) = tokio::sync::mpsc::unbounded_channel();
    let requests = futures::stream::unfold(requests, |mut requests| async move {
        requests.recv().await.map(|message| (message, requests))
    });
    (send, requests)
}

/// Sends `n` log-state requests for distinct groups at once through one `Peers`;
/// returns how many came back, checking each is the answer to its own request.
async fn ask_at_once(peers: &Peers, to: ReplicaId, n: u64, first_id: u64) -> usize {
    let asks = (0..n).map(|i| {
        let id = first_id + i;
        let eg = megastore_client::group(format!("batching-{i:04}").as_bytes()).unwrap();
        let request = ReplicaRequest::LogState { id, eg: eg.clone() };
        async move {
            let reply = peers
                .request(NodeId::Replica(to), Message::ReplicaRequest(request))
                .await;
            if let Some(reply) = &reply {
                match reply {
                    Message::ReplicaReply(ReplicaReply::LogState { id: got, .. }) => {
                        assert_eq!(*got, id, "a reply reached the wrong request");
                    }
                    other => panic!("request {id} got {other:?}"),
                }
            }
            reply.is_some()
        }
    });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .filter(|answered| *answered)
        .count()
}

#[test]
fn batched_calls_answer_each_request_and_survive_a_stopped_replica() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let replica_a = config.replica("a").unwrap();
    let a = ReplicaId(replica_a.id);
    let metrics = replica_a.metrics_address.clone().unwrap();
    runtime.block_on(async {
        // Wait until the cluster serves (a commit goes through).
        let client = connect(&config, "A").await;
        let group = megastore_client::group(b"batching-ready").unwrap();
        let started = Instant::now();
        while client
            .transaction(&group, async |txn| txn.set(b"k", b"c", b"v"))
            .await
            .is_err()
        {
            assert!(started.elapsed() < Duration::from_secs(30), "no commit");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // The replica's metrics endpoint comes up after its replication service.
        let started = Instant::now();
        while std::net::TcpStream::connect(&metrics).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "no metrics");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // 300 requests at once: all answered, each by its own reply, in fewer session
        // messages than requests. How many share a message depends on how often the
        // connection's task writes while they are being queued (on a busy machine,
        // often): 55 once, with other tests running, and 163 once, with the simulator
        // running beside the whole suite — against 300 or more unbatched.
        let peers = Peers::new(&config).unwrap();
        let (calls_before, requests_before) = calls_and_requests(&metrics);
        assert_eq!(ask_at_once(&peers, a, 300, 1_000).await, 300);
        let (calls_after, requests_after) = calls_and_requests(&metrics);
        let (calls, requests) = (calls_after - calls_before, requests_after - requests_before);
        assert!(requests >= 300.0, "{requests} requests arrived");
        assert!(
            calls <= 250.0,
            "300 concurrent requests took {calls} messages"
        );

        // A stopped replica: its requests go unanswered within the RPC timeout (the
        // test cluster's 500 ms), not forever.
        cluster.process("replica-a").signal("STOP");
        let stopped = Instant::now();
        assert_eq!(ask_at_once(&peers, a, 100, 2_000).await, 0);
        assert!(
            stopped.elapsed() < Duration::from_secs(3),
            "requests to a stopped replica waited {:?}",
            stopped.elapsed()
        );
        cluster.process("replica-a").signal("CONT");
        // Resumed, the same session answers again.
        let resumed = Instant::now();
        loop {
            if ask_at_once(&peers, a, 100, 3_000).await == 100 {
                break;
            }
            assert!(resumed.elapsed() < Duration::from_secs(20), "no answers");
        }

        // Malformed batches are refused whole, naming what is wrong.
        let mut raw = ReplicationClient::connect(format!("http://{}", replica_a.address))
            .await
            .unwrap();
        let good = |id: u64| {
            pb::ReplicaRequest::from(ReplicaRequest::LogState {
                id,
                eg: group.clone(),
            })
        };
        let malformed = pb::ReplicaRequest {
            id: 7,
            eg: group.0.clone(),
            request: None,
        };
        let refused = raw
            .call_many(pb::ReplicaRequests {
                requests: vec![good(6), malformed.clone()],
            })
            .await
            .expect_err("a batch with a malformed request is refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(refused.message().contains("request 1"), "{refused:?}");
        let too_many = raw
            .call_many(pb::ReplicaRequests {
                requests: (0..257).map(good).collect(),
            })
            .await
            .expect_err("a batch of 257 requests is refused");
        assert_eq!(too_many.code(), tonic::Code::InvalidArgument);
        assert!(too_many.message().contains("at most 256"), "{too_many:?}");
        // A good batch streams one numbered reply per request.
        let mut stream = raw
            .call_many(pb::ReplicaRequests {
                requests: (10..13).map(good).collect(),
            })
            .await
            .unwrap()
            .into_inner();
        let mut numbered = Vec::new();
        while let Some(reply) = stream.message().await.unwrap() {
            let answer = ReplicaReply::try_from(reply.reply.unwrap()).unwrap();
            numbered.push((reply.index, answer.id()));
        }
        numbered.sort_unstable();
        assert_eq!(numbered, vec![(0, 10), (1, 11), (2, 12)]);

        // Coordinators take batches the same way.
        let coordinator = replica_a.coordinator_address.clone().unwrap();
        let queries = (0..200u64).map(|id| {
            let eg = megastore_client::group(format!("batching-{id:04}").as_bytes()).unwrap();
            let peers = &peers;
            async move {
                let query = CoordinatorRequest::Query { id, eg };
                match peers
                    .request(NodeId::Coordinator(a), Message::CoordinatorRequest(query))
                    .await
                {
                    Some(Message::CoordinatorReply(CoordinatorReply::Query {
                        id: got, ..
                    })) => {
                        assert_eq!(got, id, "a coordinator reply reached the wrong query");
                        true
                    }
                    other => panic!("query {id} got {other:?}"),
                }
            }
        });
        assert!(
            futures::future::join_all(queries)
                .await
                .into_iter()
                .all(|ok| ok)
        );
        let mut raw = CoordinatorClient::connect(format!("http://{coordinator}"))
            .await
            .unwrap();
        let refused = raw
            .call_many(coordinator_pb::CoordinatorRequests {
                requests: vec![coordinator_pb::CoordinatorRequest { request: None }],
            })
            .await
            .expect_err("a batch with a malformed request is refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(refused.message().contains("request 0"), "{refused:?}");

        // Sessions: replies come back tagged with their requests' ids, and a malformed
        // request ends the session, naming it.
        let mut raw = ReplicationClient::connect(format!("http://{}", replica_a.address))
            .await
            .unwrap();
        let message = |ids: std::ops::Range<u64>| pb::SessionRequests {
            requests: ids
                .map(|id| pb::SessionRequest {
                    id: id * 100,
                    request: Some(good(id)),
                })
                .collect(),
        };
        let (send, requests) = outgoing();
        let mut replies = raw.session(requests).await.unwrap().into_inner();
        send.send(message(20..23)).unwrap();
        send.send(message(23..25)).unwrap();
        let mut tagged = Vec::new();
        while tagged.len() < 5 {
            let message = replies
                .message()
                .await
                .unwrap()
                .expect("the session goes on");
            for reply in message.replies {
                let answer = ReplicaReply::try_from(reply.reply.unwrap()).unwrap();
                tagged.push((reply.id, answer.id()));
            }
        }
        tagged.sort_unstable();
        assert_eq!(
            tagged,
            (20..25).map(|id| (id * 100, id)).collect::<Vec<_>>()
        );
        send.send(pb::SessionRequests {
            requests: vec![pb::SessionRequest {
                id: 4_200,
                request: Some(malformed.clone()),
            }],
        })
        .unwrap();
        let ended = replies
            .message()
            .await
            .expect_err("a malformed request ends the session");
        assert_eq!(ended.code(), tonic::Code::InvalidArgument);
        assert!(ended.message().contains("request 4200"), "{ended:?}");
        let (send, requests) = outgoing();
        let mut replies = raw.session(requests).await.unwrap().into_inner();
        send.send(message(0..257)).unwrap();
        let too_many = replies
            .message()
            .await
            .expect_err("a message of 257 requests ends the session");
        assert_eq!(too_many.code(), tonic::Code::InvalidArgument);
        assert!(too_many.message().contains("at most 256"), "{too_many:?}");
        // Large replies released together still leave in messages of about 1 MiB: this
        // raw client takes messages of at most tonic's default 4 MiB, and eight
        // snapshots of a group of 1 MB are released by one batch.
        let large = megastore_client::group(b"batching-large").unwrap();
        client
            .transaction(&large, async |txn| {
                for row in 0..10u8 {
                    txn.set(&[b'r', row], b"c", &[row; 100_000])?;
                }
                Ok(())
            })
            .await
            .unwrap();
        let mut raw = ReplicationClient::connect(format!("http://{}", replica_a.address))
            .await
            .unwrap();
        let (send, requests) = outgoing();
        let mut replies = raw.session(requests).await.unwrap().into_inner();
        send.send(pb::SessionRequests {
            requests: (0..8u64)
                .map(|id| pb::SessionRequest {
                    id,
                    request: Some(pb::ReplicaRequest::from(ReplicaRequest::Snapshot {
                        id,
                        eg: large.clone(),
                    })),
                })
                .collect(),
        })
        .unwrap();
        let mut snapshots = 0;
        while snapshots < 8 {
            let message = replies
                .message()
                .await
                .expect("every message within the client's limit")
                .expect("the session goes on");
            snapshots += message.replies.len();
        }
        let mut raw = CoordinatorClient::connect(format!("http://{coordinator}"))
            .await
            .unwrap();
        let (send, requests) = outgoing();
        let mut replies = raw.session(requests).await.unwrap().into_inner();
        send.send(coordinator_pb::SessionRequests {
            requests: vec![coordinator_pb::SessionRequest {
                id: 9,
                request: Some(coordinator_pb::CoordinatorRequest { request: None }),
            }],
        })
        .unwrap();
        let ended = replies
            .message()
            .await
            .expect_err("a malformed coordinator request ends the session");
        assert_eq!(ended.code(), tonic::Code::InvalidArgument);
        assert!(ended.message().contains("request 9"), "{ended:?}");
    });
}
