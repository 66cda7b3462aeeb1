//! Decision rows of cross-group transactions are collected on real processes
//! (docs/protocol.md, "Two-phase commit", collection): transfers between accounts
//! (each its own group) through gRPC `CommitMulti` at two sites, with replica b
//! SIGKILLed and restarted mid-way, on a cluster that keeps decisions ten seconds.
//! Every transfer stays exact (the total, both sides or neither, every acknowledged
//! one present), the full replicas' collections delete decisions, and once they report
//! nothing left to look at, no replica's store holds a decision row or a prepared
//! record of any account — while the transfers' writes are all still there.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_e2e::{metric_value, scrape_metrics};
use megastore_rowstore::{RowRead, ScanOptions};

use crate::support::{replica_address, start_cluster_edited};
use crate::two_phase::{
    ACCOUNTS, Ended, account, check_transfers, crash_b_midway, open_accounts, spawn_transfers,
};

/// How long the transfers run (the crash lands in the middle).
const LOAD: Duration = Duration::from_secs(8);
/// How long decisions are kept: the shortest the test cluster's 2 s lease allows.
const RETENTION_MS: u64 = 10_000;

/// A metric of replica `name`, 0 when it is not served (yet).
fn replica_metric(config: &ClusterConfig, name: &str, sample: &str) -> f64 {
    let replica = config.replica(name).expect("the replica");
    let address = replica.metrics_address.as_ref().expect("a metrics address");
    metric_value(&scrape_metrics(address), sample).unwrap_or(0.0)
}

/// The decision rows and prepared records of every account in the store of replica
/// `name`, which must be stopped.
fn two_phase_rows(config: &ClusterConfig, name: &str) -> Vec<Vec<u8>> {
    let dir = &config.replica(name).expect("the replica").data_dir;
    let store = megastore_rowstore_rocksdb::RocksStore::open(dir).expect("the store");
    (0..ACCOUNTS)
        .flat_map(|i| {
            let eg = megastore_client::group(&account(i)).expect("an account's group");
            // The group's collection watermark stays; decisions and records go.
            [
                megastore_paxos::two_phase::decisions_range(&eg),
                megastore_paxos::two_phase::records_range(&eg),
            ]
            .into_iter()
            .flat_map(|range| {
                store
                    .scan(&range, megastore_rowstore::LATEST, &ScanOptions::default())
                    .expect("a scan")
            })
            .collect::<Vec<_>>()
        })
        .map(|row| row.key)
        .collect()
}

#[test]
fn decisions_are_collected_once_old_and_finished_everywhere_through_a_replica_crash() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster_edited(|text| {
        text.replace(
            "sweep_ms = 300\n",
            &format!("sweep_ms = 300\ndecision_retention_ms = {RETENTION_MS}\n"),
        )
    });
    assert_eq!(
        config.timeouts.decision_retention(),
        Duration::from_millis(RETENTION_MS)
    );
    let (a, b) = (replica_address(&config, "a"), replica_address(&config, "b"));
    open_accounts(&runtime, &a);
    let ended: Arc<Mutex<BTreeMap<String, Ended>>> = Arc::default();
    let until = Instant::now() + LOAD;
    runtime.block_on(async {
        let tasks: Vec<_> = (0..4usize)
            .map(|w| {
                let address = if w % 2 == 0 { a.clone() } else { b.clone() };
                spawn_transfers(w, address, until, &ended)
            })
            .collect();
        crash_b_midway(&mut cluster, LOAD, tasks).await;
    });
    let ended = ended.lock().unwrap().clone();
    check_transfers(&runtime, (&a, &b), &ended);

    // The collections: a and b (b restarted, finding its groups' decisions at start)
    // delete what is older than the retention and finished, and look again while some
    // are kept; both end with nothing left to look at.
    let collected =
        |name| replica_metric(&config, name, "megastore_replica_decisions_collected_total");
    let waiting = |name| replica_metric(&config, name, "megastore_replica_decisions_waiting");
    let started = Instant::now();
    while collected("a") + collected("b") == 0.0 || waiting("a") + waiting("b") > 0.0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "decisions still waiting after 60 s: collected {} / {}, groups waiting {} / {}",
            collected("a"),
            collected("b"),
            waiting("a"),
            waiting("b"),
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Collection deletes only the decisions: every transfer is still exact.
    check_transfers(&runtime, (&a, &b), &ended);
    for name in ["a", "b", "d"] {
        assert!(
            cluster
                .process(&format!("replica-{name}"))
                .terminate(Duration::from_secs(10)),
            "replica {name} did not stop"
        );
        let left = two_phase_rows(&config, name);
        assert!(
            left.is_empty(),
            "replica {name} still holds two-phase rows: {:?}",
            left.iter()
                .map(|k| k.escape_ascii().to_string())
                .collect::<Vec<_>>()
        );
    }
}
