//! Queues between groups on real processes, through the public gRPC API: two senders
//! at site A each send numbered messages to three receivers in their transactions,
//! consumers at site B receive them in transactions of the receivers, deliverers at
//! both sites race the replicas' own, and the senders' replica (a, the first
//! deliverer) is SIGKILLed mid-way and restarted. Every
//! message whose send was acknowledged must be consumed exactly once, and each
//! receiver must consume each sender's messages in the order they were sent.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use tonic::transport::Channel;

use crate::support::{api_at, grpc_begin_with_write, grpc_committed, start_cluster};

const SENDERS: usize = 2;
const RECEIVERS: usize = 3;
/// Sends per sender, at most (each to every receiver), within `SENDING`.
const SENDS_MAX: u64 = 40;
const SENDING: Duration = Duration::from_secs(12);
/// How long the consumers may take to drain every inbox after the sends stop.
const DRAINING: Duration = Duration::from_secs(60);
const QUEUE: &str = "mail";

/// One consuming transaction: the position it committed at, and each message's
/// (sender, number).
type Consumed = (u64, Vec<(usize, u64)>);

fn group_id(name: &str) -> Vec<u8> {
    megastore_client::group(name.as_bytes()).unwrap().0
}

/// One transaction of sender `s`: a row write and message `i` to every receiver.
/// Whether it committed.
async fn send(api: &mut MegastoreClient<Channel>, s: usize, i: u64) -> bool {
    let name = format!("sender-{s}").into_bytes();
    let count = i.to_string().into_bytes();
    let Some(txn) = grpc_begin_with_write(api, &name, (b"sent", b"n", &count)).await else {
        return false;
    };
    for r in 0..RECEIVERS {
        let message = pb::SendMessageRequest {
            txn,
            to: format!("receiver-{r}").into_bytes(),
            to_root: None,
            queue: QUEUE.into(),
            body: format!("{s}/{i}").into_bytes(),
        };
        if api.send_message(message).await.is_err() {
            return false;
        }
    }
    grpc_committed(api.commit(pb::CommitRequest { txn }).await).is_some()
}

/// One consuming transaction at receiver `r`: the messages it consumed, with the
/// position it committed at.
async fn consume(api: &mut MegastoreClient<Channel>, r: usize) -> Option<Consumed> {
    let begun = api
        .begin(pb::BeginRequest {
            eg: format!("receiver-{r}").into_bytes(),
            root: None,
            ..Default::default()
        })
        .await
        .ok()?;
    let txn = begun.into_inner().txn;
    let received = api
        .receive(pb::ReceiveRequest {
            txn,
            queue: QUEUE.into(),
            limit: 5,
        })
        .await
        .ok()?
        .into_inner()
        .messages;
    if received.is_empty() {
        let _ = api.abort(pb::AbortRequest { txn }).await;
        return Some((0, Vec::new()));
    }
    let bodies: Vec<(usize, u64)> = received
        .iter()
        .map(|m| {
            let text = String::from_utf8(m.body.clone()).unwrap();
            let (s, i) = text.split_once('/').unwrap();
            assert_eq!(m.sender, group_id(&format!("sender-{s}")), "its sender");
            assert_eq!(m.sender_name, format!("sender-{s}").into_bytes());
            (s.parse().unwrap(), i.parse().unwrap())
        })
        .collect();
    let position = grpc_committed(api.commit(pb::CommitRequest { txn }).await)?;
    Some((position, bodies))
}

