//! A whole cluster as real processes on loopback, used through the client library.

use std::time::{Duration, Instant};

use megastore_client::{
    Assert, Attempt, Client, ClientError, Entry, Mutation, Outcome, TxnResult, VERSION_MISSING,
};
use megastore_config::ClusterConfig;
use megastore_e2e::LocalCluster;
use megastore_paxos::{DataQuery, ReadMode, ReadPath};
use megastore_types::{EgId, ReplicaId};

use crate::support::{
    connect, counter_value, current_read_until, eg, first_commit, increment, row, start_cluster,
    start_cluster_with, stored_row,
};

#[test]
fn transactions_from_two_sites_and_reads_in_every_mode() {
    let (_alone, _dir, cluster, config, runtime) = start_cluster();
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
                    txn.set(&key, b"text", b"hello")?;
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
        let Outcome::Committed { position, .. } = committed else {
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

#[test]
fn killed_replica_and_coordinator_processes_lose_no_acknowledged_write() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
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
    // B's clients still read, through the other replicas.
    runtime.block_on(async {
        let read = current_read_until(&at_b, &group, &counter, |r| r.replica != ReplicaId(2)).await;
        assert_eq!(counter_value(read.rows.into_iter().next()), acknowledged);
    });
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

/// Seed 000's `ConcurrentTxn`: racers assert one version at once; exactly one
/// commits, the version moves by exactly one, and any infrastructure error fails the
/// check instead of counting as a loser.
async fn concurrent_txn(clients: &[Client], group: &EgId, key: &[u8]) {
    let before = clients[0].snapshot(group, &[key.to_vec()]).await.unwrap();
    let version = before[0].version;
    let mut races = tokio::task::JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, group, key) = (client.clone(), group.clone(), key.to_vec());
        races.spawn(async move {
            let assert = Assert::Version {
                key: key.clone(),
                version,
            };
            let put = Mutation::Put {
                key,
                value: format!("racer {i}").into_bytes(),
            };
            client.versioned_txn(&group, &[assert], &[put]).await
        });
    }
    let results = races.join_all().await;
    let mut winners = 0;
    for result in results {
        match result.expect("an infrastructure error is an error, not a loser") {
            TxnResult::Applied { versions } => {
                winners += 1;
                assert_eq!(versions[key], version + 1);
            }
            TxnResult::AssertFailed { keys } => assert_eq!(keys, vec![key.to_vec()]),
        }
    }
    assert_eq!(winners, 1, "exactly one racer commits");
    let after = clients[0].snapshot(group, &[key.to_vec()]).await.unwrap();
    assert_eq!(
        after[0].version,
        version + 1,
        "the version moved by exactly one"
    );
}

