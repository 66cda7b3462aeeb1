//! Real server processes on loopback, killed the hard way.

use std::path::Path;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_e2e::{Process, free_ports, run_megastore};
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_rpc::LockdClient;
use megastore_rpc::pb::coordinator::coordinator_client::CoordinatorClient;
use megastore_rpc::{coordinator_reply_from_wire, pb};
use megastore_types::{EgId, Epoch, LockNodeId, Position};

use crate::support::find_leader;

/// A three-node lockd config with short timeouts, in `dir`.
fn lockd_config(dir: &Path) -> std::path::PathBuf {
    let ports = free_ports(5);
    let mut text = format!(
        "[cluster]\nname = \"e2e\"\nsites = [\"A\", \"B\", \"C\"]\n\n\
         [timeouts]\nlock_lease_ms = 2000\nelection_timeout_ms = 300\nheartbeat_ms = 75\nrpc_ms = 500\n\n\
         [[replicas]]\nname = \"a\"\nid = 1\nsite = \"A\"\nkind = \"full\"\n\
         address = \"127.0.0.1:{}\"\ncoordinator_address = \"127.0.0.1:{}\"\ndata_dir = \"a\"\n",
        ports[0], ports[1]
    );
    for (i, site) in ["A", "B", "C"].iter().enumerate() {
        text += &format!(
            "\n[[lockd]]\nname = \"lock-{i}\"\nid = {}\nsite = \"{site}\"\naddress = \"127.0.0.1:{}\"\ndata_dir = \"lock-{i}\"\n",
            i + 1,
            ports[2 + i]
        );
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start_lockd(config_arg: &str, dir: &Path) -> Vec<Process> {
    (0..3)
        .map(|i| {
            let name = format!("lock-{i}");
            Process::start(
                &name,
                &["lockd", "--config", config_arg, "--id", &name],
                dir,
            )
        })
        .collect()
}

#[test]
fn lockd_survives_sigkill_of_its_leader_process() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config_path = lockd_config(dir.path());
    let config_arg = config_path.to_str().unwrap();
    let config = ClusterConfig::load(&config_path).unwrap();
    let mut nodes = start_lockd(config_arg, dir.path());

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = LockdClient::new(&config).unwrap();
        let opened = client
            .execute(LockCommand::OpenSession {
                owner: "coordinator-a".into(),
            })
            .await;
        let Ok(LockReply::Session { session, .. }) = opened else {
            panic!("no session: {opened:?}");
        };
        let acquired = client
            .execute(LockCommand::Acquire {
                session,
                lock: "coordinator/1".into(),
            })
            .await;
        assert!(
            matches!(acquired, Ok(LockReply::Acquired { .. })),
            "{acquired:?}"
        );
        let written = client
            .execute(LockCommand::WriteFile {
                name: "catalog".into(),
                expected: 0,
                contents: b"v1".to_vec(),
            })
            .await;
        assert_eq!(written, Ok(LockReply::Written { version: 1 }));

        let leader = find_leader(&client, &config).await.expect("a leader");
        nodes[leader].kill();
        let killed_at = Instant::now();

        // The session survives the failover when kept alive, and everything
        // acknowledged is still there.
        let renewed = client.execute(LockCommand::KeepAlive { session }).await;
        assert!(
            matches!(renewed, Ok(LockReply::Renewed { .. })),
            "{renewed:?}"
        );
        assert!(
            killed_at.elapsed() < Duration::from_secs(5),
            "failover took {:?}",
            killed_at.elapsed()
        );
        let file = client
            .execute(LockCommand::ReadFile {
                name: "catalog".into(),
            })
            .await;
        let Ok(LockReply::File(Some(file))) = file else {
            panic!("catalog lost: {file:?}");
        };
        assert_eq!(file.contents, b"v1");
        let holder = client
            .execute(LockCommand::Holder {
                lock: "coordinator/1".into(),
            })
            .await;
        assert!(
            matches!(&holder, Ok(LockReply::Holder(Some(h))) if h.session == session),
            "{holder:?}"
        );
        let new_leader = find_leader(&client, &config).await.expect("a new leader");
        assert_ne!(new_leader, leader);
        assert!(
            config
                .lockd_ids()
                .contains(&LockNodeId(config.lockd[new_leader].id))
        );

        // Losing a second node leaves no majority: commands fail, never hang.
        let second = (0..3).find(|&i| i != leader && i != new_leader).unwrap();
        nodes[second].kill();
        nodes[new_leader].kill();
        let started = Instant::now();
        let stalled = client
            .execute(LockCommand::ReadFile {
                name: "catalog".into(),
            })
            .await;
        assert_eq!(stalled, Err(LockError::Unavailable));
        assert!(started.elapsed() < Duration::from_secs(10));
    });
    // Every node restarted on its directory: the state is all there.
    for (i, node) in nodes.iter_mut().enumerate() {
        let name = format!("lock-{i}");
        *node = megastore_e2e::start_listening(
            &name,
            &["lockd", "--config", config_arg, "--id", &name],
            dir.path(),
        );
    }
    runtime.block_on(async {
        let client = LockdClient::new(&config).unwrap();
        let file = client
            .execute(LockCommand::ReadFile {
                name: "catalog".into(),
            })
            .await;
        assert!(
            matches!(&file, Ok(LockReply::File(Some(f))) if f.contents == b"v1"),
            "{file:?}"
        );
    });
    for node in &mut nodes {
        assert!(node.terminate(Duration::from_secs(10)), "{}", node.log());
    }
}

