//! A whole cluster as real processes on loopback, used through the client library.

use std::time::{Duration, Instant};

use megastore_client::{Client, ClientError};
use megastore_config::ClusterConfig;
use megastore_e2e::LocalCluster;
use megastore_paxos::{CommitResult, DataQuery, ReadMode, ReadPath, ReadResult};
use megastore_types::{EgId, ReplicaId};

fn eg(n: u32) -> EgId {
    EgId(format!("eg-{n:04}").into_bytes())
}

/// A data row of `eg`.
fn row(eg: &EgId, name: &str) -> Vec<u8> {
    let mut row = eg.0.clone();
    row.push(1);
    row.extend_from_slice(name.as_bytes());
    row
}

fn counter_value(row: Option<megastore_rowstore::Row>) -> u64 {
    row.and_then(|r| {
        r.value(b"n")
            .map(|v| String::from_utf8_lossy(v).parse().unwrap())
    })
    .unwrap_or(0)
}

/// Connects, retrying while the cluster is still starting.
async fn connect(config: &ClusterConfig, site: &str) -> Client {
    let started = Instant::now();
    loop {
        match Client::connect(config, site).await {
            Ok(client) => return client,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "cannot connect: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn increment(client: &Client, eg: &EgId, name: &str) -> Result<u64, ClientError> {
    let key = row(eg, name);
    let (value, _) = client
        .transaction(eg, async |txn| {
            let next = counter_value(txn.get(&key).await?) + 1;
            txn.set(&key, b"n", next.to_string().as_bytes());
            Ok(next)
        })
        .await?;
    Ok(value)
}

#[test]
fn transactions_from_two_sites_and_reads_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(dir.path());
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        let at_b = connect(&config, "B").await;
        let group = eg(1);
        let key = row(&group, "greeting");

        // A first write, retried while coordinators take their locks.
        let started = Instant::now();
        let committed = loop {
            let attempt = at_a
                .transaction(&group, async |txn| {
                    txn.set(&key, b"text", b"hello");
                    Ok(())
                })
                .await;
            match attempt {
                Ok((_, committed)) => break committed,
                Err(e) => {
                    assert!(
                        started.elapsed() < Duration::from_secs(20),
                        "no first commit: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let CommitResult::Committed { position } = committed.result else {
            panic!("{committed:?}");
        };

        // Every mode sees it from site B; the current read names the position.
        let current = at_b
            .read(
                &group,
                ReadMode::Current,
                DataQuery::Rows(vec![key.clone()]),
            )
            .await
            .unwrap();
        assert_eq!(current.position, Some(position));
        assert_eq!(current.rows[0].value(b"text"), Some(&b"hello"[..]));
        for mode in [ReadMode::Snapshot, ReadMode::Inconsistent] {
            let started = Instant::now();
            loop {
                let read = at_b
                    .read(&group, mode, DataQuery::Rows(vec![key.clone()]))
                    .await
                    .unwrap();
                assert_ne!(read.replica, ReplicaId(3), "the witness served a read");
                if read.rows.first().and_then(|r| r.value(b"text")) == Some(&b"hello"[..]) {
                    break;
                }
                // Snapshot and inconsistent reads may lag; they catch up.
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "{mode:?} read never saw the write"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // Racing increments from both sites: serializable, so none is lost.
        let per_client = 10;
        let counter = row(&group, "counter");
        let (a, b) = tokio::join!(
            async {
                for _ in 0..per_client {
                    increment(&at_a, &group, "counter").await.unwrap();
                }
            },
            async {
                for _ in 0..per_client {
                    increment(&at_b, &group, "counter").await.unwrap();
                }
            }
        );
        let ((), ()) = (a, b);
        let read = at_a
            .read(
                &group,
                ReadMode::Current,
                DataQuery::Rows(vec![counter.clone()]),
            )
            .await
            .unwrap();
        assert_eq!(counter_value(read.rows.into_iter().next()), 2 * per_client);

        // Site B's current reads become local once its coordinator vouches.
        let local = current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched
        })
        .await;
        assert_eq!(local.replica, ReplicaId(2));

        // At site D (no full replica), snapshot reads come from the read-only replica.
        let at_d = connect(&config, "D").await;
        let started = Instant::now();
        loop {
            let read = at_d
                .read(
                    &group,
                    ReadMode::Snapshot,
                    DataQuery::Rows(vec![counter.clone()]),
                )
                .await
                .unwrap();
            if read.replica == ReplicaId(4)
                && counter_value(read.rows.into_iter().next()) == 2 * per_client
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the read-only replica never served the write"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    drop(cluster);
}

/// Current reads of `key` until one satisfies `done` (bounded).
async fn current_read_until(
    client: &Client,
    group: &EgId,
    key: &[u8],
    done: impl Fn(&ReadResult) -> bool,
) -> ReadResult {
    let started = Instant::now();
    loop {
        if let Ok(read) = client
            .read(
                group,
                ReadMode::Current,
                DataQuery::Rows(vec![key.to_vec()]),
            )
            .await
            && done(&read)
        {
            return read;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no such current read within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn first_commit(client: &Client, group: &EgId) {
    let started = Instant::now();
    while let Err(e) = increment(client, group, "counter").await {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no first commit: {e}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn killed_replica_and_coordinator_processes_lose_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path());
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let group = eg(7);
    let counter = row(&group, "counter");
    let (at_a, at_b) = runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        let at_b = connect(&config, "B").await;
        first_commit(&at_a, &group).await;
        for _ in 0..4 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
        (at_a, at_b)
    });
    let mut acknowledged = 5;

    // SIGKILL replica b: writes go on with a and the witness.
    cluster.process("replica-b").kill();
    runtime.block_on(async {
        for _ in 0..10 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
    });
    acknowledged += 10;
    cluster.start_process("replica-b");
    runtime.block_on(async {
        // b catches up, and its coordinator vouches for it again.
        let read = current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched && r.replica == ReplicaId(2)
        })
        .await;
        assert_eq!(counter_value(read.rows.into_iter().next()), acknowledged);
    });

    // SIGKILL b's coordinator: B's current reads fall back to majority reads, writes
    // go on (no longer than a lease stalled), and nothing is lost.
    cluster.process("coordinator-b").kill();
    runtime.block_on(async {
        let started = Instant::now();
        for _ in 0..5 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
        assert!(
            started.elapsed() < config.timeouts.lock_lease() * 3,
            "writes stalled {:?}",
            started.elapsed()
        );
        let read =
            current_read_until(&at_b, &group, &counter, |r| r.path == ReadPath::Majority).await;
        assert_eq!(
            counter_value(read.rows.into_iter().next()),
            acknowledged + 5
        );
    });
    acknowledged += 5;
    cluster.start_process("coordinator-b");
    runtime.block_on(async {
        let read = current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched && r.replica == ReplicaId(2)
        })
        .await;
        assert_eq!(counter_value(read.rows.into_iter().next()), acknowledged);
    });
    for name in [
        "replica-a",
        "replica-b",
        "replica-c",
        "replica-d",
        "coordinator-a",
        "coordinator-b",
    ] {
        let process = cluster.process(name);
        assert!(process.running(), "{name} died:\n{}", process.log());
    }
}
