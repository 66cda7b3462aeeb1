//! A busy cluster's logs stay short: every replica's sweep truncates each group once its
//! log outgrows `[history] log_positions` + 64 positions, however many groups are busy,
//! and a replica back from a kill catches up every group it missed at its next sweeps
//! (docs/protocol.md, "Truncation"). Before, each sweep probed one group, in turn:
//! with many busy groups the logs — in memory and in the root rows — grew for as long
//! as the writes went on, and a replica back from a fault lagged for a sweep per group.
//!
//! Eight clients at sites A and B write blind to 40 groups in turn while the read-only
//! replica is killed and started again. Checked: every acknowledged write is readable
//! afterwards, and within a few sweeps of the load's end every replica holds every
//! group's newest position and at most 65 positions of its log above what it truncated.
//!
//! A replica that stays down holds the others' truncation back only up to `[history]
//! outage_log_positions` (docs/protocol.md, "The sweep, and truncation"): the same
//! writers, eight groups, the read-only replica killed early and kept down until the
//! load ends. Checked: meanwhile the other replicas' logs stay within the bound, and,
//! back, the read-only replica installs snapshots, holds each group's newest position
//! and serves every acknowledged write. Without the bound each log held every position
//! since the kill.
//!
//! A replica back from an outage catches up every group it missed writes to within a
//! few sweeps, written since or not, and finds the groups first written while it was
//! away: 150 groups written once each with every replica up and once more while the
//! read-only replica is down, 50 more written first while it is down, none after it is
//! back. Checked: within 12 sweeps of its first answer it holds every group's newest
//! position, and its snapshot reads serve every acknowledged write. Before, its sweep
//! found such idle groups one a sweep, and the new groups never (in no registry of
//! its own, they were read there as empty until their next write).
//!
//! A group larger than 64 MiB is installed too: 71 MB written to one group, the
//! read-only replica away past the outage bound. Checked: back, it installs the
//! group's snapshot and serves the writes. Before, the reply exceeded the gRPC
//! message limit and the replica stayed behind for good.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_client::{Attempt, Client, Outcome};
use megastore_paxos::{DataQuery, LogState, ReadMode};
use megastore_types::{EgId, Position, ReplicaId};

use crate::support::{connect, counter_value, eg, start_cluster_with, wait_for_acks};

const GROUPS: u32 = 40;
const WRITERS: usize = 8;
/// Commits each writer makes, over all the groups in turn: 120 positions a group.
const COMMITS_PER_WRITER: usize = 600;
/// The log a group may hold above its truncation point once the load ended: the
/// sweep's bound (`log_positions` 0 + 64) and the one position truncation keeps.
const LOG_HELD_MAX: u64 = 65;
/// `[history] outage_log_positions` in the outage test: the least allowed with
/// `log_positions` 0.
const OUTAGE_LOG_POSITIONS: u64 = 128;
const OUTAGE_GROUPS: u32 = 8;
/// Commits each writer makes in the outage test: 400 positions a group, about 350 of
/// them while the read-only replica is down.
const OUTAGE_COMMITS_PER_WRITER: usize = 400;
/// Groups written once with every replica up, once more while the read-only replica is
/// down, none after.
const IDLE_GROUPS: u32 = 150;
/// Groups first written while the read-only replica is down, none after.
const NEW_GROUPS: u32 = 50;
/// Rows of 99 kB written to the large group: about 71 MB of data, past the 64 MiB of
/// a request (`megastore_types::limits::MESSAGE_BYTES_MAX`).
const LARGE_ROWS: usize = 720;

fn groups() -> Vec<EgId> {
    (0..GROUPS).map(|i| eg(700 + i)).collect()
}

/// The groups written with every replica up and while the read-only replica is down.
fn idle_groups() -> Vec<EgId> {
    (0..IDLE_GROUPS).map(|i| eg(1000 + i)).collect()
}

/// The groups first written while the read-only replica is down: in no registry of its.
fn new_groups() -> Vec<EgId> {
    (0..NEW_GROUPS).map(|i| eg(1500 + i)).collect()
}

