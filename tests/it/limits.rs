//! Size limits over the public API: a value and a transaction at the limits commit in
//! bounded time and are served by every replica kind that serves reads; one byte past
//! a limit is refused at once, naming the limit, and the group keeps committing.

use std::time::{Duration, Instant};

use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use megastore_types::limits::{TRANSACTION_BYTES_MAX, VALUE_BYTES_MAX};
use tonic::transport::Channel;

use crate::support::{api_at, start_cluster};

const GROUP: &[u8] = b"big";
/// What a commit at the limits may take on this machine, at most.
const BOUND: Duration = Duration::from_secs(30);

fn row(key: &str, value: Vec<u8>) -> pb::RowWrite {
    pb::RowWrite {
        key: key.as_bytes().to_vec(),
        cells: vec![pb::CellWrite {
            column: b"v".to_vec(),
            change: Some(pb::cell_write::Change::Set(value)),
        }],
    }
}

/// Begins, writes `rows`, commits: the commit's answer.
async fn commit(
    api: &mut MegastoreClient<Channel>,
    rows: Vec<pb::RowWrite>,
) -> Result<pb::CommitResponse, tonic::Status> {
    let txn = api
        .begin(pb::BeginRequest {
            eg: GROUP.to_vec(),
            root: None,
            ..Default::default()
        })
        .await?
        .into_inner()
        .txn;
    api.write(pb::WriteRequest { txn, rows }).await?;
    Ok(api.commit(pb::CommitRequest { txn }).await?.into_inner())
}

