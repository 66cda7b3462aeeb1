//! Procedures of docs/operations.md against real processes: backing up a replica and
//! restoring it (it rejoins, losing nothing acknowledged), whether the copy is streamed
//! from the running replica, taken from its stopped directory by `megastore backup`, or
//! copied by hand; adding a replica (a witness, and a full one with its coordinator).

use std::path::Path;
use std::time::Duration;

use megastore_e2e::run_megastore;
use megastore_paxos::ReadPath;
use megastore_types::ReplicaId;

use crate::support::{
    connect, counter_value, current_read_until, eg, first_commit, increment, row, start_cluster,
};

fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .args(["-a"])
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
}

/// Stops replica b cleanly, once it has started serving (writes need only a majority,
/// so it may still be starting when they succeed).
fn stop_b(cluster: &mut megastore_e2e::LocalCluster) {
    cluster.wait_for_log("replica-b", "replica serving", Duration::from_secs(20));
    assert!(
        cluster
            .process("replica-b")
            .terminate(Duration::from_secs(10))
    );
}

/// Starts replica b again and commits three increments through it (votes that a copy
/// made before lacks).
fn restart_b_and_write(
    cluster: &mut megastore_e2e::LocalCluster,
    config: &megastore_config::ClusterConfig,
    runtime: &tokio::runtime::Runtime,
    group: &megastore_types::EgId,
) {
    cluster.start_process("replica-b");
    runtime.block_on(async {
        let at_b = connect(config, "B").await;
        for _ in 0..3 {
            increment(&at_b, group, "counter").await.unwrap();
        }
    });
}

/// Restores `backup` as replica b's store, restarts b, writes more, and checks that b
/// rejoined and serves everything acknowledged.
fn restore_and_check(
    cluster: &mut megastore_e2e::LocalCluster,
    config: &megastore_config::ClusterConfig,
    runtime: &tokio::runtime::Runtime,
    backup: &Path,
    group_number: u32,
    acknowledged: u64,
) {
    let group = eg(group_number);
    let counter = row(&group, "counter");
    stop_b(cluster);
    let data = config.replica("b").unwrap().data_dir.clone();
    std::fs::remove_dir_all(&data).unwrap();
    copy_dir(backup, &data);
    cluster.start_process("replica-b");
    runtime.block_on(async {
        let at_a = connect(config, "A").await;
        increment(&at_a, &group, "counter").await.unwrap();
        let at_b = connect(config, "B").await;
        let read = current_read_until(&at_b, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched && r.replica == ReplicaId(2)
        })
        .await;
        assert_eq!(
            counter_value(read.rows.into_iter().next()),
            acknowledged + 1
        );
    });
    crate::support::assert_rejoined(cluster, "replica-b", &data);
}

fn backup(config_arg: &str, name: &str, out: &Path, dir: &Path) -> megastore_e2e::Finished {
    run_megastore(
        &[
            "backup",
            "--config",
            config_arg,
            "--id",
            name,
            "--out",
            out.to_str().unwrap(),
        ],
        dir,
        Duration::from_secs(60),
    )
}