#[test]
fn queue_messages_are_consumed_exactly_once_in_order_through_a_senders_replica_crash() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    // A group's queues as `megastore status --group NAME -o json` shows them.
    let status_of = |group: &str| {
        let out = megastore_e2e::run_megastore(
            &[
                "status",
                "--config",
                &config_arg,
                "--group",
                group,
                "-o",
                "json",
            ],
            dir.path(),
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "{out:?}");
        let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        json["queues"].clone()
    };
    let address = |name: &str| {
        config
            .replicas
            .iter()
            .find(|r| r.name == name)
            .unwrap()
            .address
            .clone()
    };
    let (a, b) = (address("a"), address("b"));
    // Sends acknowledged, per sender; consumptions committed, per receiver.
    let acked: Arc<Mutex<BTreeSet<(usize, u64)>>> = Arc::default();
    let consumed: Arc<Mutex<BTreeMap<usize, Vec<Consumed>>>> = Arc::default();
    let started = Instant::now();
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (address, acked) = (a.clone(), Arc::clone(&acked));
            runtime.spawn(async move {
                let mut api = api_at(&address);
                let mut i = 0;
                while i < SENDS_MAX && started.elapsed() < SENDING {
                    if send(&mut api, s, i).await {
                        acked.lock().unwrap().insert((s, i));
                        i += 1;
                        // Paced, so the sends go on through the crash.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    } else {
                        // Not acknowledged (the replica may be down): the next
                        // number goes on, so no two transactions send one body (this
                        // one may still have committed unseen: its messages are then
                        // consumed without being expected).
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        i += 1;
                    }
                }
            })
        })
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumers: Vec<_> = (0..RECEIVERS)
        .map(|r| {
            let (address, consumed, stop) = (b.clone(), Arc::clone(&consumed), Arc::clone(&stop));
            runtime.spawn(async move {
                let mut api = api_at(&address);
                // Consumers start late, so a backlog builds first.
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match consume(&mut api, r).await {
                        Some((position, bodies)) if !bodies.is_empty() => {
                            consumed
                                .lock()
                                .unwrap()
                                .entry(r)
                                .or_default()
                                .push((position, bodies));
                        }
                        _ => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
        })
        .collect();
    // Deliverers of their own at both sites race the replicas' (as a program may:
    // `Deliver` is safe alongside any other delivery).
    let deliverers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|address| {
            let stop = Arc::clone(&stop);
            runtime.spawn(async move {
                let mut api = api_at(&address);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for s in 0..SENDERS {
                        let sender = format!("sender-{s}").into_bytes();
                        let deliver = pb::DeliverRequest {
                            sender,
                            sender_root: None,
                        };
                        if api.deliver(deliver).await.is_err() {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_000));
    // Delivered, not yet consumed: status shows the backlog, with its age.
    let backlog = status_of("receiver-0");
    let waiting = &backlog["inbox"][QUEUE];
    assert!(waiting["messages"].as_u64().unwrap_or(0) > 0, "{backlog}");
    assert!(waiting["oldest_sent_ms"].as_u64().is_some(), "{backlog}");
    std::thread::sleep(Duration::from_millis(1_000));
    cluster.process("replica-a").kill();
    std::thread::sleep(Duration::from_secs(2));
    cluster.start_process("replica-a");
    runtime.block_on(async {
        for sender in senders {
            sender.await.unwrap();
        }
    });
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 10,
        "too few sends acknowledged: {}",
        acked.len()
    );
    // Drain: every acknowledged message consumed at every receiver.
    let drained = Instant::now();
    loop {
        let all = {
            let consumed = consumed.lock().unwrap();
            (0..RECEIVERS).all(|r| {
                let got: BTreeSet<(usize, u64)> = consumed
                    .get(&r)
                    .into_iter()
                    .flatten()
                    .flat_map(|(_, bodies)| bodies.iter().copied())
                    .collect();
                acked.is_subset(&got)
            })
        };
        if all {
            break;
        }
        assert!(
            drained.elapsed() < DRAINING,
            "not every acknowledged message was consumed within {DRAINING:?}: {:?}",
            consumed.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A little longer: a duplicate delivery would show up now.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    runtime.block_on(async {
        for task in consumers.into_iter().chain(deliverers) {
            task.await.unwrap();
        }
    });
    // Nothing waits any more: every inbox consumed, every outbox trimmed.
    for r in 0..RECEIVERS {
        let queues = status_of(&format!("receiver-{r}"));
        assert_eq!(
            queues["inbox"][QUEUE]["messages"].as_u64().unwrap_or(0),
            0,
            "{queues}"
        );
    }
    for s in 0..SENDERS {
        let queues = status_of(&format!("sender-{s}"));
        assert_eq!(queues["outbox"]["messages"], 0, "{queues}");
    }
    let consumed = consumed.lock().unwrap();
    for r in 0..RECEIVERS {
        let mut by_position = consumed.get(&r).cloned().unwrap_or_default();
        by_position.sort();
        let mut seen = BTreeSet::new();
        let mut last: BTreeMap<usize, u64> = BTreeMap::new();
        for (position, bodies) in &by_position {
            for &(s, i) in bodies {
                assert!(
                    seen.insert((s, i)),
                    "receiver {r} consumed {s}/{i} twice (again at p{position})"
                );
                if let Some(before) = last.get(&s) {
                    assert!(
                        *before < i,
                        "receiver {r} consumed {s}/{i} after {s}/{before}"
                    );
                }
                last.insert(s, i);
            }
        }
        assert!(acked.is_subset(&seen), "receiver {r} missed some");
    }
}

/// `megastore bench --queues` times each message's send, delivery and consumption,
/// every message consumed once (it fails otherwise), from site A to site B.
#[test]
fn the_queue_benchmark_times_each_message_from_send_to_consumption() {
    let (_alone, dir, cluster, _config, _runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let out = megastore_e2e::run_megastore(
        &["bench", "--queues", "--runs", "20", "--config", &config_arg],
        dir.path(),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{out:?}");
    let json = out.stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(
        (
            report["sender_site"].as_str(),
            report["receiver_site"].as_str()
        ),
        (Some("A"), Some("B"))
    );
    let kinds = report["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 3, "{report}");
    let delivery = &kinds[1];
    assert!(
        delivery["kind"].as_str().unwrap().starts_with("delivery"),
        "{report}"
    );
    assert_eq!(delivery["count"], 20, "every message timed once: {report}");
    assert_eq!(kinds[0]["count"], 20, "{report}");
    assert!(delivery["p50_us"].as_u64().unwrap() > 0, "{report}");
}
