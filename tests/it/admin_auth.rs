//! The operator token (`[auth]`): with it configured, the replicas' administration
//! service and lockd's administrative commands answer only calls that carry it. A
//! backup streamed from a running replica, `schema apply` and `coordinator disable`
//! work with the cluster's config and are refused, naming what was missing, with a
//! config that has no token or another one; `megastore status` says which it is. The
//! backup goes to replica a's admin address, the only one that serves administration.

use std::time::Duration;

use megastore_e2e::run_megastore;

const TOKEN: &str = "s3cret-operator-token-0123456789";

#[test]
fn administration_needs_the_operator_token_when_auth_is_configured() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = megastore_e2e::LocalCluster::start_configured(dir.path(), |path| {
        let folder = path.parent().unwrap();
        std::fs::write(folder.join("operator.token"), format!("{TOKEN}\n")).unwrap();
        let mut text = std::fs::read_to_string(path).unwrap();
        text.push_str(
            "\n[auth]\noperator_token_file = \"operator.token\"\naudit_file = \"audit.jsonl\"\n",
        );
        // Replica a serves administration on an address of its own.
        let admin_port = megastore_e2e::free_ports(1)[0];
        let text = text.replacen(
            "name = \"a\"\n",
            &format!("name = \"a\"\nadmin_address = \"127.0.0.1:{admin_port}\"\n"),
            1,
        );
        std::fs::write(path, text).unwrap();
    });
    cluster.wait_for_log("replica-a", "replica serving", Duration::from_secs(30));
    let with_token = cluster.config_path.to_str().unwrap().to_string();
    let text = std::fs::read_to_string(&cluster.config_path).unwrap();
    let without = dir.path().join("no-auth.toml");
    std::fs::write(
        &without,
        text.replace(
            "\n[auth]\noperator_token_file = \"operator.token\"\naudit_file = \"audit.jsonl\"\n",
            "\n",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("other.token"),
        "not-the-operator-token-at-all\n",
    )
    .unwrap();
    let wrong = dir.path().join("wrong-token.toml");
    std::fs::write(&wrong, text.replace("operator.token", "other.token")).unwrap();

    let backup = |config: &str, out: &str| {
        run_megastore(
            &[
                "backup",
                "--config",
                config,
                "--id",
                "a",
                "--out",
                dir.path().join(out).to_str().unwrap(),
            ],
            dir.path(),
            Duration::from_secs(60),
        )
    };
    let made = backup(&with_token, "with-token");
    assert!(made.status.success(), "{made:?}");
    assert!(dir.path().join("with-token/CURRENT").exists());
    for (config, missing) in [
        (without.to_str().unwrap(), "carried no"),
        (wrong.to_str().unwrap(), "is not it"),
    ] {
        let refused = backup(config, "refused");
        assert!(!refused.status.success(), "{refused:?}");
        assert!(
            refused.stderr.contains("operator token") && refused.stderr.contains(missing),
            "{refused:?}"
        );
        assert!(
            !dir.path().join("refused/CURRENT").exists(),
            "nothing was streamed"
        );
    }
    let status = run_megastore(
        &["status", "--config", &with_token],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(
        status
            .stdout
            .contains("administration: operator token required"),
        "{status:?}"
    );
    let json = run_megastore(
        &["status", "--config", &with_token, "-o", "json"],
        dir.path(),
        Duration::from_secs(60),
    );
    let report: serde_json::Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(report["admin_auth"], true, "{report}");
    // The lag the status shows comes from the admin service: it was answered.
    assert!(!status.stdout.contains("PERMISSION"), "{status:?}");

    // Replica a's administration is on its admin address only: its main address
    // does not serve it, whatever the token.
    let config = megastore_config::ClusterConfig::load(&cluster.config_path).unwrap();
    let a = config.replica("a").unwrap();
    assert_ne!(a.admin_endpoint(), a.address);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let on_main = runtime.block_on(async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", a.address))
            .unwrap()
            .connect_lazy();
        let mut admin = megastore_rpc::pb::admin::admin_client::AdminClient::new(channel);
        admin
            .lag(megastore_rpc::with_operator_token(
                megastore_rpc::pb::admin::LagRequest {},
                Some(TOKEN),
            ))
            .await
    });
    assert_eq!(on_main.unwrap_err().code(), tonic::Code::Unimplemented);

    // lockd's administrative commands: the schema and disabling a coordinator.
    let schema = megastore_e2e::repo_root().join("schema/photos.msdl");
    let apply = |config: &str| {
        run_megastore(
            &[
                "schema",
                "apply",
                schema.to_str().unwrap(),
                "--config",
                config,
            ],
            dir.path(),
            Duration::from_secs(60),
        )
    };
    let refused = apply(without.to_str().unwrap());
    assert!(
        !refused.status.success() && refused.stderr.contains("operator token"),
        "{refused:?}"
    );
    let applied = apply(&with_token);
    assert!(
        applied.status.success() && applied.stdout.contains("catalog version 1"),
        "{applied:?}"
    );
    let disable = |config: &str| {
        run_megastore(
            &["coordinator", "disable", "a", "--config", config],
            dir.path(),
            Duration::from_secs(60),
        )
    };
    let refused = disable(wrong.to_str().unwrap());
    assert!(
        !refused.status.success() && refused.stderr.contains("operator token"),
        "{refused:?}"
    );
    let disabled = disable(&with_token);
    assert!(disabled.status.success(), "{disabled:?}");

    // The audit log: every backup and refusal at the replica, every administrative
    // command and refusal at lockd's leader.
    let replica = cluster.process("replica-a").log();
    let audit: Vec<&str> = replica
        .lines()
        .filter(|l| l.contains("megastore::audit"))
        .collect();
    for (what, outcome) in [("Admin.Backup", "allowed"), ("Admin.Backup", "denied")] {
        assert!(
            audit
                .iter()
                .any(|l| l.contains(&format!("what=\"{what}\"")) && l.contains(outcome)),
            "no {what} {outcome} in the audit log: {audit:#?}"
        );
    }
    // The same records in the audit file, one JSON object per line from every server.
    let records: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let recorded = |process: &str, what: &str, outcome: &str| {
        records.iter().any(|r| {
            r["process"] == process
                && r["what"] == what
                && r["outcome"] == outcome
                && r["at_ms"].as_u64().is_some()
                && r["who"].as_str().is_some_and(|w| w.contains("127.0.0.1"))
        })
    };
    assert!(
        recorded("replica a", "Admin.Backup", "allowed"),
        "{records:#?}"
    );
    assert!(
        recorded("replica a", "Admin.Backup", "denied"),
        "{records:#?}"
    );
    assert!(
        (0..3).any(|i| recorded(
            &format!("lockd lock-{i}"),
            "lockd WriteFile schema/catalog",
            "denied"
        )),
        "{records:#?}"
    );
    let lockd: String = (0..3)
        .map(|i| cluster.process(&format!("lock-{i}")).log())
        .collect();
    for (what, outcome) in [
        ("lockd WriteFile schema/catalog", "allowed"),
        ("lockd WriteFile schema/catalog", "denied"),
        ("lockd RevokeHolder coordinator/1", "allowed"),
        ("lockd RevokeHolder coordinator/1", "denied"),
    ] {
        assert!(
            lockd
                .lines()
                .any(|l| l.contains("megastore::audit") && l.contains(what) && l.contains(outcome)),
            "no {what} {outcome} in lockd's audit log"
        );
    }
}
