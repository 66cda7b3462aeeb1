//! Partitions that drop packets (black holes), healed: between long-lived clients and
//! a replica, and between a coordinator and the lock service. Writers commit on
//! throughout, and once the partition heals the cut-off side reaches its peers again —
//! its connections to them, gone silent, are dropped by keepalive pings and made anew.
//! Without the pings a process would write into a dead connection until TCP gave up,
//! minutes later.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megastore_client::Client;
use megastore_config::ClusterConfig;
use megastore_paxos::{ReadPath, ReadResult};
use megastore_types::EgId;

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
    write_through(&runtime, [&behind, &config], |load| async move {
        // Served at a, through the proxy, before the partition.
        load.read_at_a(local).await;
        load.acks_reach(10, "no writes before the partition").await;
        proxy.partition();
        load.acked_during(Duration::from_secs(5)).await;
        proxy.heal();
        // Within 30 s (the pings drop a silent connection within four ping intervals
        // of its last answer: 4 s with this cluster's 500 ms RPC timeout), a current
        // read at A is served at a again.
        load.read_at_a(local).await;
    });
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
    write_through(&runtime, [&config, &config], |load| async move {
        // Coordinator a holds its lock through the proxies, and vouches.
        load.read_at_a(local).await;
        load.acks_reach(10, "no writes before the partition").await;
        for proxy in &proxies {
            proxy.partition();
        }
        // Its lock lapses (a 2 s lease): reads at A stop being vouched for.
        load.read_at_a(|r| !local(r)).await;
        load.acked_during(Duration::from_secs(5)).await;
        for proxy in &proxies {
            proxy.heal();
        }
        // Within 30 s coordinator a holds its lock again and a read at A is local.
        load.read_at_a(local).await;
    });
}

fn local(read: &ReadResult) -> bool {
    read.path == ReadPath::LocalVouched
}

/// The writers' load a fault runs beside, and a reader at A.
#[derive(Clone)]
struct Load {
    acked: Arc<AtomicU64>,
    reader: Client,
    key: Vec<u8>,
    group: EgId,
}

impl Load {
    /// Current reads at A until one satisfies `done` (30 s at most).
    async fn read_at_a(&self, done: impl Fn(&ReadResult) -> bool) {
        current_read_until(&self.reader, &self.group, &self.key, done).await;
    }

    /// Waits (at most 60 s) until the writers have `count` increments acknowledged.
    async fn acks_reach(&self, count: u64, failure: &str) {
        let started = Instant::now();
        while self.acked.load(Ordering::SeqCst) < count {
            assert!(started.elapsed() < Duration::from_secs(60), "{failure}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets `span` pass (a fault's length), and fails unless a write was acknowledged
    /// meanwhile.
    async fn acked_during(&self, span: Duration) {
        let before = self.acked.load(Ordering::SeqCst);
        tokio::time::sleep(span).await;
        assert!(
            self.acked.load(Ordering::SeqCst) > before,
            "no write acknowledged during the fault"
        );
    }
}

/// Runs `fault` beside two writers incrementing counters in two groups, at A (seeing
/// the cluster as `views[0]`, as the fault's reader does) and at B (as `views[1]`);
/// once the fault is over, waits for five more acknowledged writes and stops them.
/// Then every counter must hold exactly its acknowledged increments, give or take
/// those of unknown outcome (read through a client at B that reaches every replica
/// directly), and each writer must have committed.
fn write_through<F: std::future::Future<Output = ()>>(
    runtime: &tokio::runtime::Runtime,
    views: [&ClusterConfig; 2],
    fault: impl FnOnce(Load) -> F,
) {
    let groups = [eg(1), eg(2)];
    let stop = AtomicBool::new(false);
    let acked = Arc::new(AtomicU64::new(0));
    let outcomes = runtime.block_on(async {
        let load = Load {
            acked: Arc::clone(&acked),
            reader: connect(views[0], "A").await,
            key: row(&groups[0], "A"),
            group: groups[0].clone(),
        };
        let faulted = async {
            fault(load.clone()).await;
            let healed = acked.load(Ordering::SeqCst);
            load.acks_reach(healed + 5, "no writes after the heal")
                .await;
            stop.store(true, Ordering::SeqCst);
        };
        let ((), at_a, at_b) = tokio::join!(
            faulted,
            increments_until(views[0], "A", &groups, &stop, &acked),
            increments_until(views[1], "B", &groups, &stop, &acked),
        );
        [at_a, at_b]
    });
    runtime.block_on(async {
        let direct = connect(views[1], "B").await;
        assert_counted(&direct, &["A", "B"], &groups, &outcomes).await;
    });
    assert!(
        outcomes
            .iter()
            .all(|at| at.iter().map(|(ok, _)| ok).sum::<u64>() > 0),
        "each writer committed: {outcomes:?}"
    );
}
