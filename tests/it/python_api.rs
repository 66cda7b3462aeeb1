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
    // The photo schema, for the typed half of the API; an incompatible change is refused.
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let apply = |file: &std::path::Path| {
        megastore_e2e::run_megastore(
            &[
                "schema",
                "apply",
                file.to_str().unwrap(),
                "--config",
                &config_arg,
            ],
            dir.path(),
            Duration::from_secs(60),
        )
    };
    let photos = repo_root().join("schema/photos.msdl");
    let applied = apply(&photos);
    assert!(
        applied.status.success() && applied.stdout.contains("catalog version 1"),
        "{applied:?}"
    );
    let changed = dir.path().join("photos-changed.msdl");
    let text = std::fs::read_to_string(&photos).unwrap();
    std::fs::write(
        &changed,
        text.replace("required int64 time;", "required string time;"),
    )
    .unwrap();
    let refused = apply(&changed);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("Photo.time: its type or cardinality changed"),
        "{}",
        refused.stderr
    );
    assert!(
        apply(&photos).stdout.contains("catalog version 2"),
        "re-applying the same schema is fine"
    );

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
    assert_eq!(seen["conflict_keys"], serde_json::json!([hex(b"counter")]));
    // profile and counter; then also the staged row, last in key order.
    assert_eq!(seen["txn_scan"], serde_json::json!([2, 3, "zz-new"]));
    assert_eq!(seen["claim"], "applied");
    assert_eq!(seen["claim_version"], 1);
    assert_eq!(seen["claim_again"], "assert_failed");
    assert_eq!(
        seen["snapshot"],
        serde_json::json!([["jobs/1", 1, "python"], ["jobs/none", 0, null]])
    );
    assert_eq!(seen["keys"], serde_json::json!(["jobs/1"]));
    assert_eq!(
        seen["watch"],
        serde_json::json!([[true, "jobs/1", 1, "python"], [true, "jobs/1", 2, "done"]])
    );
    let errors = &seen["errors"];
    for (case, code, field) in [
        ("no_mode", "INVALID_ARGUMENT", "mode:"),
        ("no_eg", "INVALID_ARGUMENT", "eg:"),
        ("empty_key", "INVALID_ARGUMENT", "rows[0].key:"),
        (
            "long_key",
            "INVALID_ARGUMENT",
            "rows[0].key: key is 10001 bytes; the limit is 10000",
        ),
        (
            "large_value",
            "INVALID_ARGUMENT",
            "rows[0].cells[0]: value: value is 100001 bytes; the limit is 100000",
        ),
        ("unknown_txn", "NOT_FOUND", "txn:"),
        ("resolve_without_id", "INVALID_ARGUMENT", "id:"),
    ] {
        assert_eq!(errors[case][0], code, "{case}: {errors}");
        assert!(
            errors[case][1].as_str().unwrap().starts_with(field),
            "{case}: {errors}"
        );
    }
    assert_eq!(seen["after_errors"], serde_json::json!(["Ada"]));
    assert_eq!(
        seen["blind"],
        serde_json::json!({"id_is_next": true, "outcome": "committed", "after_begin": true})
    );
    assert_eq!(errors["blind_read"][0], "INVALID_ARGUMENT", "{errors}");
    assert_eq!(
        seen["queue"],
        serde_json::json!({"sent": "committed", "bodies": ["from python"], "senders": ["py-group-0001"], "left": 0}),
        "a message sent from Python is received once"
    );
    assert_eq!(errors["send_nowhere"][0], "INVALID_ARGUMENT", "{errors}");
    assert_eq!(
        seen["two_phase"],
        serde_json::json!({
            "commit": "committed",
            "again": "committed",
            "resolved": "committed",
            "right": ["right"],
            "left_prepared": 0
        }),
        "a transaction across groups from Python"
    );
    assert_eq!(
        errors["commit_multi_twice"][0], "INVALID_ARGUMENT",
        "{errors}"
    );
    assert!(
        errors["send_nowhere"][1]
            .as_str()
            .unwrap()
            .starts_with("to: "),
        "the field is named: {errors}"
    );
    // An untyped group's write stays in that group (issue 11's first defect: group
    // 0x01 once held User 5's rows, and this write corrupted the entity).
    assert_eq!(seen["stray_commit"], "committed");
    assert_eq!(seen["typed_user_after_stray"], "grace");
    assert_eq!(seen["nested_scan"], serde_json::json!(["k"]));
    let one = &seen["one_position"];
    assert!(
        one["write_position"].as_u64() > one["begin_position"].as_u64(),
        "{one}"
    );
    assert_eq!(one["first"], one["again"], "{one}");
    assert_eq!(one["first"], one["scanned"], "{one}");
    assert_ne!(one["first"], serde_json::json!(["moved-on"]), "{one}");
    assert_eq!(one["read_only_commit"], "committed", "{one}");
    let outcomes = &seen["outcomes"];
    assert_eq!(
        outcomes["id_position"].as_u64(),
        outcomes["begin_position"].as_u64().map(|p| p + 1),
        "{outcomes}"
    );
    assert_eq!(
        outcomes["committed_at"], outcomes["id_position"],
        "{outcomes}"
    );
    assert_eq!(outcomes["again_at"], outcomes["committed_at"], "{outcomes}");
    assert_eq!(outcomes["resolved"], "committed", "{outcomes}");
    assert_eq!(
        outcomes["resolved_at"], outcomes["committed_at"],
        "{outcomes}"
    );
    assert_eq!(outcomes["aborted_resolved"], "not_committed", "{outcomes}");
    assert_eq!(seen["typed_commit"], "committed");
    assert_eq!(seen["typed_photos"], serde_json::json!([1, 2]));
    assert_eq!(
        seen["typed_by_time"],
        serde_json::json!([2, 1]),
        "PhotosByTime orders by time"
    );
    assert_eq!(seen["typed_user"], "grace");
    assert_eq!(seen["typed_missing"], false);
    assert_eq!(
        seen["typed_conflict"],
        serde_json::json!([["Photo", ["int64", "int32"]]]),
        "the conflict names the photo by table and key"
    );
    for (mode, path) in [
        ("current", None),
        ("snapshot", Some("snapshot")),
        ("inconsistent", Some("inconsistent")),
    ] {
        let read = &seen[format!("read_entity_{mode}")];
        assert_eq!(read[0], "grace", "{mode}: {read}");
        if let Some(path) = path {
            assert_eq!(read[1], path, "{mode}: {read}");
        }
    }
    assert_eq!(seen["group_of"], serde_json::json!(["User", 5, true]));
    assert_eq!(
        seen["global_sea"],
        serde_json::json!([[5, 2]]),
        "PhotosByTag lists photo 2 once, and no longer photo 1"
    );
    assert_eq!(seen["global_sea_verified"], seen["global_sea"]);
    assert_eq!(
        seen["global_sea_streamed"],
        serde_json::json!([[[5, 2]]]),
        "one page per message, and the last says so"
    );
    assert_eq!(seen["global_sea_looked_up"], serde_json::json!(["u/2"]));
    assert_eq!(
        errors["global_local_index"][0], "INVALID_ARGUMENT",
        "{errors}"
    );
    assert!(
        errors["global_local_index"][1]
            .as_str()
            .unwrap()
            .contains("PhotosByTime"),
        "{errors}"
    );
    for case in [
        "typed_missing_required",
        "typed_unknown_table",
        "typed_other_group",
    ] {
        assert_eq!(errors[case][0], "INVALID_ARGUMENT", "{case}: {errors}");
        assert!(
            errors[case][1].as_str().unwrap().starts_with("schema:"),
            "{case}: {errors}"
        );
    }
    // The typed API at the read-only replica's own gateway: a snapshot read of the
    // entity Python wrote, served there.
    let read_only = config.replica("d").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let read = runtime.block_on(async {
        use megastore_rpc::pb::client as pb;
        let mut api = crate::support::api_at(&read_only.address);
        let started = std::time::Instant::now();
        loop {
            let request = pb::ReadEntityRequest {
                table: "User".into(),
                key: vec![pb::Value {
                    kind: Some(pb::value::Kind::Int64(5)),
                }],
                mode: pb::ReadMode::Snapshot.into(),
            };
            if let Ok(read) = api.read_entity(request).await
                && read.get_ref().entity.is_some()
            {
                break read.into_inner();
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "User 5 never read at d"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!(
        (read.replica, read.path.as_str()),
        (u32::from(read_only.id), "snapshot")
    );
    for name in ["replica-a", "replica-b", "replica-c", "replica-d"] {
        let process = cluster.process(name);
        assert!(process.running(), "{name} died:\n{}", process.log());
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
