//! cluster.toml: the example parses into the default topology; every mistake is an
//! error naming its field.

use std::time::Duration;

use megastore_config::{ClusterConfig, ConfigError};
use megastore_types::{ReplicaId, ReplicaKind};

const EXAMPLE: &str = include_str!("../cluster.example.toml");

#[test]
fn the_example_is_the_default_topology() {
    let config = ClusterConfig::parse(EXAMPLE, "example").unwrap();
    let topology = config.topology().unwrap();
    assert_eq!(topology.voters().count(), 3);
    assert_eq!(topology.majority(), 2);
    assert_eq!(topology.kind(ReplicaId(3)), Some(ReplicaKind::Witness));
    assert_eq!(topology.kind(ReplicaId(4)), Some(ReplicaKind::ReadOnly));
    assert_eq!(config.lockd_ids().len(), 3);
    assert_eq!(config.replica("b").unwrap().id, 2);
    assert_eq!(config.site_id("C").unwrap().0, 2);
}

#[test]
fn loading_resolves_data_dirs_against_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, EXAMPLE).unwrap();
    let config = ClusterConfig::load(&path).unwrap();
    assert_eq!(config.replicas[0].data_dir, dir.path().join("data/a"));
    assert_eq!(config.lockd[2].data_dir, dir.path().join("data/lock-c"));
    let missing = ClusterConfig::load(&dir.path().join("nope.toml")).unwrap_err();
    assert!(missing.to_string().contains("nope.toml"), "{missing}");
}

/// The example with `from` replaced by `to` (exactly once).
fn edited(from: &str, to: &str) -> String {
    assert_eq!(EXAMPLE.matches(from).count(), 1, "{from:?} is not unique");
    EXAMPLE.replace(from, to)
}

fn invalid(text: &str) -> (String, String) {
    match ClusterConfig::parse(text, "t.toml") {
        Err(ConfigError::Invalid { field, message, .. }) => (field, message),
        other => panic!("expected an invalid field, got {other:?}"),
    }
}

