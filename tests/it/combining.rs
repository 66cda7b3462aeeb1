//! Combined commits over real processes (docs/protocol.md, "Combining commits" and
//! "Relayed commits"): many tasks commit to one hot group at once — each a
//! read-modify-write of its own counter plus a row of its own, or (every other task)
//! a blind write of a row of its own — while a full replica is killed and restarted.
//! Either the tasks share one client, as an application server's request handlers do,
//! and its core makes them share log entries (its blind writes commit on the read of
//! the client's commit in flight, without reading the group); or each has a client of
//! its own, and they relay their commits through site A's full replica, whose shared
//! client combines them — and that replica is the one killed. Checked: every
//! acknowledged increment is in its counter exactly once (a counter is at least its
//! acknowledged increments and at most those plus the ones whose outcome stayed
//! unknown), every acknowledged row is present, every row of a transaction that did not
//! commit is absent, and some positions did hold several acknowledged transactions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_client::{Attempt, Client, ClientError, Outcome};
use megastore_metrics::ReadPathLabel;
use megastore_paxos::{DataQuery, ReadMode};
use megastore_types::{EgId, Position};

use crate::support::{
    connect, counter_value, start_cluster, start_cluster_with, wait_for_acks, wan_between_all_sites,
};

/// Tasks sharing the client.
const TASKS: usize = 16;
/// Transactions each task tries at most (and the load stops after `LOAD` anyway).
const ATTEMPTS: usize = 1_000;
const LOAD: Duration = Duration::from_secs(12);

fn group() -> EgId {
    megastore_client::group(b"hot").unwrap()
}

fn counter(task: usize) -> Vec<u8> {
    format!("count-{task:02}").into_bytes()
}

fn note(task: usize, attempt: usize) -> Vec<u8> {
    format!("note-{task:02}-{attempt:03}").into_bytes()
}

/// What one task saw.
#[derive(Debug, Default)]
struct Seen {
    /// Attempts acknowledged, with their positions.
    committed: Vec<(usize, Position)>,
    /// Attempts that did not commit (conflict, or settled without them).
    not_committed: Vec<usize>,
    /// Attempts whose outcome stayed unknown (an error after the commit was sent).
    unknown: Vec<usize>,
}

/// Whether `task` writes blind (its notes only) rather than read-modify-write.
fn blind(task: usize) -> bool {
    task % 2 == 1
}

async fn task(client: Client, task: usize, deadline: Instant, acked: Arc<AtomicUsize>) -> Seen {
    let eg = group();
    let mut seen = Seen::default();
    for attempt in 0..ATTEMPTS {
        if Instant::now() >= deadline {
            break;
        }
        let mut txn = client.begin(&eg);
        let result: Result<Attempt, ClientError> = async {
            if !blind(task) {
                let next = counter_value(txn.get(&counter(task)).await?) + 1;
                txn.set(&counter(task), b"n", next.to_string().as_bytes())?;
            }
            txn.set(&note(task, attempt), b"n", b"1")?;
            txn.commit().await
        }
        .await;
        match result {
            Ok(Attempt::Done(Outcome::Committed { position, .. })) => {
                seen.committed.push((attempt, position));
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Attempt::Done(other)) => panic!("task {task}: a write ended {other:?}"),
            Ok(Attempt::Retry { .. }) => seen.not_committed.push(attempt),
            // Before the commit was sent (a read failed during the fault) nothing can
            // land, but the attempt is counted as unknown all the same: the checks
            // below only allow an unknown one, never require it.
            Err(_) => {
                seen.unknown.push(attempt);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    seen
}

/// Runs the tasks over `clients` (task `t` uses `clients[t % clients.len()]`) on the
/// group, kills `victim` once 200 transactions were acknowledged and starts it again
/// 200 later; then checks every task's outcomes against the group's rows. Returns the
/// tasks' outcomes.
fn load_through_a_kill(
    cluster: &mut megastore_e2e::LocalCluster,
    runtime: &tokio::runtime::Runtime,
    clients: &[Client],
    victim: &str,
) -> Vec<Seen> {
    let eg = group();
    // The group exists before the load.
    runtime.block_on(crate::support::create_group(&clients[0], &eg));
    let deadline = Instant::now() + LOAD;
    let acked = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let client = clients[t % clients.len()].clone();
            runtime.spawn(task(client, t, deadline, acked.clone()))
        })
        .collect();
    // The replica dies under load, commits go on without it, and it comes back while
    // they still do.
    wait_for_acks(&acked, 200, Duration::from_secs(20));
    cluster.process(victim).kill();
    let at_kill = acked.load(Ordering::Relaxed);
    wait_for_acks(&acked, at_kill + 200, Duration::from_secs(20));
    cluster.start_process(victim);
    let seen: Vec<Seen> = tasks
        .into_iter()
        .map(|t| runtime.block_on(t).unwrap())
        .collect();
    assert!(
        Instant::now() >= deadline,
        "the load ended before the fault was over: raise ATTEMPTS"
    );
    check_rows(runtime, &clients[0], &seen);
    seen
}

/// Every acknowledged increment once in its counter, every acknowledged row present,
/// every row of an attempt that did not commit absent, and a tenth of the positions
/// holding several acknowledged transactions.
fn check_rows(runtime: &tokio::runtime::Runtime, client: &Client, seen: &[Seen]) {
    let eg = group();
    let read = runtime
        .block_on(client.read(
            &eg,
            ReadMode::Current,
            DataQuery::Scan {
                range: megastore_rowstore::KeyRange::all(),
                limit: None,
                reverse: false,
            },
        ))
        .expect("a current read after the load");
    let rows: BTreeMap<Vec<u8>, megastore_rowstore::Row> =
        read.rows.into_iter().map(|r| (r.key.clone(), r)).collect();
    let mut by_position: BTreeMap<Position, usize> = BTreeMap::new();
    for (t, seen) in seen.iter().enumerate() {
        assert!(
            seen.committed.len() >= 5,
            "task {t} barely committed: {seen:?}"
        );
        let value = counter_value(rows.get(&counter(t)).cloned());
        let acked = if blind(t) {
            0
        } else {
            seen.committed.len() as u64
        };
        assert!(
            (acked..=acked + seen.unknown.len() as u64).contains(&value),
            "task {t}: counter {value}, {acked} increments acknowledged, {} unknown",
            seen.unknown.len()
        );
        for (attempt, position) in &seen.committed {
            assert!(
                rows.contains_key(&note(t, *attempt)),
                "task {t}: attempt {attempt}, acknowledged at {position}, is missing"
            );
            *by_position.entry(*position).or_default() += 1;
        }
        for attempt in &seen.not_committed {
            assert!(
                !rows.contains_key(&note(t, *attempt)),
                "task {t}: attempt {attempt} did not commit, yet its row is there"
            );
        }
    }
    let shared: BTreeSet<&Position> = by_position
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, _)| p)
        .collect();
    let committed: usize = by_position.values().sum();
    assert!(
        shared.len() * 10 >= by_position.len(),
        "only {} of {} positions held several of the {committed} acknowledged transactions",
        shared.len(),
        by_position.len()
    );
}

