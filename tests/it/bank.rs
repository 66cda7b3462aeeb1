//! One position per transaction, checked the way a bank would: concurrent transfers
//! between accounts of one group while read-only transactions sum every account — in
//! one call and in one call per account — over the public gRPC API and through the
//! Rust library, with a voter killed and restarted in the middle. Every sum must be
//! the total: a read-only transaction never commits, so nothing else would catch a
//! read from another position.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megastore_client::Client;
use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use tonic::transport::Channel;

use crate::support::{api_at, connect, start_cluster};

const ACCOUNTS: u64 = 8;
const OPENING_BALANCE: u64 = 100;
const TOTAL: u64 = ACCOUNTS * OPENING_BALANCE;
const GROUP: &[u8] = b"bank";
/// How long the load runs (the fault lands in the middle).
const LOAD: Duration = Duration::from_secs(12);

fn account(i: u64) -> Vec<u8> {
    format!("acct-{i}").into_bytes()
}

fn balance(rows: &[pb::Row], key: &[u8]) -> u64 {
    rows.iter()
        .find(|r| r.key == key)
        .and_then(|r| r.cells.iter().find(|c| c.column == b"balance"))
        .map_or(0, |c| String::from_utf8_lossy(&c.value).parse().unwrap())
}

fn set_balance(key: Vec<u8>, value: u64) -> pb::RowWrite {
    pb::RowWrite {
        key,
        cells: vec![pb::CellWrite {
            column: b"balance".to_vec(),
            change: Some(pb::cell_write::Change::Set(value.to_string().into_bytes())),
        }],
    }
}

async fn begin(api: &mut MegastoreClient<Channel>) -> Result<u64, tonic::Status> {
    let begun = api
        .begin(pb::BeginRequest {
            eg: GROUP.to_vec(),
            root: None,
            ..Default::default()
        })
        .await?;
    Ok(begun.into_inner().txn)
}

async fn read(
    api: &mut MegastoreClient<Channel>,
    txn: u64,
    keys: Vec<Vec<u8>>,
) -> Result<Vec<pb::Row>, tonic::Status> {
    let rows = api.txn_read(pb::TxnReadRequest { txn, keys }).await?;
    Ok(rows.into_inner().rows)
}

/// One transfer attempt over gRPC: whether it committed.
async fn transfer(
    api: &mut MegastoreClient<Channel>,
    from: u64,
    to: u64,
    amount: u64,
) -> Result<bool, tonic::Status> {
    let txn = begin(api).await?;
    let rows = read(api, txn, vec![account(from), account(to)]).await?;
    let (a, b) = (balance(&rows, &account(from)), balance(&rows, &account(to)));
    let amount = amount.min(a);
    api.write(pb::WriteRequest {
        txn,
        rows: vec![
            set_balance(account(from), a - amount),
            set_balance(account(to), b + amount),
        ],
    })
    .await?;
    let commit = api.commit(pb::CommitRequest { txn }).await?.into_inner();
    Ok(matches!(
        commit.outcome,
        Some(pb::commit_response::Outcome::Committed(_))
    ))
}

/// A read-only transaction's sum of every account: in one call, or one call each.
async fn grpc_sum(
    api: &mut MegastoreClient<Channel>,
    one_call: bool,
) -> Result<u64, tonic::Status> {
    let txn = begin(api).await?;
    let sum = if one_call {
        let rows = read(api, txn, (0..ACCOUNTS).map(account).collect()).await?;
        (0..ACCOUNTS).map(|i| balance(&rows, &account(i))).sum()
    } else {
        let mut sum = 0;
        for i in 0..ACCOUNTS {
            let rows = read(api, txn, vec![account(i)]).await?;
            sum += balance(&rows, &account(i));
        }
        sum
    };
    api.abort(pb::AbortRequest { txn }).await?;
    Ok(sum)
}