#[test]
fn mistakes_name_their_field() {
    let cases = [
        (
            edited("site = \"B\"\nkind", "site = \"E\"\nkind"),
            "replicas[1].site",
            "unknown site \"E\"",
        ),
        (
            edited("id = 2\nsite = \"B\"\nkind", "id = 1\nsite = \"B\"\nkind"),
            "replicas[1].id",
            "already used by replicas[0]",
        ),
        (
            edited("name = \"b\"", "name = \"a\""),
            "replicas[1].name",
            "already used",
        ),
        (
            edited("address = \"127.0.0.1:7103\"", "address = \"127.0.0.1\""),
            "replicas[2].address",
            "not an address",
        ),
        (
            edited(
                "address = \"127.0.0.1:7302\"",
                "address = \"127.0.0.1:7101\"",
            ),
            "lockd[1].address",
            "already replicas[0].address",
        ),
        (
            edited("coordinator_address = \"127.0.0.1:7202\"\n", ""),
            "replicas[1].coordinator_address",
            "needs the address",
        ),
        (
            edited(
                "kind = \"witness\"\n",
                "kind = \"witness\"\ncoordinator_address = \"127.0.0.1:7999\"\n",
            ),
            "replicas[2].coordinator_address",
            "only full replicas",
        ),
        (
            edited("lock_lease_ms = 10000", "lock_lease_ms = 2000"),
            "timeouts.lock_lease_ms",
            "twice",
        ),
        (
            edited("heartbeat_ms = 300", "heartbeat_ms = 0"),
            "timeouts.heartbeat_ms",
            "positive",
        ),
        (
            edited(
                "heartbeat_ms = 300",
                "heartbeat_ms = 300\nprepared_ms = 20000\ndecision_retention_ms = 79999",
            ),
            "timeouts.decision_retention_ms",
            "four prepared timeouts and five lock leases (80000 ms)",
        ),
        (
            edited(
                "heartbeat_ms = 300",
                "heartbeat_ms = 300\ndecision_retention_ms = 49999",
            ),
            "timeouts.decision_retention_ms",
            "(50000 ms)",
        ),
        (
            edited(
                "sites = [\"A\", \"B\", \"C\", \"D\"]",
                "sites = [\"A\", \"B\", \"C\", \"D\", \"A\"]",
            ),
            "cluster.sites[4]",
            "already",
        ),
        (
            edited(
                "id = 3\nsite = \"C\"\naddress = \"127.0.0.1:7303\"",
                "id = 0\nsite = \"C\"\naddress = \"127.0.0.1:7303\"",
            ),
            "lockd[2].id",
            "start at 1",
        ),
        (
            edited(
                "metrics_address = \"127.0.0.1:7403\"",
                "metrics_address = \"127.0.0.1:7403\"\ncoordinator_metrics_address = \"127.0.0.1:7999\"",
            ),
            "replicas[2].coordinator_metrics_address",
            "only full replicas",
        ),
        (
            edited(
                "metrics_address = \"127.0.0.1:7602\"",
                "metrics_address = \"127.0.0.1:7401\"",
            ),
            "lockd[1].metrics_address",
            "already replicas[0].metrics_address",
        ),
        (
            format!("{EXAMPLE}\n[gateway]\nidle_txn_ms = 10\n"),
            "gateway.idle_txn_ms",
            "between 1000",
        ),
        (
            edited(
                "metrics_address = \"127.0.0.1:7403\"",
                "metrics_address = \"127.0.0.1:7403\"\nadmin_address = \"127.0.0.1:7101\"",
            ),
            "replicas[2].admin_address",
            "already replicas[0].address",
        ),
        (
            edited(
                "metrics_address = \"127.0.0.1:7404\"",
                "metrics_address = \"localhost\"",
            ),
            "replicas[3].metrics_address",
            "not an address",
        ),
        (
            format!("{EXAMPLE}\n[[wan]]\nbetween = [\"A\", \"E\"]\nrtt_ms = 80\n"),
            "wan[0].between",
            "unknown site \"E\"",
        ),
        (
            format!(
                "{EXAMPLE}\n[[wan]]\nbetween = [\"A\", \"B\"]\nrtt_ms = 80\n\
                 [[wan]]\nbetween = [\"B\", \"A\"]\nrtt_ms = 10\n"
            ),
            "wan[1].between",
            "already linked by wan[0]",
        ),
        (
            format!("{EXAMPLE}\n[history]\nkept_positions = 0\n"),
            "history.kept_positions",
            "at least 1",
        ),
        (
            edited(
                "data_dir = \"data/b\"\n",
                "data_dir = \"data/b\"\ncache_groups = 0\n",
            ),
            "replicas[1].cache_groups",
            "at least 1",
        ),
    ];
    for (text, field, message) in cases {
        let (got_field, got_message) = invalid(&text);
        assert_eq!(got_field, field, "{got_message}");
        assert!(got_message.contains(message), "{field}: {got_message}");
    }
}

#[test]
fn wan_links_are_symmetric_and_default_to_zero() {
    let text = format!("{EXAMPLE}\n[[wan]]\nbetween = [\"A\", \"B\"]\nrtt_ms = 80\n");
    let config = ClusterConfig::parse(&text, "t.toml").unwrap();
    assert_eq!(config.wan_rtt("A", "B"), Duration::from_millis(80));
    assert_eq!(config.wan_rtt("B", "A"), Duration::from_millis(80));
    assert_eq!(config.wan_rtt("A", "C"), Duration::ZERO);
    assert_eq!(config.wan_rtt("A", "A"), Duration::ZERO);
}

#[test]
fn a_replica_caches_100000_groups_unless_told() {
    let config = ClusterConfig::parse(EXAMPLE, "t.toml").unwrap();
    assert_eq!(config.replica("b").unwrap().cache_groups(), 100_000);
    let text = edited(
        "data_dir = \"data/b\"\n",
        "data_dir = \"data/b\"\ncache_groups = 64\n",
    );
    let config = ClusterConfig::parse(&text, "t.toml").unwrap();
    assert_eq!(config.replica("b").unwrap().cache_groups(), 64);
}

