//! Partitions that drop packets (black holes), healed: between long-lived clients and
//! a replica, and between a coordinator and the lock service. Writers commit on
//! throughout, and once the partition heals the cut-off side reaches its peers again —
//! its connections to them, gone silent, are dropped by keepalive pings and made anew.
//! Without the pings a process would write into a dead connection until TCP gave up,
//! minutes later.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megastore_paxos::ReadPath;

use crate::support::{
    assert_counted, connect, current_read_until, eg, increments_until, replica_address, row,
    start_cluster,
};
use megastore_e2e::BlackHoleProxy;

#[test]
fn clients_reach_a_replica_again_once_a_partition_that_drops_packets_heals() {
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    // The test's clients reach replica a through the proxy; the cluster's processes
    // reach it directly.
    let proxy = BlackHoleProxy::to(&replica_address(&config, "a"));
    let mut behind = config.clone();
    for replica in behind.replicas.iter_mut().filter(|r| r.name == "a") {
        replica.address = proxy.address();
    }
    let groups = [eg(1), eg(2)];
    let key = row(&groups[0], "A");
    let stop = AtomicBool::new(false);
    let acked = AtomicU64::new(0);
    let outcomes = runtime.block_on(async {
        let reader = connect(&behind, "A").await;
        let fault = async {
            // Served at a, through the proxy, before the partition.
            current_read_until(&reader, &groups[0], &key, |r| {
                r.path == ReadPath::LocalVouched
            })
            .await;
            acks_reach(&acked, 10, "no writes before the partition").await;
            proxy.partition();
            let before = acked.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert!(
                acked.load(Ordering::SeqCst) > before,
                "no write acknowledged during the partition"
            );
            proxy.heal();
            // Within 30 s (the pings drop a silent connection within four ping
            // intervals of its last answer: 4 s with this cluster's 500 ms RPC
            // timeout), a current read at A is served at a again.
            current_read_until(&reader, &groups[0], &key, |r| {
                r.path == ReadPath::LocalVouched
            })
            .await;
            // Writes go on after the heal, then stop.
            let healed = acked.load(Ordering::SeqCst);
            acks_reach(&acked, healed + 5, "no writes after the heal").await;
            stop.store(true, Ordering::SeqCst);
        };
        let ((), at_a, at_b) = tokio::join!(
            fault,
            increments_until(&behind, "A", &groups, &stop, &acked),
            increments_until(&config, "B", &groups, &stop, &acked),
        );
        [at_a, at_b]
    });
    // Every acknowledged increment is there exactly once, read through a client that
    // reaches every replica directly.
    runtime.block_on(async {
        let direct = connect(&config, "B").await;
        assert_counted(&direct, &["A", "B"], &groups, &outcomes).await;
    });
    let [at_a, at_b] = outcomes;
    assert!(
        at_a.iter().map(|(ok, _)| ok).sum::<u64>() > 0
            && at_b.iter().map(|(ok, _)| ok).sum::<u64>() > 0,
        "each writer committed: {at_a:?} {at_b:?}"
    );
}

/// Coordinator a reaches every lockd node through a proxy; the proxies drop everything
/// for a while. It loses its lock (current reads at A go to a majority, writes go on),
/// and once the partition heals it takes its lock again and vouches: reads at A are
/// local again. Its lock client's connections, silent since the partition, must be
/// dropped for that; without keepalive pings it would stay lockless for minutes.
#[test]
fn a_coordinator_cut_off_from_the_lock_service_vouches_again_once_the_partition_heals() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let proxies: Vec<BlackHoleProxy> = config
        .lockd
        .iter()
        .map(|l| BlackHoleProxy::to(&l.address))
        .collect();
    // Coordinator a's view of the cluster: the same, but each lockd node at its proxy.
    let mut text = std::fs::read_to_string(&cluster.config_path).expect("the config file");
    for (node, proxy) in config.lockd.iter().zip(&proxies) {
        let line = format!("address = \"{}\"", node.address);
        assert_eq!(text.matches(&line).count(), 1, "{line} once in the config");
        text = text.replace(&line, &format!("address = \"{}\"", proxy.address()));
    }
    let behind = dir.path().join("coordinator-a.toml");
    std::fs::write(&behind, text).expect("write coordinator a's config");
    cluster.process("coordinator-a").kill();
    cluster.start_process_with("coordinator-a", &behind);

    let groups = [eg(1), eg(2)];
    let key = row(&groups[0], "A");
    let stop = AtomicBool::new(false);
    let acked = AtomicU64::new(0);
    let local = |r: &megastore_paxos::ReadResult| r.path == ReadPath::LocalVouched;
    let outcomes = runtime.block_on(async {
        let reader = connect(&config, "A").await;
        let fault = async {
            // Coordinator a holds its lock through the proxies, and vouches.
            current_read_until(&reader, &groups[0], &key, local).await;
            acks_reach(&acked, 10, "no writes before the partition").await;
            for proxy in &proxies {
                proxy.partition();
            }
            // Its lock lapses (a 2 s lease): reads at A stop being vouched for.
            current_read_until(&reader, &groups[0], &key, |r| !local(r)).await;
            let before = acked.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert!(
                acked.load(Ordering::SeqCst) > before,
                "no write acknowledged during the partition"
            );
            for proxy in &proxies {
                proxy.heal();
            }
            // Within 30 s coordinator a holds its lock again and a read at A is local.
            current_read_until(&reader, &groups[0], &key, local).await;
            let healed = acked.load(Ordering::SeqCst);
            acks_reach(&acked, healed + 5, "no writes after the heal").await;
            stop.store(true, Ordering::SeqCst);
        };
        let ((), at_a, at_b) = tokio::join!(
            fault,
            increments_until(&config, "A", &groups, &stop, &acked),
            increments_until(&config, "B", &groups, &stop, &acked),
        );
        [at_a, at_b]
    });
    runtime.block_on(async {
        let client = connect(&config, "B").await;
        assert_counted(&client, &["A", "B"], &groups, &outcomes).await;
    });
    assert!(
        outcomes
            .iter()
            .all(|at| at.iter().map(|(ok, _)| ok).sum::<u64>() > 0),
        "each writer committed: {outcomes:?}"
    );
}

/// Waits (at most 60 s, asynchronously) until `acked` reaches `count`.
async fn acks_reach(acked: &AtomicU64, count: u64, failure: &str) {
    let started = Instant::now();
    while acked.load(Ordering::SeqCst) < count {
        assert!(started.elapsed() < Duration::from_secs(60), "{failure}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
