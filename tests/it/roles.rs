//! Replica roles, a lost lockd leader, and bad input, against real processes.

use std::time::{Duration, Instant};

use megastore_client::Client;
use megastore_e2e::run_megastore;
use megastore_paxos::{
    DataQuery, LogEntry, ReadAt, ReadMode, ReadPath, ReplicaReply, ReplicaRequest,
    messages::ReplicaError,
};
use megastore_rpc::LockdClient;
use megastore_rpc::pb;
use megastore_rpc::pb::replication::replication_client::ReplicationClient;
use megastore_types::{Ballot, EgId, Position};

use crate::support::{connect, current_read_until, find_leader, start_cluster};

/// Commits one write to `group`, retrying while the cluster starts; returns the row.
async fn write_once(client: &Client, group: &EgId) -> Vec<u8> {
    let key = b"row".to_vec();
    let started = Instant::now();
    loop {
        let attempt = client
            .transaction(group, async |txn| txn.set(&key, b"c", b"v"))
            .await;
        match attempt {
            Ok(_) => return key,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "no commit: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn ask(address: &str, request: ReplicaRequest) -> ReplicaReply {
    let mut client = ReplicationClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    let reply = client
        .call(pb::replication::ReplicaRequest::from(request))
        .await
        .unwrap();
    ReplicaReply::try_from(reply.into_inner()).unwrap()
}

#[test]
fn witnesses_serve_no_reads_read_only_replicas_never_vote_and_bad_input_is_refused() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let group = megastore_client::group(b"roles-0001").unwrap();
    runtime.block_on(async {
        let client = connect(&config, "C").await;
        let key = write_once(&client, &group).await;
        let witness = &config.replica("c").unwrap().address;
        let read_only = &config.replica("d").unwrap().address;

        let read = ReplicaRequest::Read {
            id: 1,
            eg: group.clone(),
            at: ReadAt::Latest,
            query: DataQuery::Rows(vec![megastore_schema::keyspace::untyped_row(
                &group.0, &key,
            )]),
        };
        assert_eq!(
            ask(witness, read).await,
            ReplicaReply::Error {
                id: 1,
                error: ReplicaError::NotServing
            }
        );
        let accept = ReplicaRequest::Accept {
            id: 2,
            eg: group.clone(),
            position: Position(100),
            ballot: Ballot::ZERO,
            entry: LogEntry::noop(),
            grant: false,
            previous_visible: None,
            voters_at: megastore_placement::Version(0),
        };
        assert_eq!(
            ask(read_only, accept).await,
            ReplicaReply::Error {
                id: 2,
                error: ReplicaError::NotVoter
            }
        );
        // A client at the witness's site reads from full replicas elsewhere.
        let current = client
            .read(
                &group,
                ReadMode::Current,
                DataQuery::Rows(vec![key.clone()]),
            )
            .await
            .unwrap();
        assert_ne!(current.replica, megastore_types::ReplicaId(3));

        // A malformed request is refused naming the field; the replica keeps serving.
        let mut raw =
            ReplicationClient::connect(format!("http://{}", config.replica("a").unwrap().address))
                .await
                .unwrap();
        let refused = raw
            .call(pb::replication::ReplicaRequest {
                id: 5,
                eg: group.0.clone(),
                request: None,
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(refused.message().contains("request"), "{refused:?}");
        let again = client
            .read(&group, ReadMode::Current, DataQuery::Rows(vec![key]))
            .await
            .unwrap();
        assert_eq!(again.rows.len(), 1);
    });

    // Bad configs and names: clear errors that name the field or list the choices.
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(&cluster.config_path)
        .unwrap()
        .replacen("site = \"B\"", "site = \"Mars\"", 1);
    std::fs::write(&bad, text).unwrap();
    let out = run_megastore(
        &["replica", "--config", bad.to_str().unwrap(), "--id", "b"],
        dir.path(),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr
            .contains("replicas[1].site: unknown site \"Mars\""),
        "{}",
        out.stderr
    );
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let out = run_megastore(
        &["replica", "--config", &config_arg, "--id", "zz"],
        dir.path(),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("no replica or server is called \"zz\"")
            && out.stderr.contains("a, b, c, d"),
        "{}",
        out.stderr
    );
    // A second process on a running replica's directory is refused.
    let out = run_megastore(
        &["replica", "--config", &config_arg, "--id", "a"],
        dir.path(),
        Duration::from_secs(20),
    );
    assert!(!out.status.success(), "{out:?}");
    for name in ["replica-a", "replica-b", "replica-c", "replica-d"] {
        let process = cluster.process(name);
        assert!(process.running(), "{name} died:\n{}", process.log());
    }

    // A data directory stamped for another replica is refused (c's and d's swapped: a
    // config naming one directory twice is refused before any stamp is read).
    cluster.process("replica-c").kill();
    cluster.process("replica-d").kill();
    let swapped = dir.path().join("swapped.toml");
    let text = std::fs::read_to_string(&cluster.config_path)
        .unwrap()
        .replacen("data_dir = \"data/c\"", "data_dir = \"data/swap\"", 1)
        .replacen("data_dir = \"data/d\"", "data_dir = \"data/c\"", 1)
        .replacen("data_dir = \"data/swap\"", "data_dir = \"data/d\"", 1);
    std::fs::write(&swapped, text).unwrap();
    let out = run_megastore(
        &[
            "replica",
            "--config",
            swapped.to_str().unwrap(),
            "--id",
            "c",
        ],
        dir.path(),
        Duration::from_secs(20),
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(
        out.stderr.contains("belongs to replica 4"),
        "{}",
        out.stderr
    );
}

#[test]
fn the_cluster_keeps_working_when_the_lockd_leader_is_killed() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let group = megastore_client::group(b"lockd-0001").unwrap();
    let leader = runtime.block_on(async {
        let client = connect(&config, "A").await;
        let key = write_once(&client, &group).await;
        // Reads at A are vouched locally: coordinator a holds its lock.
        current_read_until(&client, &group, &key, |r| r.path == ReadPath::LocalVouched).await;
        let lockd = LockdClient::new(&config).unwrap();
        find_leader(&lockd, &config).await.expect("a lockd leader")
    });
    cluster.process(&format!("lock-{leader}")).kill();
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        // Writes go on, and after a few lease periods coordinators still vouch: their
        // sessions moved to the new lockd leader.
        for _ in 0..5 {
            write_once(&client, &group).await;
        }
        tokio::time::sleep(config.timeouts.lock_lease() * 2).await;
        let key = b"row".to_vec();
        current_read_until(&client, &group, &key, |r| r.path == ReadPath::LocalVouched).await;
    });
    for name in ["coordinator-a", "coordinator-b", "replica-a"] {
        let process = cluster.process(name);
        assert!(process.running(), "{name} died:\n{}", process.log());
    }
}