#[test]
fn history_kept_defaults_to_256_positions() {
    let config = ClusterConfig::parse(EXAMPLE, "t.toml").unwrap();
    assert_eq!(config.history.kept_positions, 256);
    let text = format!("{EXAMPLE}\n[history]\nkept_positions = 4\n");
    let config = ClusterConfig::parse(&text, "t.toml").unwrap();
    assert_eq!(config.history.kept_positions, 4);
}

#[test]
fn log_positions_default_to_64_and_are_bounded() {
    let config = ClusterConfig::parse(EXAMPLE, "t.toml").unwrap();
    assert_eq!(config.history.log_positions, 64);
    let text = format!("{EXAMPLE}\n[history]\nlog_positions = 0\n");
    assert_eq!(
        ClusterConfig::parse(&text, "t.toml")
            .unwrap()
            .history
            .log_positions,
        0
    );
    let text = format!("{EXAMPLE}\n[history]\nlog_positions = 100001\n");
    let e = ClusterConfig::parse(&text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("history.log_positions") && e.contains("100000"),
        "{e}"
    );
}

#[test]
fn the_outage_bound_defaults_to_1024_follows_the_kept_log_and_must_leave_room_for_it() {
    let config = ClusterConfig::parse(EXAMPLE, "t.toml").unwrap();
    assert_eq!(config.history.outage_log_bound(), 1024);
    // Unset, it follows a large log_positions rather than refusing it.
    let text = format!("{EXAMPLE}\n[history]\nlog_positions = 100000\n");
    let parsed = ClusterConfig::parse(&text, "t.toml").unwrap();
    assert_eq!(parsed.history.outage_log_bound(), 200_128);
    let text = format!("{EXAMPLE}\n[history]\nlog_positions = 100\noutage_log_positions = 328\n");
    let parsed = ClusterConfig::parse(&text, "t.toml").unwrap();
    assert_eq!(parsed.history.outage_log_bound(), 328);
    let text = text.replace("outage_log_positions = 328", "outage_log_positions = 327");
    let e = ClusterConfig::parse(&text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("history.outage_log_positions") && e.contains("328"),
        "{e}"
    );
}

#[test]
fn syntax_and_shape_errors_say_where() {
    let unknown = edited("rpc_ms = 2000", "rpc_ms = 2000\nrcp_ms = 1");
    let e = ClusterConfig::parse(&unknown, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.toml") && e.contains("rcp_ms"), "{e}");
    let wrong_kind = edited("kind = \"witness\"", "kind = \"observer\"");
    let e = ClusterConfig::parse(&wrong_kind, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("observer") && e.contains("line"), "{e}");
    let e = ClusterConfig::parse("[cluster\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:"), "{e}");
}

#[test]
fn the_operator_token_is_read_from_its_file_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.toml");
    let text = format!(
        "{}\n[auth]\noperator_token_file = \"operator.token\"\n",
        include_str!("../cluster.example.toml")
    );
    std::fs::write(&path, text).unwrap();
    let config = ClusterConfig::load(&path).unwrap();
    let missing = config.operator_token().unwrap_err();
    assert!(missing.to_string().contains("operator.token"), "{missing}");
    std::fs::write(dir.path().join("operator.token"), "short\n").unwrap();
    let short = config.operator_token().unwrap_err().to_string();
    assert!(
        short.contains("auth.operator_token_file") && short.contains("at least 16 bytes"),
        "{short}"
    );
    std::fs::write(
        dir.path().join("operator.token"),
        "0123456789abcdef-xyz\nignored\n",
    )
    .unwrap();
    assert_eq!(
        config.operator_token().unwrap().as_deref(),
        Some("0123456789abcdef-xyz")
    );
    let open = ClusterConfig::parse(include_str!("../cluster.example.toml"), "example").unwrap();
    assert_eq!(open.operator_token().unwrap(), None);
}

