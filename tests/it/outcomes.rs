//! Outcomes a gRPC client can act on: the replica serving a stream of commits dies
//! with commits in flight; each client resolves them by id through another replica,
//! runs again only what was resolved as not committed, and in the end every write it
//! was told committed is there exactly once and every one resolved as not committed
//! is absent. The same holds when that replica, the groups' position leader, is
//! started again and the clients go back to it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use tonic::transport::Channel;

use crate::support::{api_at, grpc_resolve, start_cluster};

const WRITERS: usize = 3;
/// Writes each writer makes (bounded in time too).
const WRITES: u64 = 300;
/// Writes a writer makes at most when its time is what bounds it.
const WRITES_TIMED: u64 = 5_000;

fn cell(key: &[u8], value: &[u8]) -> pb::RowWrite {
    pb::RowWrite {
        key: key.to_vec(),
        cells: vec![pb::CellWrite {
            column: b"v".to_vec(),
            change: Some(pb::cell_write::Change::Set(value.to_vec())),
        }],
    }
}

fn value(rows: &[pb::Row], key: &[u8]) -> Option<String> {
    rows.iter()
        .find(|r| r.key == key)
        .and_then(|r| r.cells.first())
        .map(|c| String::from_utf8_lossy(&c.value).into_owned())
}

/// What one writer saw.
#[derive(Debug, Default)]
struct Seen {
    /// Tags of transactions acknowledged as committed, or resolved so.
    committed: BTreeSet<String>,
    /// Tags of transactions resolved as not committed.
    not_committed: BTreeSet<String>,
    /// Commits that ended without a definite answer.
    indefinite: u64,
    /// When each commit acknowledged through the first address was acknowledged.
    acknowledged_at_first: Vec<Instant>,
}

/// One attempt at write `i`: append it to the group's log of slots. Returns the
/// transaction's tag and id, and the commit's answer.
async fn attempt(
    api: &mut MegastoreClient<Channel>,
    group: &[u8],
    i: u64,
) -> Result<(String, pb::TxnId, Result<pb::CommitResponse, tonic::Status>), tonic::Status> {
    let begun = api
        .begin(pb::BeginRequest {
            eg: group.to_vec(),
            root: None,
            ..Default::default()
        })
        .await?
        .into_inner();
    let id = begun.id.expect("Begin returns the transaction's id");
    let tag = format!("{i}/{}.{}", id.client, id.seq);
    let rows = api
        .txn_read(pb::TxnReadRequest {
            txn: begun.txn,
            keys: vec![b"count".to_vec()],
        })
        .await?
        .into_inner()
        .rows;
    let count: u64 = value(&rows, b"count").map_or(0, |v| v.parse().unwrap());
    api.write(pb::WriteRequest {
        txn: begun.txn,
        rows: vec![
            cell(b"count", (count + 1).to_string().as_bytes()),
            cell(format!("slot-{count:05}").as_bytes(), tag.as_bytes()),
        ],
    })
    .await?;
    let answer = api
        .commit(pb::CommitRequest { txn: begun.txn })
        .await
        .map(tonic::Response::into_inner);
    Ok((tag, id, answer))
}

/// How a writer writes.
#[derive(Clone)]
struct Load {
    /// Writes it makes at most.
    writes: u64,
    /// When it stops anyway.
    deadline: Instant,
    /// After a failure at the first address, only the next attempt goes to the second
    /// (as a client whose replica restarts goes back to it), not all the rest.
    return_to_first: bool,
    /// Commits acknowledged so far, by every writer of the load.
    acknowledged: Arc<AtomicUsize>,
}

impl Load {
    fn new(writes: u64, duration: Duration, return_to_first: bool) -> Self {
        Self {
            writes,
            deadline: Instant::now() + duration,
            return_to_first,
            acknowledged: Arc::default(),
        }
    }
}