#[test]
fn versioned_primitives_hold_the_concurrent_txn_contract() {
    let (_alone, _dir, cluster, config, runtime) = start_cluster();
    runtime.block_on(async {
        let mut clients = Vec::new();
        for site in ["A", "A", "A", "B", "B", "B"] {
            clients.push(connect(&config, site).await);
        }
        let group = eg(3);
        first_commit(&clients[0], &group).await;

        // Absent keys have version 0; writes move versions by one; a delete keeps it.
        let key = b"tasks/1".to_vec();
        let fresh = clients[0]
            .snapshot(&group, &[key.clone(), key.clone()])
            .await
            .unwrap();
        assert_eq!(
            fresh,
            vec![Entry {
                key: key.clone(),
                version: VERSION_MISSING,
                value: None
            }]
        );
        let put = |value: &str| Mutation::Put {
            key: key.clone(),
            value: value.as_bytes().to_vec(),
        };
        let created = clients[3]
            .versioned_txn(
                &group,
                &[Assert::Absent { key: key.clone() }],
                &[put("open")],
            )
            .await
            .unwrap();
        assert_eq!(
            created,
            TxnResult::Applied {
                versions: [(key.clone(), 1)].into()
            }
        );
        let again = clients[0]
            .versioned_txn(
                &group,
                &[Assert::Absent { key: key.clone() }],
                &[put("open")],
            )
            .await
            .unwrap();
        assert_eq!(
            again,
            TxnResult::AssertFailed {
                keys: vec![key.clone()]
            }
        );
        let deleted = clients[0]
            .versioned_txn(
                &group,
                &[Assert::Version {
                    key: key.clone(),
                    version: 1,
                }],
                &[Mutation::Delete { key: key.clone() }],
            )
            .await
            .unwrap();
        assert_eq!(
            deleted,
            TxnResult::Applied {
                versions: [(key.clone(), 2)].into()
            }
        );
        let tombstone = clients[4]
            .snapshot(&group, std::slice::from_ref(&key))
            .await
            .unwrap();
        assert_eq!(
            tombstone[0].version, 2,
            "a delete keeps the version counter"
        );
        assert_eq!(tombstone[0].value, None);
        // An assert from before the delete and re-create does not pass (no ABA).
        clients[0]
            .versioned_txn(&group, &[], &[put("open")])
            .await
            .unwrap();
        let stale = clients[1]
            .versioned_txn(
                &group,
                &[Assert::Version {
                    key: key.clone(),
                    version: 1,
                }],
                &[put("stolen")],
            )
            .await
            .unwrap();
        assert_eq!(
            stale,
            TxnResult::AssertFailed {
                keys: vec![key.clone()]
            }
        );

        // keys(prefix) lists only keys with values, in order.
        for name in ["tasks/2", "tasks/10", "other/1"] {
            let m = Mutation::Put {
                key: name.as_bytes().to_vec(),
                value: b"x".to_vec(),
            };
            clients[2].versioned_txn(&group, &[], &[m]).await.unwrap();
        }
        clients[2]
            .versioned_txn(
                &group,
                &[],
                &[Mutation::Delete {
                    key: b"tasks/2".to_vec(),
                }],
            )
            .await
            .unwrap();
        let listed = clients[5].keys(&group, b"tasks/").await.unwrap();
        assert_eq!(listed, vec![b"tasks/1".to_vec(), b"tasks/10".to_vec()]);

        // The atomicity check, several rounds, racers at two sites.
        for _ in 0..3 {
            concurrent_txn(&clients, &group, b"contended").await;
        }
    });
    drop(cluster);
}

#[test]
fn cluster_up_starts_a_working_cluster_and_down_stops_it() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config_path = megastore_e2e::write_cluster_config(dir.path());
    let config_arg = config_path.to_str().unwrap();
    let limit = Duration::from_secs(60);
    let up = megastore_e2e::run_megastore(
        &["cluster", "up", "--config", config_arg],
        dir.path(),
        limit,
    );
    // Whatever happens next, stop what was started.
    struct Down<'a>(&'a str, &'a std::path::Path);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            megastore_e2e::run_megastore(
                &["cluster", "down", "--config", self.0],
                self.1,
                Duration::from_secs(60),
            );
        }
    }
    let _down = Down(config_arg, dir.path());
    assert!(up.status.success(), "{up:?}");
    assert!(up.stdout.contains("[9/9] coordinator-b"), "{}", up.stdout);
    assert!(up.stdout.contains("is up"), "{}", up.stdout);

    let again = megastore_e2e::run_megastore(
        &["cluster", "up", "--config", config_arg],
        dir.path(),
        limit,
    );
    assert!(
        !again.status.success() && again.stderr.contains("already running"),
        "{again:?}"
    );

    let config = ClusterConfig::load(&config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = connect(&config, "B").await;
        first_commit(&client, &eg(9)).await;
    });

    let pids: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("cluster.toml.pids")).unwrap(),
    )
    .unwrap();
    assert_eq!(pids.len(), 9);
    let down = megastore_e2e::run_megastore(
        &["cluster", "down", "--config", config_arg],
        dir.path(),
        limit,
    );
    assert!(
        down.status.success() && down.stdout.contains("stopped 9 process(es)"),
        "{down:?}"
    );
    for p in pids {
        let pid = p["pid"].as_i64().unwrap();
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "process {pid} still runs after down"
        );
    }
    assert!(dir.path().join("logs/replica-a.log").is_file());
}