#[test]
fn a_backup_streamed_from_a_running_replica_rejoins_when_restored() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let group = eg(34);
    runtime.block_on(async {
        let at_b = connect(&config, "B").await;
        first_commit(&at_b, &group).await;
        for _ in 0..2 {
            increment(&at_b, &group, "counter").await.unwrap();
        }
    });
    cluster.wait_for_log("replica-b", "replica serving", Duration::from_secs(20));
    let out = dir.path().join("online-b");
    let made = backup(&config_arg, "b", &out, dir.path());
    assert!(
        made.status.success() && made.stdout.contains("streamed from the running replica"),
        "{made:?}"
    );
    assert!(out.join("CURRENT").exists(), "not a RocksDB directory");
    assert!(
        !out.join("MEGASTORE_STAMP").exists(),
        "a backup carries no stamp"
    );
    assert!(!dir.path().join("online-b.partial").exists());
    // The replica's scratch copy goes once streamed.
    let data = config.replica("b").unwrap().data_dir.clone();
    let scratch_left = || {
        std::fs::read_dir(&data).unwrap().flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("backup-in-progress-")
        })
    };
    let started = std::time::Instant::now();
    while scratch_left() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "scratch copy left behind"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Bad requests are named, and leave nothing behind.
    let again = backup(&config_arg, "b", &out, dir.path());
    assert!(
        !again.status.success()
            && again
                .stderr
                .contains("exists; a backup goes to a new directory"),
        "{again:?}"
    );
    let unknown = backup(&config_arg, "zz", &dir.path().join("zz"), dir.path());
    assert!(
        !unknown.status.success()
            && unknown
                .stderr
                .contains("no replica or server is called \"zz\""),
        "{unknown:?}"
    );
    assert!(!dir.path().join("zz").exists() && !dir.path().join("zz.partial").exists());
    // What an unfinished backup left is not overwritten, nor removed.
    let leftover = dir.path().join("left.partial");
    std::fs::create_dir(&leftover).unwrap();
    std::fs::write(leftover.join("mine"), b"keep").unwrap();
    let blocked = backup(&config_arg, "b", &dir.path().join("left"), dir.path());
    assert!(
        !blocked.status.success() && blocked.stderr.contains("a backup that did not finish?"),
        "{blocked:?}"
    );
    assert!(leftover.join("mine").exists());

    // b votes on these after the backup: the backup lacks those votes.
    runtime.block_on(async {
        let at_b = connect(&config, "B").await;
        for _ in 0..3 {
            increment(&at_b, &group, "counter").await.unwrap();
        }
    });
    restore_and_check(&mut cluster, &config, &runtime, &out, 34, 6);
}

#[test]
fn a_backup_of_a_stopped_replica_rejoins_when_restored() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let group = eg(31);
    runtime.block_on(async {
        let at_b = connect(&config, "B").await;
        first_commit(&at_b, &group).await;
        for _ in 0..2 {
            increment(&at_b, &group, "counter").await.unwrap();
        }
    });
    // Stopped, b cannot stream: the command copies its directory on this machine.
    let backup_dir = dir.path().join("backup-b");
    stop_b(&mut cluster);
    let made = backup(&config_arg, "b", &backup_dir, dir.path());
    assert!(
        made.status.success()
            && made
                .stdout
                .contains("copied from the stopped replica's directory"),
        "{made:?}"
    );
    assert!(
        !backup_dir.join("MEGASTORE_STAMP").exists(),
        "a backup carries no stamp"
    );
    // b votes on these after the backup: the backup lacks those votes.
    restart_b_and_write(&mut cluster, &config, &runtime, &group);
    restore_and_check(&mut cluster, &config, &runtime, &backup_dir, 31, 6);
}

#[test]
fn a_stopped_directory_copied_by_hand_is_recognised_when_restored() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let group = eg(32);
    runtime.block_on(async {
        let at_b = connect(&config, "B").await;
        first_commit(&at_b, &group).await;
    });
    // Copied with its stamp, while stopped; b then starts again (a later generation)
    // and votes on more writes.
    stop_b(&mut cluster);
    let copy = dir.path().join("copy-b");
    copy_dir(&config.replica("b").unwrap().data_dir, &copy);
    assert!(copy.join("MEGASTORE_STAMP").exists());
    restart_b_and_write(&mut cluster, &config, &runtime, &group);
    restore_and_check(&mut cluster, &config, &runtime, &copy, 32, 4);
}

/// Adds replica `e` (id 5, site C, `data/e`; `fields` gives its kind and addresses) to
/// the cluster's config, and restarts every running process with the new config, one at
/// a time (the cluster keeps serving) — as docs/operations.md says, before e or its
/// coordinator starts. Returns the new config's path and the config.
/// `megastore range split --at-group eg-0030` with the config at `config`, which must
/// succeed.
fn split_at_eg_0030(dir: &Path, config: &Path) {
    let split = run_megastore(
        &[
            "range",
            "split",
            "--at-group",
            "eg-0030",
            "--config",
            config.to_str().unwrap(),
        ],
        dir,
        Duration::from_secs(60),
    );
    assert!(split.status.success(), "{split:?}");
}

