//! Blind transactions of the public gRPC API (`BeginRequest.blind`, docs/protocol.md,
//! "Relayed commits", step 8): many gRPC clients write rows of their own to one hot
//! group through site A's replica, each transaction begun blind, while that replica —
//! every client's gateway — is killed and restarted. A commit whose answer is lost is
//! resolved at site B by the id its blind Begin returned. Checked: Begin's id names the
//! position after Begin's, each commit lands within the commit span after it, every
//! acknowledged or resolved-committed row is present, every row of a transaction that
//! did not commit is absent, and most blind Begins took their position from the
//! replica's commit in flight instead of reading.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_paxos::COMMIT_SPAN;
use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use tonic::transport::Channel;

use crate::support::{api_at, grpc_current_rows, grpc_resolve, start_cluster, wait_for_acks};

const GROUP: &[u8] = b"blind-hot";
/// gRPC clients, each with a connection of its own.
const CLIENTS: usize = 16;
/// Attempts each client makes at most (and the load stops after `LOAD` anyway).
const ATTEMPTS: usize = 2_000;
const LOAD: Duration = Duration::from_secs(14);
/// How long the load may take to acknowledge the transactions a step waits for.
const ACK_WAIT: Duration = Duration::from_secs(30);

fn note(client: usize, attempt: usize) -> Vec<u8> {
    format!("note-{client:02}-{attempt:04}").into_bytes()
}

/// What one client saw, by attempt.
#[derive(Debug, Default)]
struct Seen {
    /// Acknowledged or resolved committed.
    committed: Vec<usize>,
    /// Answered as conflicting, or resolved as not committed.
    not_committed: Vec<usize>,
    /// Commits whose answer was lost (then resolved).
    indefinite: usize,
}