/// One coordinator call over gRPC.
async fn ask(
    client: &mut CoordinatorClient<tonic::transport::Channel>,
    request: CoordinatorRequest,
) -> Option<CoordinatorReply> {
    let reply = client
        .call(pb::coordinator::CoordinatorRequest::from(request))
        .await
        .expect("the coordinator answers");
    coordinator_reply_from_wire(reply.into_inner()).expect("a well-formed reply")
}

async fn query(
    client: &mut CoordinatorClient<tonic::transport::Channel>,
    eg: &EgId,
) -> (bool, Option<Epoch>) {
    match ask(
        client,
        CoordinatorRequest::Query {
            id: 1,
            eg: eg.clone(),
        },
    )
    .await
    {
        Some(CoordinatorReply::Query { vouched, epoch, .. }) => (vouched, epoch),
        other => panic!("a query got {other:?}"),
    }
}

/// Polls until the coordinator serves in an epoch other than `not`.
async fn wait_for_epoch(
    client: &mut CoordinatorClient<tonic::transport::Channel>,
    not: Option<Epoch>,
    limit: Duration,
) -> Epoch {
    let started = Instant::now();
    loop {
        if let (_, Some(epoch)) = query(client, &megastore_client::group(b"probe").unwrap()).await
            && Some(epoch) != not
        {
            return epoch;
        }
        assert!(
            started.elapsed() < limit,
            "no new coordinator epoch within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Validates `eg` at `position` in `epoch` until the coordinator vouches for it: a
/// coordinator in a new epoch serves only once its placement read, sent after it took
/// its lock, came back (*placement-read-after-lock*), and ignores validates until then.
async fn validate_until_vouched(
    client: &mut CoordinatorClient<tonic::transport::Channel>,
    eg: &EgId,
    position: u64,
    epoch: Epoch,
) {
    let started = Instant::now();
    loop {
        let validate = CoordinatorRequest::Validate {
            eg: eg.clone(),
            position: Position(position),
            epoch,
        };
        ask(client, validate).await;
        if query(client, eg).await == (true, Some(epoch)) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{eg} not vouched for in {epoch:?} within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn connect(address: &str) -> CoordinatorClient<tonic::transport::Channel> {
    let started = Instant::now();
    loop {
        match CoordinatorClient::connect(format!("http://{address}")).await {
            Ok(client) => return client,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "cannot reach {address}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[test]
fn coordinator_process_vouches_per_epoch_and_can_be_disabled() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config_path = lockd_config(dir.path());
    let config_arg = config_path.to_str().unwrap();
    let config = ClusterConfig::load(&config_path).unwrap();
    let _lockd = start_lockd(config_arg, dir.path());
    let address = config.replicas[0].coordinator_address.clone().unwrap();
    let start_coordinator = || {
        megastore_e2e::start_listening(
            "coordinator-a",
            &["coordinator", "--config", config_arg, "--id", "a"],
            dir.path(),
        )
    };
    let mut coordinator = start_coordinator();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let eg = megastore_client::group(b"user/1").unwrap();
    let first = runtime.block_on(async {
        let mut c = connect(&address).await;
        let epoch = wait_for_epoch(&mut c, None, Duration::from_secs(10)).await;
        assert_eq!(
            query(&mut c, &eg).await,
            (false, Some(epoch)),
            "nothing validated yet"
        );
        let validate = |position: u64, epoch: Epoch| CoordinatorRequest::Validate {
            eg: eg.clone(),
            position: Position(position),
            epoch,
        };
        assert_eq!(ask(&mut c, validate(5, Epoch(epoch.0 + 1))).await, None);
        assert!(
            !query(&mut c, &eg).await.0,
            "a validate from another epoch counts"
        );
        validate_until_vouched(&mut c, &eg, 5, epoch).await;
        let invalidated = ask(
            &mut c,
            CoordinatorRequest::Invalidate {
                id: 9,
                eg: eg.clone(),
                position: Position(6),
            },
        )
        .await;
        assert_eq!(invalidated, Some(CoordinatorReply::Invalidated { id: 9 }));
        assert!(!query(&mut c, &eg).await.0);
        ask(&mut c, validate(5, epoch)).await;
        assert!(
            !query(&mut c, &eg).await.0,
            "a validate below an invalidate counts"
        );
        ask(&mut c, validate(6, epoch)).await;
        assert!(query(&mut c, &eg).await.0);
        epoch
    });

    // SIGKILL: a new process gets the lock only once the old lease lapsed, in a later
    // epoch, knowing nothing.
    coordinator.kill();
    let killed = Instant::now();
    coordinator = start_coordinator();
    let second = runtime.block_on(async {
        let mut c = connect(&address).await;
        let epoch = wait_for_epoch(&mut c, Some(first), Duration::from_secs(15)).await;
        assert!(epoch > first);
        assert_eq!(query(&mut c, &eg).await, (false, Some(epoch)));
        epoch
    });
    assert!(
        killed.elapsed() >= config.timeouts.lock_lease() / 2,
        "the lock moved after {:?}, before the old lease could lapse",
        killed.elapsed()
    );

    // A clean stop (SIGTERM) gives the lock back: the next process takes it at once.
    assert!(
        coordinator.terminate(Duration::from_secs(20)),
        "no clean stop"
    );
    let stopped = Instant::now();
    coordinator = start_coordinator();
    let third = runtime.block_on(async {
        let mut c = connect(&address).await;
        let epoch = wait_for_epoch(&mut c, Some(second), Duration::from_secs(15)).await;
        assert!(epoch > second);
        epoch
    });
    assert!(
        stopped.elapsed() < config.timeouts.lock_lease() / 2,
        "the lock moved only after {:?}: the stopped coordinator did not give it back",
        stopped.elapsed()
    );

    // `coordinator disable`: the coordinator stops vouching and gives its lock back once
    // its next keep-alive is refused — before the command returns — and never vouches
    // again.
    runtime.block_on(async {
        let mut c = connect(&address).await;
        validate_until_vouched(&mut c, &eg, 6, third).await;
    });
    let out = run_megastore(
        &["coordinator", "disable", "a", "--config", config_arg],
        dir.path(),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success() && out.stdout.contains("session revoked; it stopped vouching"),
        "{out:?}"
    );
    let waited = seconds_in(&out.stdout, "was free after ");
    assert!(
        waited < config.timeouts.lock_lease().as_secs_f64() / 2.0,
        "the lock was free only {waited} s after the revocation: {out:?}"
    );
    runtime.block_on(async {
        let mut c = connect(&address).await;
        assert_eq!(query(&mut c, &eg).await, (false, None), "still vouching");
        tokio::time::sleep(config.timeouts.lock_lease()).await;
        assert_eq!(
            query(&mut c, &eg).await,
            (false, None),
            "a disabled coordinator came back"
        );
    });
    assert!(coordinator.running());
    let unknown = run_megastore(
        &["coordinator", "--config", config_arg, "--id", "zz"],
        dir.path(),
        Duration::from_secs(20),
    );
    assert!(
        !unknown.status.success()
            && unknown
                .stderr
                .contains("no full replica or server of one is called \"zz\""),
        "{unknown:?}"
    );
}

/// The number of seconds printed right after `label` in `text` ("… after 0.42 s").
fn seconds_in(text: &str, label: &str) -> f64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
        + label.len();
    text[at..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {text}"))
}

#[test]
fn a_data_directory_of_the_old_row_layout_is_refused_at_start() {
    use megastore_rowstore::{Durability, RowMutation, RowStore};
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config = megastore_e2e::write_cluster_config(dir.path());
    let data = dir.path().join("data/a");
    std::fs::create_dir_all(&data).unwrap();
    {
        // What a replica of row layout 1 left: a group registered under its raw name,
        // and no layout marker.
        let store = megastore_rowstore_rocksdb::RocksStore::open(&data).unwrap();
        let registered = RowMutation::new(b"\xff\xffmegastore/groups/eg-0001".to_vec()).set(
            b"g".to_vec(),
            0,
            Vec::new(),
        );
        store
            .mutate_row(&registered, None, Durability::Synced)
            .unwrap();
    }
    let out = run_megastore(
        &["replica", "--config", config.to_str().unwrap(), "--id", "a"],
        dir.path(),
        Duration::from_secs(30),
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(
        out.stderr.contains("row layout 1") && out.stderr.contains("empty data directory"),
        "{}",
        out.stderr
    );
}

/// A data directory that cannot be created is one plain sentence naming it and the OS's
/// reason — no debug text, no misleading `config:` — for a replica and a lockd node.
#[test]
fn a_data_directory_that_cannot_be_made_is_named_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = megastore_e2e::write_cluster_config(dir.path());
    // Every data directory lies under a plain file.
    std::fs::write(dir.path().join("file"), "not a directory").unwrap();
    let text = std::fs::read_to_string(&config).unwrap();
    let blocked = text.replace("data_dir = \"", "data_dir = \"file/");
    assert_ne!(text, blocked, "the config names data directories");
    std::fs::write(&config, blocked).unwrap();
    let config = config.to_str().unwrap();
    let names = {
        let loaded = megastore_config::ClusterConfig::load(std::path::Path::new(config)).unwrap();
        (
            loaded.replicas[0].name.clone(),
            loaded.lockd[0].name.clone(),
        )
    };
    for (command, id) in [("replica", &names.0), ("lockd", &names.1)] {
        let out = run_megastore(
            &[command, "--config", config, "--id", id],
            dir.path(),
            Duration::from_secs(30),
        );
        assert!(!out.status.success(), "{out:?}");
        assert!(
            out.stderr
                .contains("cannot create the directory: Not a directory")
                && out.stderr.contains("file/data/"),
            "{command}: {}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("Os {") && !out.stderr.contains("config:"),
            "{command}: {}",
            out.stderr
        );
    }
}
