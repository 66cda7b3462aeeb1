//! The public gRPC API driven by a non-Rust client: Python's grpcio, with stubs
//! generated from `proto/megastore/client/v1/client.proto` at test time.

use std::process::Command;
use std::time::Duration;

use megastore_config::ClusterConfig;
use megastore_e2e::{LocalCluster, python_with_grpc, repo_root};
use wait_timeout::ChildExt;

#[test]
fn python_grpc_client_runs_transactions_reads_and_versioned_txns() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let python = python_with_grpc();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path());
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    let address = config.replica("a").unwrap().address.clone();
    let script = repo_root().join("tests/python/client_api.py");
    let mut child = Command::new(python)
        .arg(&script)
        .arg(repo_root())
        .arg(&address)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let Some(status) = child.wait_timeout(Duration::from_secs(120)).unwrap() else {
        let _ = child.kill();
        panic!("the Python client did not finish within 2 minutes");
    };
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(status.success(), "python failed:\n{stdout}\n{stderr}");
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();

    assert_eq!(seen["read_before_write"], 0);
    assert_eq!(seen["commit"], "committed");
    assert!(seen["position"].as_u64().unwrap() >= 1);
    for mode in ["current", "snapshot", "inconsistent"] {
        assert_eq!(
            seen[format!("read_{mode}")],
            serde_json::json!(["Ada"]),
            "{mode}: {seen}"
        );
    }
    assert_eq!(seen["path_snapshot"], "snapshot");
    assert_eq!(seen["first_commit"], "committed");
    assert_eq!(seen["second_commit"], "conflict");
    let counter_key = hex(b"py-group-0001\x01counter");
    assert_eq!(seen["conflict_keys"], serde_json::json!([counter_key]));
    assert_eq!(seen["claim"], "applied");
    assert_eq!(seen["claim_version"], 1);
    assert_eq!(seen["claim_again"], "assert_failed");
    assert_eq!(
        seen["snapshot"],
        serde_json::json!([["jobs/1", 1, "python"], ["jobs/none", 0, null]])
    );
    assert_eq!(seen["keys"], serde_json::json!(["jobs/1"]));
    let errors = &seen["errors"];
    for (case, code, field) in [
        ("no_mode", "INVALID_ARGUMENT", "mode:"),
        ("no_eg", "INVALID_ARGUMENT", "eg:"),
        ("foreign_key", "INVALID_ARGUMENT", "rows[0].key:"),
        ("reserved_key", "INVALID_ARGUMENT", "rows[0].key:"),
        ("unknown_txn", "NOT_FOUND", "txn:"),
    ] {
        assert_eq!(errors[case][0], code, "{case}: {errors}");
        assert!(
            errors[case][1].as_str().unwrap().starts_with(field),
            "{case}: {errors}"
        );
    }
    assert_eq!(seen["after_errors"], serde_json::json!(["Ada"]));
    for name in ["replica-a", "replica-b", "replica-c", "replica-d"] {
        let process = cluster.process(name);
        assert!(process.running(), "{name} died:\n{}", process.log());
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
