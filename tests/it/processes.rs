//! Real server processes on loopback, killed the hard way.

use std::path::Path;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_e2e::{Process, free_ports};
use megastore_lock::{LockCommand, LockError, LockReply, LockRequest};
use megastore_lockd::LockdClient;
use megastore_types::LockNodeId;

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

/// Which node leads: the one that answers a holder query instead of `NotLeader`.
async fn find_leader(client: &LockdClient, config: &ClusterConfig) -> Option<usize> {
    for (i, id) in config.lockd_ids().into_iter().enumerate() {
        let request = LockRequest {
            id: 7,
            command: LockCommand::Holder {
                lock: "probe".into(),
            },
        };
        if let Some(response) = client.send(id, request).await
            && matches!(response.result, Ok(LockReply::Holder(_)))
        {
            return Some(i);
        }
    }
    None
}

#[test]
fn lockd_survives_sigkill_of_its_leader_process() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = lockd_config(dir.path());
    let config_arg = config_path.to_str().unwrap();
    let config = ClusterConfig::load(&config_path).unwrap();
    let mut nodes: Vec<Process> = (0..3)
        .map(|i| {
            let name = format!("lock-{i}");
            Process::start(
                &name,
                &["lockd", "--config", config_arg, "--id", &name],
                dir.path(),
            )
        })
        .collect();

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
            killed_at.elapsed() < Duration::from_secs(2),
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
        *node = Process::start(
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