/// The placement `megastore range list -o json` shows with the config at `config`.
fn placement(dir: &Path, config: &Path) -> serde_json::Value {
    let out = run_megastore(
        &[
            "range",
            "list",
            "-o",
            "json",
            "--config",
            config.to_str().unwrap(),
        ],
        dir,
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("list JSON");
    json["placement"].clone()
}

/// [`grow_cluster`] with a second witness, e, at site C (on free ports).
pub(crate) fn grow_by_witness_e(
    cluster: &mut megastore_e2e::LocalCluster,
    dir: &Path,
) -> (std::path::PathBuf, megastore_config::ClusterConfig) {
    let ports = megastore_e2e::free_ports(2);
    grow_cluster(
        cluster,
        dir,
        &format!(
            "kind = \"witness\"\naddress = \"127.0.0.1:{}\"\nmetrics_address = \"127.0.0.1:{}\"\n",
            ports[0], ports[1]
        ),
    )
}

/// [`grow_cluster`] with a full replica, e, and its coordinator, at site C (which had
/// only a witness; on free ports).
pub(crate) fn grow_by_full_e(
    cluster: &mut megastore_e2e::LocalCluster,
    dir: &Path,
) -> (std::path::PathBuf, megastore_config::ClusterConfig) {
    let ports = megastore_e2e::free_ports(2);
    grow_cluster(
        cluster,
        dir,
        &format!(
            "kind = \"full\"\naddress = \"127.0.0.1:{}\"\ncoordinator_address = \"127.0.0.1:{}\"\n",
            ports[0], ports[1]
        ),
    )
}

/// Adds replica e (`fields`: its kind and addresses) to the cluster's config and
/// restarts every running process with it, one at a time; the new config's path and
/// contents.
fn grow_cluster(
    cluster: &mut megastore_e2e::LocalCluster,
    dir: &Path,
    fields: &str,
) -> (std::path::PathBuf, megastore_config::ClusterConfig) {
    let mut text = std::fs::read_to_string(&cluster.config_path).unwrap();
    text += &format!(
        "\n[[replicas]]\nname = \"e\"\nid = 5\nsite = \"C\"\ndata_dir = \"data/e\"\n{fields}"
    );
    let grown_path = dir.join("grown.toml");
    std::fs::write(&grown_path, text).unwrap();
    let grown = megastore_config::ClusterConfig::load(&grown_path).unwrap();
    for process in [
        "replica-a",
        "replica-b",
        "replica-c",
        "replica-d",
        "coordinator-a",
        "coordinator-b",
    ] {
        // Once it has started ("replica serving", "coordinator serving").
        cluster.wait_for_log(process, "serving", Duration::from_secs(20));
        assert!(cluster.process(process).terminate(Duration::from_secs(10)));
        cluster.start_process_with(process, &grown_path);
    }
    (grown_path, grown)
}

#[test]
fn a_replica_added_to_a_running_cluster_rejoins_catches_up_and_then_votes() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let group = eg(33);
    let counter = row(&group, "counter");
    runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        first_commit(&at_a, &group).await;
        for _ in 0..2 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
    });

    // The new config: a second witness, e, at site C. Every process restarts with it
    // (one at a time; the cluster keeps serving), then e starts.
    let (grown_path, grown) = grow_by_witness_e(&mut cluster, dir.path());
    cluster.start_process_with("replica-e", &grown_path);

    runtime.block_on(async {
        // Four voters now: a majority is three.
        let at_a = connect(&grown, "A").await;
        for _ in 0..3 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
        let read = current_read_until(&at_a, &group, &counter, |_| true).await;
        assert_eq!(counter_value(read.rows.into_iter().next()), 6);
    });
    // It started as a rejoining replica: no vote per group before it caught up.
    cluster.wait_for_log("replica-e", "rejoining=true", Duration::from_secs(20));

    // It catches up with the group (clearing its rejoin needs answers from the old
    // voters, all three of them while it does not count).
    runtime.block_on(async {
        let peers = megastore_rpc::Peers::new(&grown).unwrap();
        let started = std::time::Instant::now();
        loop {
            let status =
                megastore_client::status::cluster_status(&grown, &peers, Some(&group)).await;
            let e = status.replicas.iter().find(|r| r.name == "e").unwrap();
            if e.log.is_some_and(|log| log.visible.0 >= 6) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "e did not catch up: {:?}",
                e.log
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    // Once caught up it votes: with the first witness and the read-only replica
    // stopped, a, b and e are the only majority — writes need e.
    cluster.process("replica-c").signal("STOP");
    runtime.block_on(async {
        let at_b = connect(&grown, "B").await;
        let started = std::time::Instant::now();
        loop {
            match increment(&at_b, &group, "counter").await {
                Ok(n) => {
                    assert!(n >= 7);
                    break;
                }
                Err(e) => assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "no write with e as the third vote: {e}"
                ),
            }
        }
    });
    cluster.process("replica-c").signal("CONT");
    let status = run_megastore(
        &[
            "status",
            "--config",
            grown_path.to_str().unwrap(),
            "--group",
            "eg-0033",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(status.status.success(), "{status:?}");
    let e_line = status
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("e ") && l.contains("witness"))
        .unwrap_or_else(|| panic!("no line for e:\n{}", status.stdout));
    assert!(e_line.contains("serving"), "{e_line}");

    // An operator splits with the config from before e joined. Nothing was stored yet,
    // so the placement it stores is that config's default split: it names no slot of
    // e. e joins it again at its next poll, and votes on.
    split_at_eg_0030(dir.path(), &cluster.config_path);
    let started = std::time::Instant::now();
    loop {
        let json = placement(dir.path(), &grown_path);
        let ranges = json["ranges"].as_array().expect("ranges").clone();
        let e_everywhere = ranges.iter().all(|range| {
            range["slots"]
                .as_array()
                .is_some_and(|slots| slots.iter().any(|s| s["replica"] == 5))
        });
        if ranges.len() == 2 && e_everywhere {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "e did not place itself again: {json}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    cluster.process("replica-c").signal("STOP");
    runtime.block_on(async {
        let at_b = connect(&grown, "B").await;
        let started = std::time::Instant::now();
        while let Err(e) = increment(&at_b, &group, "counter").await {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no write with e as the third vote after the split: {e}"
            );
        }
    });
    cluster.process("replica-c").signal("CONT");
}

#[test]
fn a_full_replica_added_to_a_running_cluster_serves_local_reads_and_is_invalidated() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let group = eg(36);
    let counter = row(&group, "counter");
    runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        first_commit(&at_a, &group).await;
        increment(&at_a, &group, "counter").await.unwrap();
    });
    // A placement stored in lockd before e joins (a split): e places itself in it, on
    // a server of its own, or it would serve nothing.
    split_at_eg_0030(dir.path(), &cluster.config_path);
    assert_eq!(placement(dir.path(), &cluster.config_path)["version"], 2);

    // A full replica, e, with its coordinator, at site C (which had only a witness).
    let (grown_path, grown) = grow_by_full_e(&mut cluster, dir.path());
    cluster.start_process_with("replica-e", &grown_path);
    cluster.start_process_with("coordinator-e", &grown_path);
    cluster.wait_for_log("replica-e", "rejoining=true", Duration::from_secs(20));

    // Once caught up and validated, a reader at C reads e locally, and sees every
    // acknowledged write.
    runtime.block_on(async {
        let at_a = connect(&grown, "A").await;
        increment(&at_a, &group, "counter").await.unwrap();
        let at_c = connect(&grown, "C").await;
        let read = current_read_until(&at_c, &group, &counter, |r| {
            r.path == ReadPath::LocalVouched && r.replica == ReplicaId(5)
        })
        .await;
        assert_eq!(counter_value(read.rows.into_iter().next()), 3);
    });
    let grown_placement = placement(dir.path(), &grown_path);
    let ranges = grown_placement["ranges"].as_array().expect("ranges");
    assert_eq!(ranges.len(), 2, "{grown_placement}");
    for range in ranges {
        let slots = range["slots"].as_array().expect("slots");
        assert!(
            slots.iter().any(|s| s["replica"] == 5 && s["server"] == 5),
            "e has no slot of its own in {range}"
        );
    }

    // e misses a write (stopped): the writer invalidates e's coordinator, so the reader
    // at C is not served e's stale copy.
    cluster.process("replica-e").signal("STOP");
    runtime.block_on(async {
        let at_a = connect(&grown, "A").await;
        assert_eq!(increment(&at_a, &group, "counter").await.unwrap(), 4);
        let at_c = connect(&grown, "C").await;
        let read = current_read_until(&at_c, &group, &counter, |_| true).await;
        assert_ne!(
            (read.path, read.replica),
            (ReadPath::LocalVouched, ReplicaId(5)),
            "served by e, which missed a write"
        );
        assert_eq!(counter_value(read.rows.into_iter().next()), 4);
    });
    cluster.process("replica-e").signal("CONT");
}