#[test]
fn users_and_operator_certificates_are_checked() {
    let with = |auth: &str| format!("{EXAMPLE}\n[auth]\noperator_token_file = \"t\"\n{auth}\n");
    let config = ClusterConfig::parse(&with("require_users = true"), "t.toml").unwrap();
    assert!(config.auth.as_ref().unwrap().require_users);
    assert_eq!(config.gateway.open_txns_per_user, 1_000);
    let (field, message) = invalid(&with("operator_certificates = [\"ops\"]"));
    assert_eq!(field, "auth.operator_certificates");
    assert!(message.contains("[tls]"), "{message}");
    let (field, _) = invalid(&with("operator_certificates = [\"\"]"));
    assert_eq!(field, "auth.operator_certificates");
    let (field, message) = invalid(&format!("{EXAMPLE}\n[gateway]\nopen_txns_per_user = 0\n"));
    assert_eq!(field, "gateway.open_txns_per_user");
    assert!(message.contains("at least 1"), "{message}");
    let e = ClusterConfig::parse(&with("require_user = true"), "t.toml").unwrap_err();
    assert!(e.to_string().contains("require_user"), "{e}");
}

/// The example with one more server for replica `replica` (the extra TOML lines given).
fn with_server(replica: &str, extra: &str) -> String {
    format!(
        "{EXAMPLE}\n[[servers]]\nname = \"a2\"\nid = 11\nreplica = \"{replica}\"\naddress = \"127.0.0.1:7111\"\ndata_dir = \"data/a2\"\n{extra}"
    )
}

#[test]
fn a_server_runs_as_its_replica_with_its_own_addresses_and_directory() {
    let text = with_server("a", "coordinator_address = \"127.0.0.1:7211\"\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    let config = ClusterConfig::load(&path).unwrap();
    let server = config.server_process("a2").expect("the server");
    assert_eq!((server.server, server.first), (11, false));
    assert_eq!(server.process.id, 1, "it holds replica a's slot");
    assert_eq!(server.process.site, "A");
    assert_eq!(server.process.address, "127.0.0.1:7111");
    assert_eq!(
        server.process.coordinator_address.as_deref(),
        Some("127.0.0.1:7211")
    );
    assert_eq!(server.process.data_dir, dir.path().join("data/a2"));
    let first = config
        .server_process("a")
        .expect("replica a's first server");
    assert_eq!((first.server, first.first), (1, true));
    let names: Vec<_> = config
        .server_processes()
        .into_iter()
        .map(|p| p.process.name)
        .collect();
    assert_eq!(names, ["a", "b", "c", "d", "a2"]);
    assert!(config.server_process("nobody").is_none());
}

#[test]
fn server_mistakes_name_their_field() {
    let coordinator = "coordinator_address = \"127.0.0.1:7211\"\n";
    let cases = [
        (
            with_server("e", coordinator),
            "servers[0].replica",
            "unknown replica \"e\"",
        ),
        (
            with_server("a", "").replace("id = 11", "id = 2"),
            "servers[0].id",
            "replicas[1]'s id",
        ),
        (
            with_server("a", coordinator).replace("name = \"a2\"", "name = \"b\""),
            "servers[0].name",
            "already used by replicas[1]",
        ),
        (
            with_server("a", ""),
            "servers[0].coordinator_address",
            "needs the address of its coordinator",
        ),
        (
            with_server("c", coordinator),
            "servers[0].coordinator_address",
            "only full replicas have a coordinator",
        ),
        (
            with_server("a", coordinator).replace("127.0.0.1:7111", "127.0.0.1:7101"),
            "servers[0].address",
            "is already replicas[0].address",
        ),
        (
            with_server("a", coordinator).replace("data/a2", "data/b"),
            "servers[0].data_dir",
            "is already replicas[1].data_dir",
        ),
        (
            format!(
                "{}\n[[servers]]\nname = \"a3\"\nid = 11\nreplica = \"a\"\naddress = \"127.0.0.1:7112\"\ncoordinator_address = \"127.0.0.1:7212\"\ndata_dir = \"data/a3\"\n",
                with_server("a", coordinator)
            ),
            "servers[1].id",
            "already used by servers[0]",
        ),
    ];
    for (text, field, message) in cases {
        let (got_field, got_message) = invalid(&text);
        assert_eq!(got_field, field, "{got_message}");
        assert!(
            got_message.contains(message),
            "{field}: {got_message:?} lacks {message:?}"
        );
    }
}