#[test]
fn a_frozen_site_stalls_writes_at_most_a_lease_and_never_serves_stale_reads() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let group = eg(11);
    let counter = row(&group, "counter");
    let (at_a, at_b) = runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        let at_b = connect(&config, "B").await;
        first_commit(&at_a, &group).await;
        // B's coordinator vouches for b before the freeze.
        current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched
        })
        .await;
        // An operator split the placement, so lockd stores one: a writer that finds
        // b's coordinator's lock lapsed counts it only once it has read the stored
        // placement and found b still holding slot 2 (*lapse-of-the-holder*).
        let lockd = megastore_rpc::LockdClient::new(&config).unwrap();
        let topology = config.topology().unwrap();
        megastore_client::placement_store::split_range(&lockd, &topology, None, b"\x80")
            .await
            .unwrap();
        (at_a, at_b)
    });

    // Freeze site B: its replica misses the next writes, and its coordinator can
    // neither be invalidated nor renew its lease.
    cluster.process("replica-b").signal("STOP");
    cluster.process("coordinator-b").signal("STOP");
    let lease = config.timeouts.lock_lease();
    let stalled = runtime.block_on(async {
        let started = Instant::now();
        increment(&at_a, &group, "counter").await.unwrap();
        let stalled = started.elapsed();
        // Once b's coordinator lost its lock, later writes need not wait for it.
        let started = Instant::now();
        for _ in 0..3 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
        assert!(
            started.elapsed() < lease,
            "writes kept stalling: {:?}",
            started.elapsed()
        );
        stalled
    });
    assert!(
        stalled < lease * 2 + config.timeouts.rpc() * 2,
        "the first write stalled {stalled:?}, more than a lease (plus the RPCs to find out)"
    );

    // Thaw it: b is behind and its coordinator's lease ran out, so a current read at
    // B must not be served from b's stale state.
    cluster.process("coordinator-b").signal("CONT");
    cluster.process("replica-b").signal("CONT");
    runtime.block_on(async {
        let read = at_b
            .read(
                &group,
                ReadMode::Current,
                DataQuery::Rows(vec![counter.clone()]),
            )
            .await
            .unwrap();
        assert_eq!(
            counter_value(read.rows.into_iter().next()),
            5,
            "a stale current read at B: {:?}",
            read.path
        );
        // And b comes back into service.
        let read = current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched && r.replica == ReplicaId(2)
        })
        .await;
        assert_eq!(counter_value(read.rows.into_iter().next()), 5);
    });
}

#[test]
fn a_wiped_replica_rejoins_and_catches_up_without_losing_writes() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let group = eg(21);
    let counter = row(&group, "counter");
    let (at_a, at_b) = runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        let at_b = connect(&config, "B").await;
        first_commit(&at_a, &group).await;
        for _ in 0..4 {
            increment(&at_b, &group, "counter").await.unwrap();
        }
        (at_a, at_b)
    });

    // Replica b loses its disk: killed, its directory removed, started again.
    cluster.process("replica-b").kill();
    let data = config.replica("b").unwrap().data_dir.clone();
    std::fs::remove_dir_all(&data).unwrap();
    cluster.start_process("replica-b");
    runtime.block_on(async {
        // Writes go on (a and the witness are a majority while b rejoins).
        for _ in 0..3 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
        // b comes back into service with everything: its coordinator vouches for it
        // again once it caught up.
        let read = current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched && r.replica == ReplicaId(2)
        })
        .await;
        assert_eq!(counter_value(read.rows.into_iter().next()), 8);
    });
    crate::support::assert_rejoined(&mut cluster, "replica-b", &data);

    // With the witness stopped, writes need b's vote: it votes again, once cleared.
    cluster.process("replica-c").signal("STOP");
    runtime.block_on(async {
        let started = Instant::now();
        increment(&at_a, &group, "counter").await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
    });
    cluster.process("replica-c").signal("CONT");
}

#[test]
fn after_every_replica_restarts_sweeps_catch_up_groups_nobody_reads() {
    use megastore_rowstore::{KeyRange, RowRead};
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let group = eg(31);
    let at_a = runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        first_commit(&at_a, &group).await;
        at_a
    });
    cluster.process("replica-b").kill();
    runtime.block_on(async {
        for _ in 0..5 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
    });
    // Every replica restarts (so none has the group loaded from before) and nobody
    // touches the group: the sweeps alone must catch b up.
    for name in ["replica-a", "replica-c", "replica-d"] {
        cluster.process(name).kill();
    }
    for name in ["replica-a", "replica-b", "replica-c", "replica-d"] {
        cluster.start_process(name);
    }
    // b's store can only be read with b stopped. Under load (CI on two cores) the four
    // restarts and their lock-service sessions can take several sweeps, so look after
    // every ten sweeps, starting b again between looks, for at most a minute: restarting
    // b does not touch the group either, so only a sweep can have caught it up.
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(config.timeouts.sweep_ms * 10));
        assert!(
            cluster
                .process("replica-b")
                .terminate(Duration::from_secs(10))
        );
        let store =
            megastore_rowstore_rocksdb::RocksStore::open(&config.replica("b").unwrap().data_dir)
                .unwrap();
        let stored = store
            .read_row(
                &stored_row(&group, "counter"),
                &KeyRange::all(),
                megastore_rowstore::LATEST,
            )
            .unwrap();
        let counter = counter_value(stored);
        if counter == 6 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "replica b did not catch up the idle group: it holds {counter}, not 6"
        );
        drop(store);
        cluster.start_process("replica-b");
    }
}