/// A replica's answer to a read of untyped `group`'s `key` at `at`, asked directly
/// (in the replication protocol, which names the row store's rows).
async fn read_at(
    config: &megastore_config::ClusterConfig,
    replica: &str,
    group: &megastore_types::EgId,
    key: &[u8],
    at: megastore_paxos::ReadAt,
) -> megastore_paxos::ReplicaReply {
    use megastore_rpc::pb::replication as pb;
    let address = &config.replica(replica).unwrap().address;
    let channel = megastore_rpc::Transport::plain()
        .channel(address, Duration::from_secs(2))
        .unwrap();
    let request = megastore_paxos::ReplicaRequest::Read {
        id: 7,
        eg: group.clone(),
        at,
        query: megastore_paxos::DataQuery::Rows(vec![megastore_schema::keyspace::untyped_row(
            &group.0, key,
        )]),
    };
    let reply = pb::replication_client::ReplicationClient::new(channel)
        .call(pb::ReplicaRequest::from(request))
        .await
        .unwrap()
        .into_inner();
    megastore_paxos::ReplicaReply::try_from(reply).unwrap()
}

#[test]
fn old_versions_are_collected_and_reads_that_far_back_are_refused() {
    use megastore_paxos::{ReadAt, ReplicaError, ReplicaReply};
    use megastore_types::Position;
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    // Four positions of history below the truncation point, instead of 256, and no log
    // kept for watchers (truncated as far as every replica allows).
    let cluster = megastore_e2e::LocalCluster::start_configured(dir.path(), |config| {
        let mut text = std::fs::read_to_string(config).unwrap();
        text.push_str("\n[history]\nkept_positions = 4\nlog_positions = 0\n");
        std::fs::write(config, text).unwrap();
    });
    let config = megastore_config::ClusterConfig::load(&cluster.config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let group = eg(37);
    let counter = row(&group, "counter");
    runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        first_commit(&at_a, &group).await;
        let first = current_read_until(&at_a, &group, &counter, |_| true)
            .await
            .position
            .unwrap();
        // Served at its position while the history is kept (once replica a applied it:
        // the current read may have been served by another replica).
        let started = std::time::Instant::now();
        loop {
            let reply = read_at(&config, "a", &group, &counter, ReadAt::Position(first)).await;
            match reply {
                ReplicaReply::Data { .. } => break,
                ReplicaReply::Error {
                    error: ReplicaError::NotApplied { .. },
                    ..
                } if started.elapsed() < Duration::from_secs(10) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => panic!("a read at {first} within the kept history: {other:?}"),
            }
        }
        for _ in 0..40 {
            increment(&at_a, &group, "counter").await.unwrap();
        }
        // Once every replica applied them, truncation and collection follow: the first
        // position's versions are gone, and a read there is refused rather than answered
        // from what is left.
        let started = std::time::Instant::now();
        loop {
            let reply = read_at(&config, "a", &group, &counter, ReadAt::Position(first)).await;
            match reply {
                ReplicaReply::Error {
                    error: ReplicaError::HistoryFrom { installed },
                    ..
                } => {
                    assert!(installed > first && installed < Position(41), "{installed}");
                    break;
                }
                other => assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "a read at {first} is still served: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The latest data is intact, locally and at the other replicas.
        let read = current_read_until(&at_a, &group, &counter, |_| true).await;
        assert_eq!(counter_value(read.rows.into_iter().next()), 41);
        let at_b = connect(&config, "B").await;
        let read = current_read_until(&at_b, &group, &counter, |_| true).await;
        assert_eq!(counter_value(read.rows.into_iter().next()), 41);
    });
}