/// Reads `key` at `api` in `mode` until its value is `len` bytes long (bounded).
async fn read_until(api: &mut MegastoreClient<Channel>, mode: pb::ReadMode, key: &str, len: usize) {
    let started = Instant::now();
    loop {
        let read = api
            .read(pb::ReadRequest {
                eg: GROUP.to_vec(),
                mode: mode.into(),
                query: Some(pb::RowQuery {
                    query: Some(pb::row_query::Query::Keys(pb::row_query::Keys {
                        keys: vec![key.as_bytes().to_vec()],
                    })),
                }),
            })
            .await;
        if let Ok(read) = read
            && read
                .into_inner()
                .rows
                .first()
                .map(|r| r.cells[0].value.len())
                == Some(len)
        {
            return;
        }
        assert!(
            started.elapsed() < BOUND,
            "{key} not read in {mode:?} within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn committed(answer: &Result<pb::CommitResponse, tonic::Status>) -> bool {
    matches!(
        answer,
        Ok(pb::CommitResponse {
            outcome: Some(pb::commit_response::Outcome::Committed(_))
        })
    )
}

#[test]
fn writes_at_the_limits_commit_everywhere_and_one_byte_past_is_refused_at_once() {
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    let address = |name: &str| config.replica(name).unwrap().address.clone();
    runtime.block_on(async {
        let mut at_a = api_at(&address("a"));
        let mut at_b = api_at(&address("b"));
        let mut at_read_only = api_at(&address("d"));
        let started = Instant::now();
        while !committed(&commit(&mut at_a, vec![row("small", b"1".to_vec())]).await) {
            assert!(started.elapsed() < BOUND, "no first commit");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // One value at the limit.
        let started = Instant::now();
        let answer = commit(&mut at_a, vec![row("value", vec![7; VALUE_BYTES_MAX])]).await;
        assert!(committed(&answer), "{answer:?}");
        assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
        read_until(&mut at_b, pb::ReadMode::Current, "value", VALUE_BYTES_MAX).await;
        read_until(
            &mut at_read_only,
            pb::ReadMode::Snapshot,
            "value",
            VALUE_BYTES_MAX,
        )
        .await;

        // A transaction just under its limit: as many rows at the value limit as fit.
        let per_row = VALUE_BYTES_MAX + b"row-00".len() + b"v".len();
        let rows = TRANSACTION_BYTES_MAX / per_row;
        let started = Instant::now();
        let answer = commit(
            &mut at_a,
            (0..rows)
                .map(|i| row(&format!("row-{i:02}"), vec![1; VALUE_BYTES_MAX]))
                .collect(),
        )
        .await;
        assert!(committed(&answer), "{answer:?}");
        assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
        let last = format!("row-{:02}", rows - 1);
        read_until(&mut at_b, pb::ReadMode::Current, &last, VALUE_BYTES_MAX).await;
        read_until(
            &mut at_read_only,
            pb::ReadMode::Snapshot,
            &last,
            VALUE_BYTES_MAX,
        )
        .await;

        // One byte past: refused at once, naming the limit.
        let started = Instant::now();
        let refused = commit(&mut at_a, vec![row("value", vec![7; VALUE_BYTES_MAX + 1])]).await;
        let status = refused.expect_err("a value past the limit");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("the limit is 100000"),
            "{status:?}"
        );
        let refused = commit(
            &mut at_a,
            (0..=rows)
                .map(|i| row(&format!("row-{i:02}"), vec![2; VALUE_BYTES_MAX]))
                .collect(),
        )
        .await;
        let status = refused.expect_err("a transaction past the limit");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("the limit is 10000000"),
            "{status:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refusals took {:?}",
            started.elapsed()
        );

        // Nothing stalled: the group commits, and the refused writes left no trace.
        let started = Instant::now();
        assert!(committed(
            &commit(&mut at_a, vec![row("after", b"ok".to_vec())]).await
        ));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        read_until(&mut at_b, pb::ReadMode::Current, "value", VALUE_BYTES_MAX).await;
    });
}

/// `[gateway]` bounds open transactions: one connection may hold at most
/// `open_txns_per_connection` (another connection still may begin), and a handle left
/// unused for `idle_txn_ms` is dropped, which frees its place.
#[test]
fn open_transactions_are_bounded_per_connection_and_expire_when_idle() {
    let (_alone, _dir, _cluster, config, runtime) = crate::support::start_cluster_with(
        "\n[gateway]\nidle_txn_ms = 3000\nopen_txns_per_connection = 3\n",
    );
    let address = crate::support::replica_address(&config, "a");
    runtime.block_on(async {
        let begin = || pb::BeginRequest {
            eg: GROUP.to_vec(),
            root: None,
            ..Default::default()
        };
        let mut first = api_at(&address);
        let started = Instant::now();
        let mut handles = Vec::new();
        while handles.len() < 3 {
            match first.begin(begin()).await {
                Ok(begun) => handles.push(begun.into_inner().txn),
                Err(e) => {
                    assert!(started.elapsed() < BOUND, "no Begin: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        let refused = first.begin(begin()).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");
        assert!(
            refused.message().contains("open_txns_per_connection"),
            "{refused}"
        );
        let mut second = api_at(&address);
        second
            .begin(begin())
            .await
            .expect("another connection may begin");

        tokio::time::sleep(Duration::from_millis(4_000)).await;
        let expired = first
            .txn_read(pb::TxnReadRequest {
                txn: handles[0],
                keys: vec![b"k".to_vec()],
            })
            .await
            .unwrap_err();
        assert_eq!(expired.code(), tonic::Code::NotFound, "{expired}");
        assert!(expired.message().contains("idle_txn_ms"), "{expired}");
        first
            .begin(begin())
            .await
            .expect("the idle handles freed their places");
    });
}

/// Clients committing through replica a's gateway at once, in
/// [`committed_transactions_do_not_count_against_the_open_bound`].
const COMMITTERS: usize = 4;
/// Transactions each commits, one after another (bounded).
const COMMITS_EACH: usize = 12;
/// The open bound that test sets: far fewer than the transactions committed.
const OPEN_MAX: usize = 10;

/// Begins (retrying while the cluster comes up, within [`BOUND`]), writes `key` and
/// commits at `api`: the handle and the commit's answer. A refusal for open
/// transactions fails at once.
async fn begin_write_commit(
    api: &mut MegastoreClient<Channel>,
    key: &str,
) -> (u64, pb::CommitResponse) {
    let started = Instant::now();
    loop {
        match commit_keeping_handle(api, key).await {
            Ok(done) => return done,
            Err(e) => {
                assert_ne!(e.code(), tonic::Code::ResourceExhausted, "{e}");
                assert!(started.elapsed() < BOUND, "no commit of {key}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn commit_keeping_handle(
    api: &mut MegastoreClient<Channel>,
    key: &str,
) -> Result<(u64, pb::CommitResponse), tonic::Status> {
    let begin = pb::BeginRequest {
        eg: GROUP.to_vec(),
        root: None,
        ..Default::default()
    };
    let txn = api.begin(begin).await?.into_inner().txn;
    let rows = vec![row(key, key.as_bytes().to_vec())];
    api.write(pb::WriteRequest { txn, rows }).await?;
    let answer = api.commit(pb::CommitRequest { txn }).await?.into_inner();
    Ok((txn, answer))
}

/// `[gateway] open_txns_max` bounds open transactions, not committed ones: a replica
/// whose clients commit five times that many within `idle_txn_ms` goes on serving
/// `Begin` (every commit succeeds or conflicts, none is refused), still answers a
/// `Commit` sent again with the newest handle as it did, and still refuses the open
/// transaction past the bound. Until 2026-12-05 the answers kept for a resent `Commit`
/// counted too: a gateway committing more than 10,000 transactions a minute refused
/// every `Begin`.
#[test]
fn committed_transactions_do_not_count_against_the_open_bound() {
    let (_alone, _dir, _cluster, config, runtime) =
        crate::support::start_cluster_with(&format!("\n[gateway]\nopen_txns_max = {OPEN_MAX}\n"));
    let address = crate::support::replica_address(&config, "a");
    runtime.block_on(async {
        let committers: Vec<_> = (0..COMMITTERS)
            .map(|c| {
                let address = address.clone();
                tokio::spawn(async move {
                    let mut api = api_at(&address);
                    let mut last = None;
                    for n in 0..COMMITS_EACH {
                        last = Some(begin_write_commit(&mut api, &format!("c{c}-{n}")).await);
                    }
                    (api, last.expect("one commit at least"))
                })
            })
            .collect();
        let mut finished = Vec::new();
        for committer in committers {
            finished.push(committer.await.expect("a committer"));
        }
        let (api, (txn, answer)) = &mut finished[0];
        let again = api.commit(pb::CommitRequest { txn: *txn }).await;
        assert_eq!(
            again.expect("the newest answer is kept").into_inner(),
            *answer,
            "a Commit sent again gets the same answer"
        );

        let mut open = api_at(&address);
        for _ in 0..OPEN_MAX {
            open.begin(pb::BeginRequest {
                eg: GROUP.to_vec(),
                root: None,
                ..Default::default()
            })
            .await
            .expect("fewer than open_txns_max are open");
        }
        let refused = open
            .begin(pb::BeginRequest {
                eg: GROUP.to_vec(),
                root: None,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");
        assert!(refused.message().contains("open_txns_max"), "{refused}");
    });
}

/// Connections flooding replica a's public port.
const FLOODERS: usize = 32;
/// Requests each flooder sends (bounded, one after another).
const FLOOD_REQUESTS: usize = 150;

/// 32 connections flood replica a's public port with current reads (a bounded number)
/// while a client at site B commits to a group that replica a votes in. The replica
/// must go on serving its peers: every commit succeeds, none waits long, and every
/// flood request gets an answer.
#[test]
fn a_flooded_public_port_keeps_serving_its_peers() {
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    let address = crate::support::replica_address(&config, "a");
    runtime.block_on(async {
        let at_b = crate::support::connect(&config, "B").await;
        let group = crate::support::eg(77);
        crate::support::first_commit(&at_b, &group).await;
        let flooders: Vec<_> = (0..FLOODERS)
            .map(|i| {
                let mut api = api_at(&address);
                tokio::spawn(async move {
                    let mut answered = 0;
                    for n in 0..FLOOD_REQUESTS {
                        let read = pb::ReadRequest {
                            eg: format!("flood-{}", (i * FLOOD_REQUESTS + n) % 64).into_bytes(),
                            mode: pb::ReadMode::Current as i32,
                            query: None,
                        };
                        // Any answer counts (a refusal is an answer); a transport
                        // failure does not.
                        match api.read(read).await {
                            Ok(_) => answered += 1,
                            Err(status) if status.code() != tonic::Code::Unavailable => {
                                answered += 1
                            }
                            Err(_) => {}
                        }
                    }
                    answered
                })
            })
            .collect();
        let mut slowest = Duration::ZERO;
        let mut overlapped = 0;
        for _ in 0..20 {
            let began = Instant::now();
            crate::support::increment(&at_b, &group, "counter")
                .await
                .expect("a commit during the flood");
            slowest = slowest.max(began.elapsed());
            if flooders.iter().any(|f| !f.is_finished()) {
                overlapped += 1;
            }
        }
        assert!(
            overlapped >= 10,
            "only {overlapped} commits ran during the flood"
        );
        let mut answered = 0;
        for flooder in flooders {
            answered += flooder.await.unwrap();
        }
        assert_eq!(
            answered,
            FLOODERS * FLOOD_REQUESTS,
            "every flood request answered"
        );
        assert!(
            slowest < Duration::from_secs(3),
            "a commit took {slowest:?} while replica a was flooded"
        );
    });
}