#[test]
fn a_commit_of_unknown_outcome_is_resolved_by_its_transaction_id_and_applied_once() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let group = eg(41);
    let counter = row(&group, "counter");
    let at_a = runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        first_commit(&at_a, &group).await;
        // The transaction's read below must be local: no majority will answer.
        current_read_until(&at_a, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched
        })
        .await;
        at_a
    });
    // Only replica a can vote: the commit reaches a and nothing else, so its writer
    // cannot know whether it will be chosen.
    cluster.process("replica-b").signal("STOP");
    cluster.process("replica-c").signal("STOP");
    let started = Instant::now();
    let committing = runtime.spawn({
        let (at_a, group, counter) = (at_a.clone(), group.clone(), counter.clone());
        async move {
            let mut txn = at_a.begin(&group);
            let n = counter_value(txn.get(&counter).await?);
            txn.set(&counter, b"n", (n + 1).to_string().as_bytes())?;
            let attempt = txn.commit().await;
            Ok::<_, ClientError>((attempt?, started.elapsed()))
        }
    });
    // Long enough for the writer to give up on the position (ten Paxos rounds take
    // about 9 s with these timeouts), well within its resolve patience after that.
    std::thread::sleep(Duration::from_secs(15));
    cluster.process("replica-b").signal("CONT");
    cluster.process("replica-c").signal("CONT");
    let (attempt, took) = runtime.block_on(committing).unwrap().unwrap();
    // Either end is right — the value accepted only at a may or may not be chosen once
    // a majority is back (a sweep that prepares at b and c alone finishes the position
    // with a no-op) — but the writer must have found out which, by settling the
    // position and comparing the transaction chosen there with its own.
    let expected = match attempt {
        Attempt::Done(Outcome::Committed { resolved, .. }) => {
            assert!(
                resolved,
                "committed without passing through 'unknown' (after {took:?})"
            );
            2
        }
        Attempt::Retry { resolved, keys } => {
            assert!(
                resolved && keys.is_empty(),
                "after {took:?}: a retry without resolution ({keys:?})"
            );
            1
        }
        other => panic!("after {took:?}: {other:?}"),
    };
    runtime.block_on(async {
        let read = at_a
            .read(
                &group,
                ReadMode::Current,
                DataQuery::Rows(vec![counter.clone()]),
            )
            .await
            .unwrap();
        assert_eq!(
            counter_value(read.rows.into_iter().next()),
            expected,
            "applied exactly when the writer was told so"
        );
    });
}

#[test]
fn logs_are_truncated_and_a_wiped_replica_installs_a_snapshot() {
    use megastore_rowstore::{KeyRange, RowRead};
    // No log kept for watchers: truncated as far as every replica allows.
    let (_alone, _dir, mut cluster, config, runtime) =
        start_cluster_with("\n[history]\nlog_positions = 0\n");
    let group = eg(51);
    let counter = row(&group, "counter");
    let at_a = runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        first_commit(&at_a, &group).await;
        for _ in 0..19 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
        at_a
    });
    // Sweeps see every replica holding the log and truncate it.
    std::thread::sleep(Duration::from_millis(config.timeouts.sweep_ms * 10));
    cluster.process("replica-b").kill();
    let b_dir = config.replica("b").unwrap().data_dir.clone();
    std::fs::remove_dir_all(&b_dir).unwrap();
    cluster.start_process("replica-b");
    runtime.block_on(async {
        increment(&at_a, &group, "counter").await.unwrap();
        let at_b = connect(&config, "B").await;
        let read = current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched && r.replica == ReplicaId(2)
        })
        .await;
        assert_eq!(counter_value(read.rows.into_iter().next()), 21);
    });
    // The positions b lost were truncated away elsewhere: it got them as a snapshot.
    assert!(
        cluster
            .process("replica-b")
            .terminate(Duration::from_secs(10))
    );
    let store = megastore_rowstore_rocksdb::RocksStore::open(&b_dir).unwrap();
    let root = megastore_paxos::root_row(&group);
    let root = store
        .read_row(&root, &KeyRange::all(), megastore_rowstore::LATEST)
        .unwrap()
        .expect("b holds the group's root row");
    assert!(
        root.value(b"installed").is_some(),
        "no snapshot was installed: {:?}",
        root.cells
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
}