/// Begins a blind transaction at `api`: its handle, position and id.
async fn begin_blind(
    api: &mut MegastoreClient<Channel>,
) -> Result<(u64, u64, pb::TxnId), tonic::Status> {
    let begun = api
        .begin(pb::BeginRequest {
            eg: GROUP.to_vec(),
            blind: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    let id = begun.id.expect("Begin returns the transaction's id");
    assert_eq!(
        id.position,
        begun.position + 1,
        "a blind Begin's id names the position after its own"
    );
    Ok((begun.txn, begun.position, id))
}

async fn client(
    client: usize,
    gateway: String,
    elsewhere: String,
    deadline: Instant,
    acked: Arc<AtomicUsize>,
) -> Seen {
    use pb::commit_response::Outcome;
    let mut api = api_at(&gateway);
    let mut other = api_at(&elsewhere);
    let mut seen = Seen::default();
    for attempt in 0..ATTEMPTS {
        if Instant::now() >= deadline {
            break;
        }
        let staged = async {
            let (txn, position, id) = begin_blind(&mut api).await?;
            let row = pb::RowWrite {
                key: note(client, attempt),
                cells: vec![pb::CellWrite {
                    column: b"n".to_vec(),
                    change: Some(pb::cell_write::Change::Set(b"1".to_vec())),
                }],
            };
            api.write(pb::WriteRequest {
                txn,
                rows: vec![row],
            })
            .await?;
            Ok::<_, tonic::Status>((txn, position, id))
        }
        .await;
        // Nothing was committed yet (no Commit was sent): the gateway is down.
        let Ok((txn, position, id)) = staged else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        match api.commit(pb::CommitRequest { txn }).await {
            Ok(answer) => match answer.into_inner().outcome {
                Some(Outcome::Committed(c)) => {
                    assert!(
                        c.position > position && c.position <= position + 1 + COMMIT_SPAN,
                        "client {client}: begun at {position}, committed at {}: outside its commit span",
                        c.position
                    );
                    seen.committed.push(attempt);
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                Some(Outcome::Conflict(c)) => {
                    assert!(
                        c.keys.is_empty(),
                        "client {client}: a blind write conflicted on rows it never read: {c:?}"
                    );
                    seen.not_committed.push(attempt);
                }
                None => panic!("client {client}: a Commit answered no outcome"),
            },
            // Indefinite (UNKNOWN, or no answer at all): resolve it at site B.
            Err(_) => {
                seen.indefinite += 1;
                if grpc_resolve(&mut other, GROUP, id).await {
                    seen.committed.push(attempt);
                    acked.fetch_add(1, Ordering::Relaxed);
                } else {
                    seen.not_committed.push(attempt);
                }
            }
        }
    }
    seen
}

/// Blind writes sent on the read of the gateway's commit in flight, by the replica at
/// `metrics` (its shared client's counter).
fn blind_writes_unread(metrics: &str) -> f64 {
    let text = megastore_e2e::scrape_metrics(metrics);
    megastore_e2e::metric_value(&text, "megastore_client_blind_writes_unread_total").unwrap_or(0.0)
}

#[test]
fn blind_transactions_through_grpc_commit_exactly_once_through_their_gateways_kill() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let gateway = config.replica("a").unwrap().address.clone();
    let elsewhere = config.replica("b").unwrap().address.clone();
    let metrics = config
        .replica("a")
        .unwrap()
        .metrics_address
        .clone()
        .unwrap();
    // (A lazy channel needs the runtime.)
    let mut api = runtime.block_on(async { api_at(&gateway) });

    // The group exists before the load; and what a blind transaction refuses.
    runtime.block_on(async {
        let started = Instant::now();
        let txn = loop {
            if let Ok((txn, _, _)) = begin_blind(&mut api).await {
                break txn;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "no Begin");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let read = api
            .txn_read(pb::TxnReadRequest {
                txn,
                keys: vec![b"created".to_vec()],
            })
            .await
            .expect_err("a blind transaction reads nothing");
        assert_eq!(read.code(), tonic::Code::InvalidArgument, "{read:?}");
        assert!(read.message().contains("blind"), "{read:?}");
        let typed = api
            .begin(pb::BeginRequest {
                root: Some(pb::GroupRoot {
                    table: "User".to_string(),
                    key: Vec::new(),
                }),
                blind: true,
                ..Default::default()
            })
            .await
            .expect_err("a typed group's transaction is never blind");
        assert_eq!(typed.code(), tonic::Code::InvalidArgument, "{typed:?}");
        assert!(typed.message().contains("blind"), "{typed:?}");
        let created =
            crate::support::grpc_begin_with_write(&mut api, GROUP, (b"created", b"n", b"1"))
                .await
                .expect("a first transaction");
        let committed = api.commit(pb::CommitRequest { txn: created }).await;
        assert!(
            crate::support::grpc_committed(committed).is_some(),
            "a first commit"
        );
    });

    let deadline = Instant::now() + LOAD;
    let acked = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            runtime.spawn(client(
                c,
                gateway.clone(),
                elsewhere.clone(),
                deadline,
                acked.clone(),
            ))
        })
        .collect();
    // The gateway dies under load, with commits in flight, and comes back.
    wait_for_acks(&acked, 300, ACK_WAIT);
    let unread = blind_writes_unread(&metrics);
    let acked_then = acked.load(Ordering::Relaxed);
    cluster.process("replica-a").kill();
    std::thread::sleep(Duration::from_secs(1));
    cluster.start_process("replica-a");
    wait_for_acks(&acked, acked.load(Ordering::Relaxed) + 200, ACK_WAIT);
    let seen: Vec<Seen> = clients
        .into_iter()
        .map(|c| runtime.block_on(c).unwrap())
        .collect();
    assert!(
        Instant::now() >= deadline,
        "the load ended before the fault was over: raise ATTEMPTS"
    );
    // Sixteen sessions of one replica write one group: its commit is nearly always in
    // flight, and a blind Begin then takes its read instead of making one.
    assert!(
        unread * 2.0 >= acked_then as f64,
        "only {unread} of {acked_then} blind Begins before the kill took the read of a commit in flight"
    );

    // Every acknowledged row is there, and no row of a transaction that did not commit.
    let rows = runtime.block_on(grpc_current_rows(&elsewhere, GROUP));
    let indefinite: usize = seen.iter().map(|s| s.indefinite).sum();
    for (c, seen) in seen.iter().enumerate() {
        assert!(
            seen.committed.len() >= 10,
            "client {c} barely committed: {seen:?}"
        );
        for attempt in &seen.committed {
            assert!(
                rows.contains_key(&note(c, *attempt)),
                "client {c}: attempt {attempt}, committed, is missing ({indefinite} indefinite in all)"
            );
        }
        for attempt in &seen.not_committed {
            assert!(
                !rows.contains_key(&note(c, *attempt)),
                "client {c}: attempt {attempt} did not commit, yet its row is there"
            );
        }
    }
}
