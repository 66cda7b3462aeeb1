//! A partition that drops packets (a black hole) between long-lived clients and a
//! replica: writers commit on through the other replicas, and once it heals the
//! clients reach the replica again — their connections to it, gone silent, are
//! dropped by keepalive pings and made anew. Without the pings a client would write
//! into a dead connection until TCP gave up, minutes later.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megastore_paxos::ReadPath;

use crate::support::{
    assert_counted, connect, current_read_until, eg, increments_until, replica_address, row,
    start_cluster,
};

#[test]
fn clients_reach_a_replica_again_once_a_partition_that_drops_packets_heals() {
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    // The test's clients reach replica a through the proxy; the cluster's processes
    // reach it directly.
    let proxy = megastore_e2e::BlackHoleProxy::to(&replica_address(&config, "a"));
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
            let started = Instant::now();
            while acked.load(Ordering::SeqCst) < 10 {
                assert!(started.elapsed() < Duration::from_secs(60), "no writes");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
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
            let started = Instant::now();
            while acked.load(Ordering::SeqCst) < healed + 5 {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "no writes after the heal"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
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