#[test]
fn megastore_dev_runs_the_default_topology_with_a_demo_and_stops_cleanly() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("dev");
    let mut dev = megastore_e2e::Process::start(
        "dev",
        &["dev", "--data-dir", data.to_str().unwrap()],
        dir.path(),
    );
    let started = Instant::now();
    while !dev.log().contains("runs until Ctrl-C") {
        assert!(dev.running(), "megastore dev stopped:\n{}", dev.log());
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "megastore dev did not come up:\n{}",
            dev.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = dev.log();
    for expected in [
        "schema      PhotoApp",
        "committed at log position",
        "snapshot     at site D",
        "task/1 = ",
    ] {
        assert!(log.contains(expected), "missing {expected:?} in:\n{log}");
    }
    // The headline: a current read served locally, vouched by the coordinator, at
    // both sites with a full replica.
    for site in ["A", "B"] {
        let lines: Vec<&str> = log.lines().collect();
        let local = lines.windows(2).any(|w| {
            w[0].contains(&format!("current      at site {site}:"))
                && w[1].contains("local replica; its coordinator vouched it is current")
        });
        assert!(local, "no local current read at site {site}:\n{log}");
    }
    // Its servers run without transparent huge pages (crates/cli/src/main.rs): the
    // kernel would otherwise zero 2 MiB on request paths.
    let status = std::fs::read_to_string(format!("/proc/{}/status", dev.pid())).unwrap();
    assert!(
        status.lines().any(|line| line == "THP_enabled:\t0"),
        "transparent huge pages still on:\n{status}"
    );
    // A second one, on the same default ports, says why it cannot start.
    let second =
        megastore_e2e::run_megastore(&["dev", "--no-demo"], dir.path(), Duration::from_secs(60));
    assert!(!second.status.success(), "{second:?}");
    assert!(
        second
            .stderr
            .contains("is another `megastore dev` running?"),
        "{}",
        second.stderr
    );
    // Its config lets other commands and clients in.
    let config = ClusterConfig::load(&data.join("cluster.toml")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = connect(&config, "B").await;
        first_commit(&client, &eg(61)).await;
    });
    // Without --config, the tools find it on its default ports.
    let status = megastore_e2e::run_megastore(
        &["status", "--group", "demo-user-alice"],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(status.status.success(), "{status:?}");
    assert!(
        status.stdout.contains("cluster \"dev\""),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("entity group demo-user-alice"),
        "{}",
        status.stdout
    );
    let shell = megastore_e2e::run_megastore_with_input(
        &["shell"],
        "use demo-user-alice\nget profile\n",
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(shell.status.success(), "{shell:?}");
    assert!(
        shell.stdout.contains("| profile | name   | Alice |"),
        "{}",
        shell.stdout
    );
    assert!(
        dev.terminate(Duration::from_secs(30)),
        "no clean stop:\n{}",
        dev.log()
    );
    assert!(dev.log().contains("stopping"));
}

#[test]
fn disabling_an_unreachable_coordinator_ends_the_write_stall_at_once() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path());
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    // The writer's view of the cluster: coordinator b's address leads nowhere (an
    // asymmetric partition — b still reaches lockd and keeps its lock).
    let mut cut_off = config.clone();
    let nowhere = megastore_e2e::free_ports(1)[0];
    cut_off
        .replicas
        .iter_mut()
        .find(|r| r.name == "b")
        .unwrap()
        .coordinator_address = Some(format!("127.0.0.1:{nowhere}"));
    // Every proposer (the writer, and the sweeps of the other replicas) sees that view.
    let cut_off_path = dir.path().join("cut-off.toml");
    let text = std::fs::read_to_string(&cluster.config_path).unwrap();
    let real = config
        .replica("b")
        .unwrap()
        .coordinator_address
        .clone()
        .unwrap();
    std::fs::write(
        &cut_off_path,
        text.replace(&real, &format!("127.0.0.1:{nowhere}")),
    )
    .unwrap();
    for name in ["replica-a", "replica-c", "replica-d"] {
        cluster.process(name).kill();
        cluster.start_process_with(name, &cut_off_path);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let group = eg(71);
    let writer = runtime.block_on(async {
        let writer = connect(&cut_off, "A").await;
        first_commit(&writer, &group).await;
        // Coordinator b holds its lock and vouches for b (seen from B, which reaches it).
        let at_b = connect(&config, "B").await;
        let counter = row(&group, "counter");
        current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched
        })
        .await;
        writer
    });
    // Replica b misses the next write, so the writer must invalidate b's coordinator.
    cluster.process("replica-b").signal("STOP");
    let lease = config.timeouts.lock_lease();
    let write = runtime.spawn({
        let (writer, group) = (writer.clone(), group.clone());
        async move {
            // begin/commit rather than `transaction`: its future is Send, so it can
            // be spawned.
            let started = Instant::now();
            let key = row(&group, "counter");
            let result = async {
                let mut txn = writer.begin(&group);
                let n = counter_value(txn.get(&key).await?);
                txn.set(&key, b"n", (n + 1).to_string().as_bytes())?;
                txn.commit().await
            }
            .await;
            (result, started.elapsed())
        }
    });
    std::thread::sleep(lease);
    assert!(
        !write.is_finished(),
        "the write did not wait for the unreachable coordinator"
    );
    let disabled_at = Instant::now();
    let out = megastore_e2e::run_megastore(
        &[
            "coordinator",
            "disable",
            "b",
            "--config",
            cluster.config_path.to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(20),
    );
    // b still reaches lockd: it hears of the revocation at its next keep-alive (a
    // quarter lease), stops vouching and gives its lock back — the command waits for
    // that — and the writer's next lock query (every half RPC timeout) finds it free.
    assert!(
        out.status.success() && out.stdout.contains("it stopped vouching"),
        "{out:?}"
    );
    let (result, took) = runtime.block_on(write).unwrap();
    let after_disable = disabled_at.elapsed();
    assert!(
        result.is_ok(),
        "the write failed after {took:?}: {result:?}"
    );
    let rpc = config.timeouts.rpc();
    assert!(
        after_disable < lease / 4 + rpc * 2,
        "the write went on {after_disable:?} after the disable (lease {lease:?}): not at once\n{}",
        out.stdout
    );
    cluster.process("replica-b").signal("CONT");
    // Status says so: the coordinator answers, and is disabled until it restarts.
    let status = megastore_e2e::run_megastore(
        &["status", "--config", cluster.config_path.to_str().unwrap()],
        cluster.config_path.parent().unwrap(),
        Duration::from_secs(60),
    );
    let line = status
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("b ") && l.contains("full"))
        .unwrap_or_else(|| panic!("no line for b:\n{}", status.stdout));
    assert!(
        line.contains("DISABLED (until its process restarts)"),
        "{line}"
    );
}