/// Writes through the first address, and through the second once the first fails.
async fn writer(addresses: [String; 2], group: Vec<u8>, load: Load) -> Seen {
    let mut apis = addresses.map(|a| api_at(&a));
    let mut serving = 0;
    let mut seen = Seen::default();
    let mut i = 0;
    while i < load.writes && Instant::now() < load.deadline {
        let at = serving;
        if load.return_to_first {
            serving = 0;
        }
        let (tag, id, answer) = match attempt(&mut apis[at], &group, i).await {
            Ok(done) => done,
            // Nothing was committed yet (no Commit was sent): go to the other replica.
            Err(_) => {
                serving = 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        use pb::commit_response::Outcome;
        match answer.map(|r| r.outcome) {
            Ok(Some(Outcome::Committed(_))) => {
                seen.committed.insert(tag);
                load.acknowledged.fetch_add(1, Ordering::Relaxed);
                if at == 0 {
                    seen.acknowledged_at_first.push(Instant::now());
                }
                i += 1;
            }
            Ok(_) => {} // a conflict: nothing applied, run it again
            Err(_) => {
                // Indefinite (UNKNOWN, or no answer at all): resolve it elsewhere.
                seen.indefinite += 1;
                if grpc_resolve(&mut apis[1], &group, id).await {
                    seen.committed.insert(tag);
                    i += 1;
                } else {
                    seen.not_committed.insert(tag);
                }
                if !load.return_to_first {
                    serving = 1;
                }
            }
        }
    }
    seen
}

/// Makes each writer's group and its first commit through `address`, so that the
/// groups exist and coordinators hold their locks before the load.
fn first_commits(runtime: &tokio::runtime::Runtime, address: &str) {
    for w in 0..WRITERS {
        let group = format!("ledger-{w}").into_bytes();
        let mut api = runtime.block_on(async { api_at(address) });
        let started = Instant::now();
        while !matches!(
            runtime.block_on(attempt(&mut api, &group, 999)),
            Ok((_, _, Ok(_)))
        ) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no first commit"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Reads each writer's slots through `address`: every write a writer was told (or
/// resolved) committed is there exactly once, none resolved as not committed is, and
/// no write was applied twice under any transaction.
fn check_exactly_once(runtime: &tokio::runtime::Runtime, address: &str, seen: &[Seen]) {
    let mut api = runtime.block_on(async { api_at(address) });
    for (w, seen) in seen.iter().enumerate() {
        let group = format!("ledger-{w}").into_bytes();
        let rows = runtime
            .block_on(api.read(pb::ReadRequest {
                eg: group,
                mode: pb::ReadMode::Current.into(),
                query: Some(pb::RowQuery {
                    query: Some(pb::row_query::Query::Range(pb::row_query::Range {
                        start: b"slot-".to_vec(),
                        end: b"slot.".to_vec(),
                        limit: 0,
                    })),
                }),
            }))
            .unwrap()
            .into_inner()
            .rows;
        let mut present: BTreeMap<String, usize> = BTreeMap::new();
        let mut writes: BTreeMap<String, usize> = BTreeMap::new();
        for row in &rows {
            let tag = value(std::slice::from_ref(row), &row.key).unwrap();
            *writes
                .entry(tag.split('/').next().unwrap().to_string())
                .or_default() += 1;
            *present.entry(tag).or_default() += 1;
        }
        for tag in &seen.committed {
            assert_eq!(
                present.get(tag),
                Some(&1),
                "writer {w}: {tag} not exactly once"
            );
        }
        for tag in &seen.not_committed {
            assert_eq!(
                present.get(tag),
                None,
                "writer {w}: {tag} resolved as not committed, yet present"
            );
        }
        // No write applied twice, under any transaction.
        for (i, n) in &writes {
            assert_eq!(*n, 1, "writer {w}: write {i} applied {n} times");
        }
    }
}

/// One writer per ledger group, each through `addresses` under `load`.
fn spawn_writers(
    runtime: &tokio::runtime::Runtime,
    addresses: &[String; 2],
    load: &Load,
) -> Vec<tokio::task::JoinHandle<Seen>> {
    (0..WRITERS)
        .map(|w| {
            let group = format!("ledger-{w}").into_bytes();
            runtime.spawn(writer(addresses.clone(), group, load.clone()))
        })
        .collect()
}

/// What each writer saw, once all ended.
fn join_writers(
    runtime: &tokio::runtime::Runtime,
    writers: Vec<tokio::task::JoinHandle<Seen>>,
) -> Vec<Seen> {
    writers
        .into_iter()
        .map(|w| runtime.block_on(w).unwrap())
        .collect()
}

#[test]
fn commits_whose_replica_died_are_resolved_by_id_elsewhere_and_apply_exactly_once() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let addresses = [
        config.replica("a").unwrap().address.clone(),
        config.replica("b").unwrap().address.clone(),
    ];
    first_commits(&runtime, &addresses[0]);
    let load = Load::new(WRITES, Duration::from_secs(40), false);
    let writers = spawn_writers(&runtime, &addresses, &load);
    // Commits through a stall once the other voters stop: a has them in flight when
    // it is killed.
    std::thread::sleep(Duration::from_secs(1));
    cluster.process("replica-b").signal("STOP");
    cluster.process("replica-c").signal("STOP");
    std::thread::sleep(Duration::from_millis(500));
    cluster.process("replica-a").kill();
    cluster.process("replica-b").signal("CONT");
    cluster.process("replica-c").signal("CONT");
    let seen = join_writers(&runtime, writers);

    let indefinite: u64 = seen.iter().map(|s| s.indefinite).sum();
    assert!(indefinite >= 1, "no commit was left in flight: {seen:?}");
    for (w, seen) in seen.iter().enumerate() {
        assert!(
            seen.committed.len() >= 10,
            "writer {w} barely wrote: {seen:?}"
        );
    }
    check_exactly_once(&runtime, &addresses[1], &seen);
}

/// The position leader (replica a, the writers' own) is killed with commits in
/// flight and started again while the writers go on, back through it once it serves:
/// its grants were in memory only, so a restarted leader judges each request again from
/// the ballot-0 slots it stored (docs/protocol.md, "The grant is durable as its slot").
/// Every acknowledged write is present exactly once, and the restarted leader
/// acknowledged writes of its own.
#[test]
fn a_position_leader_killed_and_restarted_under_writers_applies_each_write_exactly_once() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let addresses = [
        config.replica("a").unwrap().address.clone(),
        config.replica("b").unwrap().address.clone(),
    ];
    first_commits(&runtime, &addresses[0]);
    // Time bounds the writers: they write on for seconds after the restart.
    let load = Load::new(WRITES_TIMED, Duration::from_secs(12), true);
    let writers = spawn_writers(&runtime, &addresses, &load);
    // Killed under load: once the writers have 20 commits each acknowledged.
    while load.acknowledged.load(Ordering::Relaxed) < 20 * WRITERS {
        assert!(Instant::now() < load.deadline, "the writers barely wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster.process("replica-a").kill();
    // Down for a while: the writers fail over to b and resolve what a had in flight.
    std::thread::sleep(Duration::from_millis(500));
    cluster.start_process("replica-a");
    let restarted = Instant::now();
    let seen = join_writers(&runtime, writers);
    for (w, seen) in seen.iter().enumerate() {
        let after_restart = seen
            .acknowledged_at_first
            .iter()
            .filter(|at| **at > restarted)
            .count();
        assert!(
            after_restart >= 10,
            "writer {w}: {after_restart} writes acknowledged by the restarted leader, {} in all",
            seen.committed.len()
        );
    }
    check_exactly_once(&runtime, &addresses[1], &seen);
}

/// Transactions begun at one position and committed at once through one replica's
/// gateway land at several positions: its client core commits one entry per group at a
/// time, and the others wait behind it and go in the next. Each `Begin` id names the
/// position after Begin's, the first the transaction may hold; `Resolve` by that id,
/// asked at the other full replica, must find each where it landed (it settles the
/// transaction's whole commit span), and never call one of them not committed.
#[test]
fn resolve_by_a_begin_id_finds_a_commit_that_landed_past_its_first_position() {
    use pb::resolve_response::Outcome;
    const TRANSACTIONS: usize = 8;
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    let (at_a, at_b) = (
        config.replica("a").unwrap().address.clone(),
        config.replica("b").unwrap().address.clone(),
    );
    let group = b"resolve-span".to_vec();
    runtime.block_on(async {
        let mut api = api_at(&at_a);
        let started = Instant::now();
        while !matches!(attempt(&mut api, &group, 0).await, Ok((_, _, Ok(_)))) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no first commit"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut begun = Vec::new();
        for i in 0..TRANSACTIONS {
            let b = api
                .begin(pb::BeginRequest {
                    eg: group.clone(),
                    root: None,
                    ..Default::default()
                })
                .await
                .expect("Begin")
                .into_inner();
            api.write(pb::WriteRequest {
                txn: b.txn,
                rows: vec![cell(format!("span-{i}").as_bytes(), b"v")],
            })
            .await
            .expect("Write");
            begun.push(b);
        }
        let first = begun[0].id.expect("an id").position;
        assert!(
            begun.iter().all(|b| b.id.expect("an id").position == first),
            "nothing committed between the Begins: one first position"
        );
        let mut commits = tokio::task::JoinSet::new();
        for b in &begun {
            let (mut api, txn) = (api.clone(), b.txn);
            commits.spawn(async move {
                let answer = api.commit(pb::CommitRequest { txn }).await;
                (txn, answer.map(tonic::Response::into_inner))
            });
        }
        let mut landed = BTreeMap::new();
        while let Some(joined) = commits.join_next().await {
            let (txn, answer) = joined.expect("a commit task");
            let outcome = answer.expect("an answer").outcome;
            let Some(pb::commit_response::Outcome::Committed(at)) = outcome else {
                panic!("blind writes of distinct rows all commit: {outcome:?}");
            };
            landed.insert(txn, at.position);
        }
        let past_first = landed.values().filter(|p| **p != first).count();
        assert!(
            past_first >= 1,
            "every commit landed at its first position {first}: nothing to resolve past it"
        );
        let mut elsewhere = api_at(&at_b);
        for b in &begun {
            let answer = elsewhere
                .resolve(pb::ResolveRequest {
                    eg: group.clone(),
                    root: None,
                    id: b.id,
                })
                .await
                .expect("Resolve")
                .into_inner()
                .outcome;
            match answer {
                Some(Outcome::Committed(at)) => {
                    assert_eq!(at.position, landed[&b.txn], "resolved where it landed")
                }
                other => panic!(
                    "transaction committed at {} (first {first}) resolved as {other:?}",
                    landed[&b.txn]
                ),
            }
        }
    });
}
