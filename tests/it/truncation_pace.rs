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

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_client::{Attempt, Client, Outcome};
use megastore_paxos::{DataQuery, ReadMode};
use megastore_types::EgId;

use crate::support::{connect, counter_value, eg, start_cluster_with, wait_for_acks};

const GROUPS: u32 = 40;
const WRITERS: usize = 8;
/// Commits each writer makes, over all the groups in turn: 120 positions a group.
const COMMITS_PER_WRITER: usize = 600;
/// The log a group may hold above its truncation point once the load ended: the
/// sweep's bound (`log_positions` 0 + 64) and the one position truncation keeps.
const LOG_HELD_MAX: u64 = 65;

fn groups() -> Vec<EgId> {
    (0..GROUPS).map(|i| eg(700 + i)).collect()
}

fn key(writer: usize) -> Vec<u8> {
    format!("w-{writer}").into_bytes()
}

/// Writes 1, 2, 3, … to its key in each group in turn, blind; returns, for each
/// group, the values the key may hold: the last acknowledged, and any written after
/// it whose outcome the writer did not learn (an error).
async fn writer(client: Client, w: usize, count: Arc<AtomicUsize>) -> Vec<Vec<u64>> {
    let groups = groups();
    let mut may_hold = vec![vec![0u64]; groups.len()];
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut commits = 0;
    let mut value = 0u64;
    while commits < COMMITS_PER_WRITER && Instant::now() < deadline {
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

#[test]
fn busy_groups_logs_are_truncated_as_they_grow_and_a_killed_replica_catches_up() {
    let (_alone, _dir, mut cluster, config, runtime) =
        start_cluster_with("\n[history]\nlog_positions = 0\n");
    let clients: Vec<Client> = (0..WRITERS)
        .map(|w| runtime.block_on(connect(&config, ["A", "B"][w % 2])))
        .collect();
    let count = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(w, client)| runtime.spawn(writer(client.clone(), w, count.clone())))
        .collect();
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
            let keys: Vec<Vec<u8>> = (0..WRITERS).map(key).collect();
            let read = clients[0]
                .read(group, ReadMode::Current, DataQuery::Rows(keys))
                .await
                .expect("a current read");
            for (w, may_hold) in may_hold.iter().enumerate() {
                let row = read.rows.iter().find(|r| r.key == key(w)).cloned();
                let value = counter_value(row);
                assert!(
                    may_hold[g].contains(&value),
                    "{group}: writer {w}'s key holds {value}, not one of {:?}",
                    may_hold[g]
                );
            }
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