#[test]
fn transactions_sharing_a_client_combine_and_each_applies_exactly_once_through_a_kill() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let client = runtime.block_on(connect(&config, "A"));
    let seen = load_through_a_kill(
        &mut cluster,
        &runtime,
        std::slice::from_ref(&client),
        "replica-b",
    );
    let blind_acked: usize = (0..TASKS)
        .filter(|t| blind(*t))
        .map(|t| seen[t].committed.len())
        .sum();
    // Its only competitor is itself: it never relays (docs/protocol.md, "Relayed
    // commits").
    assert_eq!(
        client.metrics().relayed_count("sent"),
        0,
        "a lone client relayed"
    );
    let unread = client.metrics().blind_writes_unread();
    assert!(
        unread as usize * 2 >= blind_acked,
        "only {unread} of {blind_acked} acknowledged blind writes went without a read"
    );
}

#[test]
fn separate_clients_relay_a_hot_groups_commits_and_each_applies_exactly_once_through_the_relays_kill()
 {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let clients: Vec<Client> = (0..TASKS)
        .map(|_| runtime.block_on(connect(&config, "A")))
        .collect();
    // Site A's full replica is every client's relay: it dies under the load.
    let seen = load_through_a_kill(&mut cluster, &runtime, &clients, "replica-a");
    let acked: usize = seen.iter().map(|s| s.committed.len()).sum();
    let relayed: u64 = clients
        .iter()
        .map(|c| c.metrics().relayed_count("sent"))
        .sum();
    let unanswered: u64 = clients
        .iter()
        .map(|c| c.metrics().relayed_count("unanswered"))
        .sum();
    assert!(
        relayed as usize * 2 >= acked,
        "only {relayed} of {acked} acknowledged transactions were relayed ({unanswered} unanswered)"
    );
    // A blind write's basis is a snapshot read (docs/protocol.md, "A blind write's
    // basis"; the relay's while relayed, "Relayed commits", step 6), which never waits
    // for the relay's entry in flight; these tasks make no other snapshot reads.
    let blind_acked: usize = (0..TASKS)
        .filter(|t| blind(*t))
        .map(|t| seen[t].committed.len())
        .sum();
    let snapshots: u64 = clients
        .iter()
        .map(|c| c.metrics().read_count(ReadPathLabel::Snapshot))
        .sum();
    assert!(
        snapshots as usize * 2 >= blind_acked,
        "only {snapshots} snapshot reads for {blind_acked} acknowledged blind writes"
    );
}

/// Emulated round trip between every two sites of the test cluster.
const FAR_RTT_MS: u64 = 40;

#[test]
fn writers_at_two_far_sites_share_a_hot_group_fairly_through_a_witness_kill() {
    // Each site's relay sits beside a full replica; the one beside the position leader
    // wins every grant, so relays that duel starve the other site's writers — unless
    // those follow the leader to its relay (docs/protocol.md, "Relayed commits").
    let wan = wan_between_all_sites(FAR_RTT_MS);
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster_with(&wan);
    // Task t writes through client t: sites A, A, B, B, A, A, ... (blind and
    // read-modify-write tasks at both).
    let site = |t: usize| if t % 4 < 2 { "A" } else { "B" };
    let clients: Vec<Client> = (0..TASKS)
        .map(|t| runtime.block_on(connect(&config, site(t))))
        .collect();
    let seen = load_through_a_kill(&mut cluster, &runtime, &clients, "replica-c");
    let acked = |at: &str| -> usize {
        (0..TASKS)
            .filter(|t| site(*t) == at)
            .map(|t| seen[t].committed.len())
            .sum()
    };
    let (a, b) = (acked("A"), acked("B"));
    assert!(
        a.min(b) * 4 >= a.max(b),
        "one site starved: {a} transactions acknowledged at site A, {b} at site B"
    );
}