#[test]
fn transactions_spawned_on_a_multi_threaded_runtime_commit_each_exactly_once() {
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    let group = eg(71);
    let counter = row(&group, "counter");
    let committed = runtime.block_on(async {
        let clients = [connect(&config, "A").await, connect(&config, "B").await];
        first_commit(&clients[0], &group).await;
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..4 {
            let (client, group, counter) = (clients[i % 2].clone(), group.clone(), counter.clone());
            // tokio::spawn needs a Send future: transaction_send gives one.
            tasks.spawn(async move {
                let mut committed = 0u64;
                for _ in 0..3 {
                    let result = client
                        .transaction_send(&group, |txn| {
                            let counter = counter.clone();
                            Box::pin(async move {
                                let next = counter_value(txn.get(&counter).await?) + 1;
                                txn.set(&counter, b"n", next.to_string().as_bytes())?;
                                Ok(next)
                            })
                        })
                        .await;
                    match result {
                        Ok(_) => committed += 1,
                        // Contention may exhaust the attempts: nothing was applied.
                        Err(ClientError::TooManyConflicts { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                committed
            });
        }
        tasks.join_all().await.into_iter().sum::<u64>()
    });
    assert!(committed > 0);
    runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        let read = current_read_until(&at_a, &group, &counter, |_| true).await;
        assert_eq!(
            counter_value(read.rows.into_iter().next()),
            committed + 1,
            "every committed transaction applied exactly once"
        );
    });
}

/// `megastore dev | tee`, interrupted: `tee` goes first and closes the pipe, and dev
/// must still stop its servers and remove its temporary data directory.
#[test]
fn megastore_dev_cleans_up_its_temporary_data_when_its_stdout_is_gone() {
    use std::io::BufRead;
    use wait_timeout::ChildExt;
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let mut dev = std::process::Command::new(megastore_e2e::megastore_bin())
        .args(["dev", "--no-demo"])
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(dev.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let data = first
        .strip_prefix("megastore dev: data in ")
        .unwrap_or_else(|| panic!("first line: {first}"))
        .to_string();
    assert!(std::path::Path::new(&data).is_dir(), "{data}");
    let started = Instant::now();
    for line in lines.by_ref() {
        if line.unwrap().contains("runs until Ctrl-C") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "dev did not come up"
        );
    }
    drop(lines); // the reader is gone: the next write to stdout fails
    let _ = std::process::Command::new("kill")
        .args(["-INT", &dev.id().to_string()])
        .status();
    let status = dev
        .wait_timeout(Duration::from_secs(60))
        .unwrap()
        .unwrap_or_else(|| {
            let _ = dev.kill();
            panic!("dev did not stop after SIGINT with its stdout closed")
        });
    assert!(status.success(), "{status}");
    assert!(
        !std::path::Path::new(&data).exists(),
        "{data} was left behind"
    );
}

/// Fault drills at the `megastore dev` prompt: a replica stopped and started again, a
/// coordinator stopped and started again, while a client keeps committing; `status`
/// shows each; a bad command is named, and the cluster still stops cleanly.
#[test]
fn megastore_dev_runs_fault_drills_from_its_prompt() {
    use std::io::{BufRead, Write};
    use wait_timeout::ChildExt;
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("dev");
    let mut dev = std::process::Command::new(megastore_e2e::megastore_bin())
        .args([
            "dev",
            "--no-demo",
            "--drills",
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut prompt = dev.stdin.take().unwrap();
    let mut said = std::io::BufReader::new(dev.stdout.take().unwrap()).lines();
    let mut wait_for = |text: &str| {
        let started = Instant::now();
        for line in said.by_ref() {
            let line = line.unwrap();
            if line.contains(text) {
                return line;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "no {text:?}");
        }
        panic!("dev stopped before saying {text:?}");
    };
    wait_for("fault drills:");
    let config_path = data.join("cluster.toml");
    let config_arg = config_path.to_str().unwrap().to_string();
    let config = ClusterConfig::load(&config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(connect(&config, "A"));
    let group = eg(91);
    runtime.block_on(first_commit(&client, &group));
    let status_line = |replica: &str| {
        let out = megastore_e2e::run_megastore(
            &["status", "--config", &config_arg],
            dir.path(),
            Duration::from_secs(60),
        );
        out.stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{replica} ")))
            .unwrap_or_else(|| panic!("no line for {replica}:\n{}", out.stdout))
            .to_string()
    };
    let mut drill = |command: &str, expect: &str| {
        writeln!(prompt, "{command}").unwrap();
        wait_for(expect)
    };

    drill("stop replica b", "replica b stopped");
    assert!(status_line("b").contains("UNREACHABLE"));
    runtime
        .block_on(increment(&client, &group, "drill"))
        .expect("writes go on with replica b down");
    drill("start replica b", "replica b started");
    assert!(status_line("b").contains("serving"));
    drill("stop coordinator a", "coordinator a stopped");
    assert!(status_line("a").contains("UNREACHABLE"), "its coordinator");
    runtime
        .block_on(increment(&client, &group, "drill"))
        .expect("writes go on without coordinator a");
    drill("start coordinator a", "coordinator a started");
    let bad = drill("stop replica z", "error:");
    assert!(bad.contains("no replica z (replicas: a, b, c, d)"), "{bad}");
    let unknown = drill("reboot everything", "error:");
    assert!(unknown.contains("unknown command"), "{unknown}");

    let _ = std::process::Command::new("kill")
        .args(["-INT", &dev.id().to_string()])
        .status();
    let status = dev
        .wait_timeout(Duration::from_secs(60))
        .unwrap()
        .expect("dev stops after SIGINT");
    assert!(status.success(), "{status}");
}