/// The same through the Rust library: one `get` per account, then a scan of them all.
async fn library_sum(client: &Client) -> Result<(u64, u64), megastore_client::ClientError> {
    let group = megastore_client::group(GROUP)?;
    let mut txn = client.begin(&group);
    let mut by_key = 0;
    for i in 0..ACCOUNTS {
        let row = txn.get(&account(i)).await?;
        by_key += row
            .and_then(|r| {
                r.value(b"balance")
                    .map(|v| String::from_utf8_lossy(v).parse().unwrap())
            })
            .unwrap_or(0u64);
    }
    let rows = txn
        .scan(
            megastore_rowstore::KeyRange::prefix(b"acct-".to_vec()),
            None,
        )
        .await?;
    let scanned = rows
        .iter()
        .filter_map(|r| r.value(b"balance"))
        .map(|v| String::from_utf8_lossy(v).parse::<u64>().unwrap())
        .sum();
    Ok((by_key, scanned))
}

#[derive(Default)]
struct Tally {
    transfers: AtomicU64,
    sums_checked: AtomicU64,
    bad_sums: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn wrong(&self, what: String) {
        self.bad_sums
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(what);
    }
}

#[test]
fn read_only_transactions_see_one_position_while_transfers_run_and_a_voter_dies() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let address = config.replica("a").unwrap().address.clone();
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    runtime.block_on(async {
        let mut api = api_at(&address);
        // Open the accounts, retried while coordinators take their locks.
        let started = Instant::now();
        loop {
            let opened = async {
                let txn = begin(&mut api).await?;
                let rows = (0..ACCOUNTS)
                    .map(|i| set_balance(account(i), OPENING_BALANCE))
                    .collect();
                api.write(pb::WriteRequest { txn, rows }).await?;
                api.commit(pb::CommitRequest { txn }).await
            }
            .await;
            if opened.is_ok() {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "{opened:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let deadline = Instant::now() + LOAD;
    for worker in 0..4u64 {
        let (address, tally) = (address.clone(), Arc::clone(&tally));
        tasks.push(runtime.spawn(async move {
            let mut api = api_at(&address);
            let mut n = worker;
            while Instant::now() < deadline {
                n += 1;
                let (from, to) = (n % ACCOUNTS, (n * 3 + 1) % ACCOUNTS);
                if from != to && matches!(transfer(&mut api, from, to, 1 + n % 7).await, Ok(true)) {
                    tally.transfers.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for one_call in [true, false] {
        let (address, tally) = (address.clone(), Arc::clone(&tally));
        tasks.push(runtime.spawn(async move {
            let mut api = api_at(&address);
            while Instant::now() < deadline {
                // A read that fails during the fault is no answer; one that answers
                // must be right.
                if let Ok(sum) = grpc_sum(&mut api, one_call).await {
                    tally.sums_checked.fetch_add(1, Ordering::Relaxed);
                    if sum != TOTAL {
                        tally.wrong(format!(
                            "gRPC read-only transaction (one call: {one_call}) summed {sum}"
                        ));
                    }
                }
            }
        }));
    }
    {
        let tally = Arc::clone(&tally);
        let client = runtime.block_on(connect(&config, "B"));
        tasks.push(runtime.spawn(async move {
            while Instant::now() < deadline {
                if let Ok((by_key, scanned)) = library_sum(&client).await {
                    tally.sums_checked.fetch_add(2, Ordering::Relaxed);
                    for sum in [by_key, scanned] {
                        if sum != TOTAL {
                            tally.wrong(format!("library read-only transaction summed {sum}"));
                        }
                    }
                }
            }
        }));
    }
    // The fault: a voter dies mid-load and comes back.
    std::thread::sleep(LOAD / 3);
    cluster.process("replica-b").kill();
    std::thread::sleep(LOAD / 4);
    cluster.start_process("replica-b");
    for task in tasks {
        runtime.block_on(task).unwrap();
    }
    let (transfers, checked) = (
        tally.transfers.load(Ordering::Relaxed),
        tally.sums_checked.load(Ordering::Relaxed),
    );
    assert!(transfers >= 20, "too few transfers to tell: {transfers}");
    assert!(checked >= 20, "too few sums to tell: {checked}");
    let bad = tally.bad_sums.lock().unwrap().clone();
    assert!(
        bad.is_empty(),
        "{} of {checked} read-only transactions saw more than one position: {bad:?}",
        bad.len()
    );
    // And the money is all there at the end.
    let mut api = runtime.block_on(async { api_at(&address) });
    assert_eq!(runtime.block_on(grpc_sum(&mut api, true)).unwrap(), TOTAL);
}