/// The groups of the outage test.
fn outage_groups() -> Vec<EgId> {
    (0..OUTAGE_GROUPS).map(|i| eg(800 + i)).collect()
}

fn key(writer: usize) -> Vec<u8> {
    format!("w-{writer}").into_bytes()
}

/// Writes 1, 2, 3, … to its key in each group in turn, blind; returns, for each
/// group, the values the key may hold: the last acknowledged, and any written after
/// it whose outcome the writer did not learn (an error).
async fn writer(
    client: Client,
    w: usize,
    groups: Vec<EgId>,
    commits_to_make: usize,
    count: Arc<AtomicUsize>,
) -> Vec<Vec<u64>> {
    let mut may_hold = vec![vec![0u64]; groups.len()];
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut commits = 0;
    let mut value = 0u64;
    while commits < commits_to_make && Instant::now() < deadline {
        value += 1;
        let g = (w + commits) % groups.len();
        let mut txn = client.begin(&groups[g]);
        let result = match txn.set(&key(w), b"n", value.to_string().as_bytes()) {
            Ok(()) => txn.commit().await,
            Err(e) => Err(e),
        };
        match result {
            Ok(Attempt::Done(Outcome::Committed { .. })) => {
                may_hold[g] = vec![value];
                commits += 1;
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Attempt::Done(other)) => panic!("writer {w}: a write ended {other:?}"),
            Ok(Attempt::Retry { .. }) => {}
            Err(_) => {
                may_hold[g].push(value);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    may_hold
}

/// The writers' load running: a client each (at sites A and B in turn), the count of
/// their acknowledged commits, and each writer's task ([`writer`]'s result).
type Writers = (
    Vec<Client>,
    Arc<AtomicUsize>,
    Vec<tokio::task::JoinHandle<Vec<Vec<u64>>>>,
);

fn start_writers(
    runtime: &tokio::runtime::Runtime,
    config: &megastore_config::ClusterConfig,
    groups: Vec<EgId>,
    commits_each: usize,
) -> Writers {
    let clients: Vec<Client> = (0..WRITERS)
        .map(|w| runtime.block_on(connect(config, ["A", "B"][w % 2])))
        .collect();
    let count = Arc::new(AtomicUsize::new(0));
    let writers = clients
        .iter()
        .enumerate()
        .map(|(w, client)| {
            let load = writer(
                client.clone(),
                w,
                groups.clone(),
                commits_each,
                count.clone(),
            );
            runtime.spawn(load)
        })
        .collect();
    (clients, count, writers)
}

fn writers_keys() -> Vec<Vec<u8>> {
    (0..WRITERS).map(key).collect()
}

/// `rows` (group `g` of the writers' list, `group`) hold each writer's last
/// acknowledged value, or one written after it whose outcome it did not learn.
fn assert_acknowledged(
    group: &EgId,
    g: usize,
    rows: &[megastore_rowstore::Row],
    may_hold: &[Vec<Vec<u64>>],
) {
    for (w, may_hold) in may_hold.iter().enumerate() {
        let row = rows.iter().find(|r| r.key == key(w)).cloned();
        let value = counter_value(row);
        assert!(
            may_hold[g].contains(&value),
            "{group}: writer {w}'s key holds {value}, not one of {:?}",
            may_hold[g]
        );
    }
}

#[test]
fn busy_groups_logs_are_truncated_as_they_grow_and_a_killed_replica_catches_up() {
    let (_alone, _dir, mut cluster, config, runtime) =
        start_cluster_with("\n[history]\nlog_positions = 0\n");
    let (clients, count, writers) = start_writers(&runtime, &config, groups(), COMMITS_PER_WRITER);
    let total = WRITERS * COMMITS_PER_WRITER;
    wait_for_acks(&count, total / 3, Duration::from_secs(60));
    cluster.process("replica-d").kill();
    wait_for_acks(&count, total * 2 / 3, Duration::from_secs(60));
    cluster.start_process("replica-d");
    let may_hold: Vec<Vec<Vec<u64>>> = writers
        .into_iter()
        .map(|w| runtime.block_on(w).unwrap())
        .collect();
    let commits = count.load(Ordering::Relaxed);
    assert_eq!(commits, total, "every writer made its commits");

    runtime.block_on(async {
        // Every acknowledged write is there.
        for (g, group) in groups().iter().enumerate() {
            let read = clients[0]
                .read(group, ReadMode::Current, DataQuery::Rows(writers_keys()))
                .await
                .expect("a current read");
            assert_acknowledged(group, g, &read.rows, &may_hold);
        }
        // Within a few sweeps every replica holds each group's newest position, and
        // a short log above what it truncated.
        let peers = megastore_rpc::Peers::new(&config).expect("the cluster's peers");
        let patience = Duration::from_millis(config.timeouts.sweep_ms * 12);
        let started = Instant::now();
        for group in &groups() {
            loop {
                let status =
                    megastore_client::status::cluster_status(&config, &peers, Some(group)).await;
                let newest = status
                    .replicas
                    .iter()
                    .filter_map(|r| r.log.map(|log| log.visible))
                    .max();
                let long: Vec<_> = status
                    .replicas
                    .iter()
                    .filter(|r| {
                        r.log.is_none_or(|log| {
                            Some(log.visible) != newest
                                || log.visible.0 - log.truncated.0 > LOG_HELD_MAX
                        })
                    })
                    .map(|r| (r.name.clone(), r.log))
                    .collect();
                if long.is_empty() {
                    break;
                }
                assert!(
                    started.elapsed() < patience,
                    "{group}: {:?} after the load, not caught up or not truncated at {long:?}",
                    started.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}

#[test]
fn a_replica_down_holds_truncation_back_only_up_to_the_outage_bound_and_installs_snapshots_back() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster_with(&format!(
        "\n[history]\nlog_positions = 0\noutage_log_positions = {OUTAGE_LOG_POSITIONS}\n"
    ));
    let (clients, count, writers) = start_writers(
        &runtime,
        &config,
        outage_groups(),
        OUTAGE_COMMITS_PER_WRITER,
    );
    let total = WRITERS * OUTAGE_COMMITS_PER_WRITER;
    // Every group has some positions at the read-only replica, which then stays down.
    wait_for_acks(&count, total / 8, Duration::from_secs(60));
    cluster.process("replica-d").kill();
    let may_hold: Vec<Vec<Vec<u64>>> = writers
        .into_iter()
        .map(|w| runtime.block_on(w).unwrap())
        .collect();
    assert_eq!(
        count.load(Ordering::Relaxed),
        total,
        "every writer made its commits"
    );

    let peers = {
        let _in_runtime = runtime.enter();
        megastore_rpc::Peers::new(&config).expect("the cluster's peers")
    };
    let patience = Duration::from_millis(config.timeouts.sweep_ms * 12);
    let status = |group: EgId| {
        let (config, peers) = (&config, &peers);
        async move { megastore_client::status::cluster_status(config, peers, Some(&group)).await }
    };
    runtime.block_on(async {
        // With the read-only replica down, every other replica's log of each group is
        // within the bound within a few sweeps — far shorter than the positions
        // written since the kill.
        let started = Instant::now();
        let mut newest = Vec::new();
        for group in outage_groups() {
            loop {
                let status = status(group.clone()).await;
                let logs: Vec<_> = status
                    .replicas
                    .iter()
                    .filter(|r| r.name != "d")
                    .map(|r| (r.name.clone(), r.log))
                    .collect();
                let held = |log: &Option<LogState>| {
                    log.map_or(u64::MAX, |log| log.visible.0 - log.truncated.0)
                };
                if logs
                    .iter()
                    .all(|(_, log)| held(log) <= OUTAGE_LOG_POSITIONS)
                {
                    let visible = logs.iter().filter_map(|(_, log)| log.map(|l| l.visible));
                    newest.push(visible.max().expect("a log"));
                    break;
                }
                assert!(
                    started.elapsed() < patience,
                    "{group}: {:?} after the load, logs held back past the bound: {logs:?}",
                    started.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        for (group, newest) in outage_groups().iter().zip(&newest) {
            assert!(
                newest.0 > 2 * OUTAGE_LOG_POSITIONS,
                "{group}: only {newest:?} written, the bound was never tested"
            );
        }
    });

    // Back, the read-only replica installs each group's snapshot (its positions since
    // the kill are truncated everywhere), and serves every acknowledged write.
    cluster.start_process("replica-d");
    runtime.block_on(async {
        let at_d = connect(&config, "D").await;
        let started = Instant::now();
        for (g, group) in outage_groups().iter().enumerate() {
            loop {
                let read = at_d
                    .read(group, ReadMode::Snapshot, DataQuery::Rows(writers_keys()))
                    .await;
                let current = clients[0]
                    .read(group, ReadMode::Current, DataQuery::Rows(writers_keys()))
                    .await
                    .expect("a current read");
                if let Ok(read) = read
                    && read.replica == ReplicaId(4)
                    && read.position == current.position
                {
                    assert_acknowledged(group, g, &read.rows, &may_hold);
                    // Cells' timestamps may differ (an install writes its cells at
                    // its position); their values may not.
                    let values = |rows: &[megastore_rowstore::Row]| -> Vec<u64> {
                        (0..WRITERS)
                            .map(|w| counter_value(rows.iter().find(|r| r.key == key(w)).cloned()))
                            .collect()
                    };
                    assert_eq!(values(&read.rows), values(&current.rows), "{group}");
                    break;
                }
                assert!(
                    started.elapsed() < patience,
                    "{group}: the read-only replica not caught up {:?} after its restart",
                    started.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    // It caught up by snapshots: its positions since the kill were truncated everywhere.
    let metrics = config
        .replica("d")
        .and_then(|r| r.metrics_address.clone())
        .expect("the read-only replica's metrics address");
    let text = megastore_e2e::scrape_metrics(&metrics);
    let installs = megastore_e2e::metric_value(&text, "megastore_replica_snapshot_installs_total");
    assert!(
        installs.is_some_and(|n| n >= f64::from(OUTAGE_GROUPS)),
        "the read-only replica installed {installs:?} snapshots, not one a group"
    );
}

/// `replica`'s log state of `group`, if it answers with one.
async fn log_at(peers: &megastore_rpc::Peers, replica: u16, group: &EgId) -> Option<LogState> {
    let request = megastore_paxos::ReplicaRequest::LogState {
        id: 0,
        eg: group.clone(),
    };
    let reply = peers
        .request(
            megastore_types::NodeId::Replica(ReplicaId(replica)),
            megastore_paxos::Message::ReplicaRequest(request),
        )
        .await;
    match reply {
        Some(megastore_paxos::Message::ReplicaReply(megastore_paxos::ReplicaReply::LogState {
            state,
            ..
        })) => Some(state),
        _ => None,
    }
}

/// Writes `value` to key `v` of each group, each group by one of the clients,
/// concurrently; returns once every write is acknowledged.
fn write_groups(
    runtime: &tokio::runtime::Runtime,
    clients: &[Client],
    groups: &[EgId],
    value: u64,
) {
    let writes: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(w, client)| {
            let client = client.clone();
            let mine: Vec<EgId> = (groups.iter().skip(w))
                .step_by(clients.len())
                .cloned()
                .collect();
            runtime.spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                for group in mine {
                    loop {
                        assert!(Instant::now() < deadline, "{group}: not written in 60 s");
                        let mut txn = client.begin(&group);
                        txn.set(b"v", b"n", value.to_string().as_bytes())
                            .expect("a write");
                        match txn.commit().await {
                            Ok(Attempt::Done(Outcome::Committed { .. })) => break,
                            Ok(Attempt::Done(other)) => {
                                panic!("{group}: a write ended {other:?}")
                            }
                            // Lost a race, or an unknown outcome: the same write again.
                            Ok(Attempt::Retry { .. }) | Err(_) => {
                                tokio::time::sleep(Duration::from_millis(20)).await
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for write in writes {
        runtime.block_on(write).expect("a writer");
    }
}

/// `group`'s newest position, at the full replicas and the witness.
async fn newest_of(peers: &megastore_rpc::Peers, group: &EgId) -> Position {
    let mut visible = Vec::new();
    for replica in 1..=3 {
        visible.extend(log_at(peers, replica, group).await.map(|l| l.visible));
    }
    visible.into_iter().max().expect("a voter's log")
}

/// Each group's newest position.
async fn newest_positions(peers: &megastore_rpc::Peers, groups: &[EgId]) -> Vec<Position> {
    let mut newest = Vec::new();
    for group in groups {
        newest.push(newest_of(peers, group).await);
    }
    newest
}

/// Waits until the read-only replica holds each group's `newest` position, for up to
/// `patience`; `when` says which wait failed.
async fn read_only_replica_holds(
    peers: &megastore_rpc::Peers,
    (groups, newest): (&[EgId], &[Position]),
    patience: Duration,
    when: &str,
) {
    let started = Instant::now();
    loop {
        let mut behind = Vec::new();
        for (group, newest) in groups.iter().zip(newest) {
            let visible = log_at(peers, 4, group).await.map(|l| l.visible);
            if visible.is_none_or(|v| v < *newest) {
                behind.push(group.clone());
            }
        }
        if behind.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < patience,
            "{when}: after {:?}, {} of {} groups not caught up at the read-only replica, \
             the first {:?}",
            started.elapsed(),
            behind.len(),
            groups.len(),
            behind.first()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_replica_back_from_an_outage_catches_up_the_groups_it_missed_though_none_is_written_since() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster_with("");
    let peers = {
        let _in_runtime = runtime.enter();
        megastore_rpc::Peers::new(&config).expect("the cluster's peers")
    };
    let patience = Duration::from_millis(config.timeouts.sweep_ms * 12);
    // Eight concurrent clients at sites A and B write each idle group once with every
    // replica up, until the read-only replica holds every group (no writer waits for
    // it; it learns of a group from its first write), then, while it is down, each
    // idle group once more and each new group for the first time.
    let clients: Vec<Client> = (0..WRITERS)
        .map(|w| runtime.block_on(connect(&config, ["A", "B"][w % 2])))
        .collect();
    let idle = idle_groups();
    write_groups(&runtime, &clients, &idle, 1);
    runtime.block_on(async {
        let newest = newest_positions(&peers, &idle).await;
        read_only_replica_holds(&peers, (&idle, &newest), patience, "every replica up").await;
    });
    cluster.process("replica-d").kill();
    let missed: Vec<EgId> = idle.into_iter().chain(new_groups()).collect();
    write_groups(&runtime, &clients, &missed, 2);

    runtime.block_on(async {
        let newest = newest_positions(&peers, &missed).await;
        cluster.start_process("replica-d");
        let first = missed[0].clone();
        let up = Instant::now();
        while log_at(&peers, 4, &first).await.is_none() {
            assert!(
                up.elapsed() < Duration::from_secs(30),
                "the read-only replica does not answer"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // No writes since: only its sweep finds what it lacks — for the new groups,
        // that they exist at all.
        let back = "back from its outage";
        read_only_replica_holds(&peers, (&missed, &newest), patience, back).await;
        // And it serves what was acknowledged.
        let at_d = connect(&config, "D").await;
        for group in missed {
            let read = at_d
                .read(
                    &group,
                    ReadMode::Snapshot,
                    DataQuery::Rows(vec![b"v".to_vec()]),
                )
                .await
                .expect("a snapshot read at site D");
            assert_eq!(read.replica, ReplicaId(4), "{group}: read elsewhere");
            assert_eq!(
                counter_value(read.rows.into_iter().next()),
                2,
                "{group}: the acknowledged write is missing at site D"
            );
        }
    });
}

/// Writes row `large-<i>` of `group`, `large_value(i)`, for each `i` of `rows`.
async fn write_large_rows(client: Client, group: EgId, rows: Vec<usize>) {
    for i in rows {
        let mut txn = client.begin(&group);
        txn.set(format!("large-{i}").as_bytes(), b"n", &large_value(i))
            .expect("a write");
        match txn.commit().await {
            Ok(Attempt::Done(Outcome::Committed { .. })) => {}
            other => panic!("row {i}: {other:?}"),
        }
    }
}

/// Row `large-<i>`'s value: 99 kB.
fn large_value(i: usize) -> Vec<u8> {
    format!("{i}-{}", "x".repeat(99_000)).into_bytes()
}

#[test]
fn a_replica_away_past_the_outage_bound_installs_a_group_larger_than_a_request_may_be() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster_with(&format!(
        "\n[history]\nlog_positions = 0\noutage_log_positions = {OUTAGE_LOG_POSITIONS}\n"
    ));
    let peers = {
        let _in_runtime = runtime.enter();
        megastore_rpc::Peers::new(&config).expect("the cluster's peers")
    };
    let group = eg(2000);
    let client = runtime.block_on(connect(&config, "A"));
    // 720 rows of 99 kB, from eight concurrent tasks sharing the client.
    let writes: Vec<_> = (0..WRITERS)
        .map(|t| {
            let rows = (t..LARGE_ROWS).step_by(WRITERS).collect();
            runtime.spawn(write_large_rows(client.clone(), group.clone(), rows))
        })
        .collect();
    for write in writes {
        runtime.block_on(write).expect("a writer");
    }
    let patience = Duration::from_secs(60);
    runtime.block_on(async {
        let newest = newest_of(&peers, &group).await;
        read_only_replica_holds_group(&peers, &group, newest, patience, "every replica up").await;
    });
    // Away past the bound: more positions than it, one commit at a time.
    cluster.process("replica-d").kill();
    let small_writes = OUTAGE_LOG_POSITIONS * 3 / 2;
    runtime.block_on(async {
        for i in 0..small_writes {
            let mut txn = client.begin(&group);
            txn.set(b"small", b"n", i.to_string().as_bytes())
                .expect("a write");
            match txn.commit().await {
                Ok(Attempt::Done(Outcome::Committed { .. })) => {}
                other => panic!("small write {i}: {other:?}"),
            }
        }
    });
    runtime.block_on(async {
        let newest = newest_of(&peers, &group).await;
        cluster.start_process("replica-d");
        read_only_replica_holds_group(&peers, &group, newest, patience, "back from its outage")
            .await;
        let at_d = connect(&config, "D").await;
        let keys = vec![
            b"large-0".to_vec(),
            b"large-719".to_vec(),
            b"small".to_vec(),
        ];
        let read = at_d
            .read(&group, ReadMode::Snapshot, DataQuery::Rows(keys))
            .await
            .expect("a snapshot read at site D");
        assert_eq!(read.replica, ReplicaId(4), "read elsewhere");
        let cell = |key: &[u8]| {
            read.rows
                .iter()
                .find(|r| r.key == key)
                .and_then(|r| r.value(b"n"))
                .map(<[u8]>::to_vec)
        };
        assert!(
            cell(b"large-0") == Some(large_value(0)),
            "large-0 at site D"
        );
        assert!(
            cell(b"large-719") == Some(large_value(719)),
            "large-719 at site D"
        );
        let last = (small_writes - 1).to_string().into_bytes();
        assert_eq!(cell(b"small"), Some(last));
    });
}

/// Waits until the read-only replica holds `group`'s `newest` position, for up to
/// `patience`; `when` says which wait failed.
async fn read_only_replica_holds_group(
    peers: &megastore_rpc::Peers,
    group: &EgId,
    newest: Position,
    patience: Duration,
    when: &str,
) {
    let started = Instant::now();
    loop {
        let at_d = log_at(peers, 4, group).await;
        if at_d.is_some_and(|l| l.visible >= newest) {
            return;
        }
        assert!(
            started.elapsed() < patience,
            "{when}: the read-only replica holds {at_d:?} of {group}, not {newest:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
