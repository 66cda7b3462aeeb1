//! The user's tools against a real cluster: `megastore shell` driven through a pipe,
//! `megastore status` before and after a replica dies.

use std::time::{Duration, Instant};

use megastore_e2e::{metric_value, run_megastore, run_megastore_with_input, scrape_metrics};

use crate::support::{connect, eg, first_commit, increment, start_cluster};

const LIMIT: Duration = Duration::from_secs(60);

/// Queues from the shell: messages sent from one group, delivered, received and
/// consumed in another — in a transaction that aborts (they stay) and outside one.
#[test]
fn the_shell_sends_and_receives_queue_messages() {
    let (_alone, dir, cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().expect("UTF-8 path");
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        first_commit(&client, &eg(1)).await;
    });
    let shell = |script: &str| {
        let out = run_megastore(
            &["shell", "--config", config_arg, "-e", script],
            dir.path(),
            LIMIT,
        );
        assert!(out.status.success(), "{script}: {out:?}");
        out.stdout
    };
    let sent = shell("use alice; send bob mail hello; begin; send bob mail world; commit; deliver");
    assert_eq!(
        sent.matches("committed at log position").count(),
        2,
        "{sent}"
    );
    assert!(sent.contains("delivered"), "{sent}");
    // Received in a transaction that is dropped: still there.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let peeked = shell("use bob; begin; receive mail; abort");
        if peeked.contains("hello") && peeked.contains("world") {
            assert!(peeked.contains("from alice"), "{peeked}");
            assert!(
                peeked.find("hello") < peeked.find("world"),
                "in send order: {peeked}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never delivered: {peeked}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let consumed = shell("use bob; receive mail");
    assert!(
        consumed.contains("hello") && consumed.contains("world"),
        "{consumed}"
    );
    assert!(consumed.contains("committed at log position"), "{consumed}");
    let again = shell("use bob; receive mail");
    assert!(again.contains("no messages"), "consumed for good: {again}");
}

#[test]
fn the_shell_reads_writes_and_runs_transactions() {
    let (_alone, dir, cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().expect("UTF-8 path");
    // Wait until the cluster takes writes, so the script's first write is not the one
    // that waits for coordinators to take their locks.
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        first_commit(&client, &eg(1)).await;
    });
    let script = "\
use shell-group
put alice name \"Alice Liddell\"
get alice
begin
get alice
put alice name Alice2
put bob name Bob
scan
commit
mode inconsistent
site B
scan '' 1
frobnicate
put onlytwo words
";
    let out = run_megastore_with_input(
        &["shell", "--config", config_arg],
        script,
        dir.path(),
        LIMIT,
    );
    let text = &out.stdout;
    assert_eq!(
        out.status.code(),
        Some(1),
        "two bad commands: exit 1\n{text}\n{}",
        out.stderr
    );
    assert!(text.contains("using entity group shell-group"), "{text}");
    assert!(
        text.contains("| alice | name   | Alice Liddell |"),
        "{text}"
    );
    assert!(text.contains("current read at position"), "{text}");
    assert!(text.contains("(in the transaction)"), "{text}");
    // Inside the transaction the scan sees its own staged writes.
    let in_txn = text.split("> scan\n").nth(1).expect("the scan ran");
    assert!(in_txn.contains("| bob   | name   | Bob"), "{text}");
    assert!(text.contains("committed at log position"), "{text}");
    assert!(text.contains("acting from site B"), "{text}");
    assert!(text.contains("from replica b (inconsistent"), "{text}");
    assert!(
        text.contains("error: unknown command \"frobnicate\""),
        "{text}"
    );
    assert!(text.contains("error: put takes ROW COLUMN VALUE"), "{text}");

    // What the shell committed is there for everyone.
    let again = run_megastore_with_input(
        &[
            "shell",
            "--config",
            config_arg,
            "--group",
            "shell-group",
            "--site",
            "B",
        ],
        "get alice\nget bob\n",
        dir.path(),
        LIMIT,
    );
    assert!(again.status.success(), "{again:?}");
    assert!(
        again.stdout.contains("| alice | name   | Alice2 |"),
        "{}",
        again.stdout
    );
    assert!(
        again.stdout.contains("| bob | name   | Bob   |"),
        "{}",
        again.stdout
    );

    // One-shot, for scripts: `-e` runs its commands without banner or prompts, and
    // exits 1 when one of them fails.
    let one_shot = run_megastore(
        &[
            "shell",
            "--config",
            config_arg,
            "-e",
            "use shell-group; get alice\nput carol name 'C; D'",
        ],
        dir.path(),
        LIMIT,
    );
    assert!(one_shot.status.success(), "{one_shot:?}");
    assert!(
        one_shot.stdout.contains("| alice | name   | Alice2 |")
            && one_shot.stdout.contains("committed at log position")
            && !one_shot.stdout.contains("> "),
        "{}",
        one_shot.stdout
    );
    let failing = run_megastore(
        &[
            "shell",
            "--config",
            config_arg,
            "-e",
            "use shell-group; frobnicate",
        ],
        dir.path(),
        LIMIT,
    );
    assert_eq!(failing.status.code(), Some(1), "{failing:?}");
}

#[test]
fn status_shows_every_process_and_a_groups_log() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let config_arg = cluster
        .config_path
        .to_str()
        .expect("UTF-8 path")
        .to_string();
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        first_commit(&client, &eg(7)).await;
    });
    // Coordinators take their locks a lease after they start; status shows them then.
    let started = Instant::now();
    let out = loop {
        let out = run_megastore(
            &["status", "--config", &config_arg, "--group", "eg-0007"],
            dir.path(),
            LIMIT,
        );
        assert!(out.status.success(), "{out:?}");
        // Followers learn the membership, and replicas apply, a moment after the fact.
        let settled = ["(coordinator/1) sequencer", "(coordinator/2) sequencer"]
            .iter()
            .all(|holder| out.stdout.contains(holder))
            && out.stdout.matches("lock-0,lock-1,lock-2").count() == 3
            && log_of(&out.stdout, "a").is_some_and(|l| l[1..4] == ["1", "1", "1"]);
        if settled || started.elapsed() > Duration::from_secs(20) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let text = &out.stdout;
    assert!(text.contains("lock service: leader lock-"), "{text}");
    for lock in ["lock-0", "lock-1", "lock-2"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(lock))
            .expect(lock);
        assert!(line.contains("lock-0,lock-1,lock-2"), "{line}");
    }
    for (replica, kind) in [
        ("a", "full"),
        ("b", "full"),
        ("c", "witness"),
        ("d", "read-only"),
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{replica} ")) && l.contains(kind))
            .unwrap_or_else(|| panic!("no line for replica {replica}:\n{text}"));
        assert!(line.contains("serving"), "{line}");
        // How far behind it is: a number for replicas with data, none for a witness.
        let behind = line.split_whitespace().nth(5).unwrap_or_default();
        match kind {
            "witness" => assert_eq!(behind, "-", "{line}"),
            _ => assert!(behind.parse::<u64>().is_ok(), "{line}"),
        }
    }
    assert!(text.contains(" BEHIND "), "{text}");
    assert!(text.contains("(coordinator/1) sequencer"), "{text}");
    assert!(text.contains("(coordinator/2) sequencer"), "{text}");
    // The group's log: the first commit is at position 1 on both full replicas.
    for replica in ["a", "b"] {
        let numbers =
            log_of(text, replica).unwrap_or_else(|| panic!("no log of {replica}:\n{text}"));
        assert_eq!(
            numbers[1..3],
            ["1", "1"],
            "highest, visible of {replica}: {numbers:?}"
        );
    }
    let a = log_of(text, "a").expect("a's log");
    assert_eq!(a[3], "1", "a applied what it wrote: {a:?}");

    // The same facts for scripts: `-o json`.
    let out = run_megastore(
        &[
            "status",
            "--config",
            &config_arg,
            "--group",
            "eg-0007",
            "-o",
            "json",
        ],
        dir.path(),
        LIMIT,
    );
    let json: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert!(json["lockd_leader"].is_u64(), "{json}");
    assert_eq!(json["group"], "eg-0007");
    let replicas = json["replicas"].as_array().unwrap();
    let names: Vec<&str> = replicas
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    for r in replicas {
        assert_eq!(r["health"]["state"], "serving", "{r}");
    }
    assert_eq!(replicas[0]["log"]["applied"], 1, "{json}");
    assert!(replicas[0]["coordinator"]["epoch"].is_u64(), "{json}");
    assert!(
        replicas[2]["behind"].is_null(),
        "a witness holds no data: {json}"
    );

    cluster.process("replica-c").kill();
    let out = run_megastore(&["status", "--config", &config_arg], dir.path(), LIMIT);
    let c = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("c ") && l.contains("witness"))
        .unwrap_or_else(|| panic!("no line for c:\n{}", out.stdout));
    assert!(c.contains("UNREACHABLE"), "{c}");
}

/// The words of `replica`'s line in the group table of a status output.
fn log_of(text: &str, replica: &str) -> Option<Vec<String>> {
    let table = text.split("\nentity group ").nth(1)?;
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{replica} ")))?;
    Some(line.split_whitespace().map(str::to_string).collect())
}

#[test]
fn bench_runs_a_bounded_workload_and_reports_percentiles() {
    let (_alone, dir, cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().expect("UTF-8 path");
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        first_commit(&client, &eg(3)).await;
    });
    let out = run_megastore(
        &[
            "bench",
            "--config",
            config_arg,
            "--operations",
            "200",
            "--duration",
            "60",
            "--warmup",
            "1",
            "--clients",
            "4",
            "--groups",
            "10",
            "--reads",
            "0.5",
            "--plot",
            "latency.svg",
            "--timeline",
            "50",
        ],
        dir.path(),
        LIMIT,
    );
    assert!(out.status.success(), "{out:?}");
    // The plot: an SVG document with one line per operation kind, each in the legend.
    let svg = std::fs::read_to_string(dir.path().join("latency.svg")).expect("the plot");
    assert!(
        svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    // Each series is a 2-px line of its own colour (drawn again, short, in the legend).
    let series: std::collections::BTreeSet<&str> = svg
        .lines()
        .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
        .filter_map(|l| l.split("stroke=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(series.len(), 2, "one series per kind: {svg}");
    for kind in ["read (p50", "write (p50"] {
        assert!(svg.contains(kind), "no {kind} in the legend: {svg}");
    }
    let json_line = out.stdout.lines().last().expect("a JSON line");
    let report: serde_json::Value = serde_json::from_str(json_line).expect("the last line is JSON");
    let kinds = report["kinds"].as_array().expect("kinds");
    let count = |k: &serde_json::Value| k["count"].as_u64().expect("count");
    let errors: u64 = kinds
        .iter()
        .map(|k| k["errors"].as_u64().expect("errors"))
        .sum();
    let conflicts = report["conflicts"].as_u64().expect("conflicts");
    assert_eq!(
        kinds.iter().map(count).sum::<u64>() + errors + conflicts,
        200,
        "every operation after the warm-up is accounted for, and none before: {json_line}"
    );
    assert_eq!(errors, 0, "{json_line}");
    for k in kinds {
        assert!(count(k) > 0, "both kinds ran: {json_line}");
        let (p50, p99, max) = (
            k["p50_us"].as_u64(),
            k["p99_us"].as_u64(),
            k["max_us"].as_u64(),
        );
        assert!(p50 > Some(0) && p50 <= p99 && p99 <= max, "{json_line}");
    }
    assert!(out.stdout.contains("P99.9 ms"), "{}", out.stdout);
    // The timeline: back-to-back 50 ms intervals that hold every operation once, and
    // the emptiest interval and slowest write in the table.
    let timeline = &report["timeline"];
    assert_eq!(timeline["width_ms"], 50, "{json_line}");
    assert!(
        timeline["from_unix_ms"].as_u64() > Some(1_700_000_000_000),
        "{json_line}"
    );
    let intervals = timeline["intervals"].as_array().expect("intervals");
    let field = |i: &serde_json::Value, name: &str| i[name].as_u64().expect("a count");
    for (n, interval) in intervals.iter().enumerate() {
        assert_eq!(field(interval, "at_ms"), 50 * n as u64, "{json_line}");
    }
    let in_intervals = |name: &str| intervals.iter().map(|i| field(i, name)).sum::<u64>();
    assert_eq!(
        (
            in_intervals("reads"),
            in_intervals("writes"),
            in_intervals("failed")
        ),
        (count(&kinds[0]), count(&kinds[1]), errors + conflicts),
        "{json_line}"
    );
    // The histogram's slowest is the timeline's, to its three significant digits.
    let slowest = intervals
        .iter()
        .map(|i| field(i, "write_max_us"))
        .max()
        .expect("some");
    let histogram_max = kinds[1]["max_us"].as_u64().expect("max_us");
    assert!(
        (slowest..=slowest + slowest / 1000 + 1).contains(&histogram_max),
        "{json_line}"
    );
    assert!(
        out.stdout.contains("operations per 50 ms interval")
            && out.stdout.contains("slowest write"),
        "{}",
        out.stdout
    );
    // The tests run a debug build: it says so, and that its numbers mean little.
    assert!(
        out.stderr
            .contains("warning: this megastore is a debug build"),
        "{}",
        out.stderr
    );

    // The same loop through the public gRPC API, writes begun blind.
    let out = run_megastore(
        &[
            "bench",
            "--config",
            config_arg,
            "--grpc",
            "--blind",
            "--operations",
            "100",
            "--duration",
            "60",
            "--clients",
            "4",
            "--groups",
            "2",
            "--reads",
            "0.3",
        ],
        dir.path(),
        LIMIT,
    );
    assert!(out.status.success(), "{out:?}");
    let json_line = out.stdout.lines().last().expect("a JSON line");
    let report: serde_json::Value = serde_json::from_str(json_line).expect("the last line is JSON");
    assert_eq!(report["system"], "megastore-grpc-blind", "{json_line}");
    let kinds = report["kinds"].as_array().expect("kinds");
    let timed: u64 = kinds.iter().map(count).sum();
    assert_eq!(
        timed + report["conflicts"].as_u64().expect("conflicts"),
        100,
        "every operation timed, none failed: {json_line}"
    );
    assert!(
        kinds.iter().any(|k| k["kind"] == "write" && count(k) > 0),
        "{json_line}"
    );
    let bad = run_megastore(
        &["bench", "--config", config_arg, "--blind"],
        dir.path(),
        LIMIT,
    );
    assert!(!bad.status.success());
    assert!(bad.stderr.contains("--grpc"), "{bad:?}");

    let bad = run_megastore(
        &["bench", "--config", config_arg, "--reads", "2"],
        dir.path(),
        LIMIT,
    );
    assert!(!bad.status.success());
    assert!(
        bad.stderr.contains("--reads must be between 0 and 1"),
        "{bad:?}"
    );
    let bad = run_megastore(
        &["bench", "--config", config_arg, "--warmup", "7200"],
        dir.path(),
        LIMIT,
    );
    assert!(
        bad.stderr
            .contains("--warmup must be between 0 and 3600 seconds"),
        "{bad:?}"
    );
    let bad = run_megastore(
        &[
            "bench",
            "--config",
            config_arg,
            "--site",
            "Z",
            "--operations",
            "1",
        ],
        dir.path(),
        LIMIT,
    );
    assert!(bad.stderr.contains("\"Z\" is not a site"), "{bad:?}");
    let bad = run_megastore(
        &[
            "bench",
            "--config",
            config_arg,
            "--value-size",
            "100000000000",
        ],
        dir.path(),
        LIMIT,
    );
    assert!(
        bad.stderr.contains("--value-size must be at most"),
        "{bad:?}"
    );

    // `--fill N` writes each of N groups once (no reads), then every group holds its row.
    let out = run_megastore(
        &[
            "bench",
            "--config",
            config_arg,
            "--fill",
            "60",
            "--clients",
            "6",
            "--group-prefix",
            "filled",
        ],
        dir.path(),
        LIMIT,
    );
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap_or_default()).expect("JSON");
    let count = |kind: &str| {
        report["kinds"]
            .as_array()
            .expect("kinds")
            .iter()
            .find(|k| k["kind"] == kind)
            .map_or(0, |k| k["count"].as_u64().expect("count"))
    };
    assert_eq!(count("read"), 0, "writes only: {report}");
    assert_eq!(
        count("write") + report["conflicts"].as_u64().unwrap(),
        60,
        "{report}"
    );
    runtime.block_on(async {
        let client = connect(&config, "B").await;
        for n in 0..60 {
            let group = megastore_client::group(format!("filled-{n:06}").as_bytes()).unwrap();
            let read = client
                .read(
                    &group,
                    megastore_paxos::ReadMode::Current,
                    megastore_paxos::DataQuery::Rows(vec![b"bench".to_vec()]),
                )
                .await
                .unwrap();
            assert_eq!(read.rows.len(), 1, "group {n} was not filled");
        }
    });
    let bad = run_megastore(
        &[
            "bench", "--config", config_arg, "--fill", "5", "--groups", "9",
        ],
        dir.path(),
        LIMIT,
    );
    assert!(
        !bad.status.success() && bad.stderr.contains("--groups"),
        "{bad:?}"
    );

    // `--board`: workers claim and complete every task once; `--leases`: each lease is
    // granted, kept alive and revoked once.
    for (flag, steps) in [
        ("--board", ["claim", "complete"].as_slice()),
        ("--leases", &["grant", "keep_alive", "revoke"]),
    ] {
        let out = run_megastore(
            &[
                "bench",
                "--config",
                config_arg,
                flag,
                "--runs",
                "40",
                "--clients",
                "4",
            ],
            dir.path(),
            LIMIT,
        );
        assert!(out.status.success(), "{out:?}");
        let report: serde_json::Value =
            serde_json::from_str(out.stdout.lines().last().unwrap_or_default()).expect("JSON");
        assert_eq!(report["system"], "megastore", "{report}");
        for (i, step) in steps.iter().enumerate() {
            assert_eq!(report["kinds"][i]["kind"], *step, "{report}");
            assert_eq!(
                report["kinds"][i]["count"], 40,
                "{flag}: every {step} timed once: {report}"
            );
        }
    }
}

#[test]
fn every_process_serves_prometheus_metrics() {
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    let client = runtime.block_on(async {
        let client = connect(&config, "A").await;
        first_commit(&client, &eg(5)).await;
        for _ in 0..5 {
            increment(&client, &eg(5), "counter")
                .await
                .expect("a commit");
        }
        client
    });
    // The client library's own counters: every commit, by path.
    let mut registry = megastore_metrics::Registry::default();
    client.metrics().register(&mut registry);
    let text = megastore_metrics::encode(&registry);
    let fast = metric_value(&text, "megastore_client_commits_total{path=\"fast\"}").unwrap_or(0.0);
    let slow = metric_value(&text, "megastore_client_commits_total{path=\"slow\"}").unwrap_or(0.0);
    assert!(fast + slow >= 6.0, "{text}");
    assert!(
        fast >= 1.0,
        "later commits from the leader's site take the fast path:\n{text}"
    );
    assert!(
        metric_value(&text, "megastore_client_reads_total{path=\"local\"}").is_some()
            || metric_value(&text, "megastore_client_reads_total{path=\"majority\"}").is_some(),
        "{text}"
    );

    let replica = |name: &str| config.replica(name).expect("replica");
    let a = scrape_metrics(
        replica("a")
            .metrics_address
            .as_deref()
            .expect("metrics address"),
    );
    for sample in [
        "megastore_replica_requests_total{kind=\"accept\"}",
        "megastore_replica_wal_sync_seconds_count",
        "megastore_replica_applied_total",
    ] {
        assert!(
            metric_value(&a, sample).unwrap_or(0.0) >= 1.0,
            "{sample}:\n{a}"
        );
    }
    assert!(
        a.contains("# HELP megastore_client_conflicts_total"),
        "the gateway's client metrics:\n{a}"
    );
    let witness = scrape_metrics(
        replica("c")
            .metrics_address
            .as_deref()
            .expect("metrics address"),
    );
    assert!(
        metric_value(
            &witness,
            "megastore_replica_requests_total{kind=\"accept\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "the witness votes:\n{witness}"
    );
    assert_eq!(
        metric_value(&witness, "megastore_replica_applied_total"),
        Some(0.0),
        "{witness}"
    );

    let coordinator = replica("a")
        .coordinator_metrics_address
        .clone()
        .expect("metrics address");
    let started = Instant::now();
    let text = loop {
        let text = scrape_metrics(&coordinator);
        if metric_value(&text, "megastore_coordinator_lock_held") == Some(1.0)
            || started.elapsed() > Duration::from_secs(20)
        {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        metric_value(&text, "megastore_coordinator_lock_held"),
        Some(1.0),
        "{text}"
    );
    assert!(
        metric_value(&text, "megastore_coordinator_epoch").unwrap_or(0.0) >= 1.0,
        "{text}"
    );

    // Every lockd node has joined a term (a follower hears of it at the leader's next
    // heartbeat, so scrape until then), and exactly one leads.
    let started = Instant::now();
    loop {
        let texts: Vec<String> = config
            .lockd
            .iter()
            .map(|l| scrape_metrics(l.metrics_address.as_deref().expect("metrics address")))
            .collect();
        let joined = texts
            .iter()
            .all(|t| metric_value(t, "megastore_lockd_term").unwrap_or(0.0) >= 1.0);
        let leaders: f64 = texts
            .iter()
            .map(|t| metric_value(t, "megastore_lockd_is_leader").expect("is_leader"))
            .sum();
        if joined && leaders == 1.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "lockd nodes without a term, or not exactly one leader:\n{}",
            texts.join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_emulated_wan_puts_a_round_trip_under_commits_but_not_under_local_reads() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cluster = megastore_e2e::LocalCluster::start_configured(dir.path(), |config| {
        let mut text = std::fs::read_to_string(config).expect("the config");
        for (a, b) in [
            ("A", "B"),
            ("A", "C"),
            ("B", "C"),
            ("A", "D"),
            ("B", "D"),
            ("C", "D"),
        ] {
            text += &format!("\n[[wan]]\nbetween = [\"{a}\", \"{b}\"]\nrtt_ms = 300\n");
        }
        std::fs::write(config, text).expect("write the config");
    });
    let config_arg = cluster.config_path.to_str().expect("UTF-8 path");
    let config = megastore_config::ClusterConfig::load(&cluster.config_path).expect("config");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        first_commit(&client, &eg(1)).await;
    });
    let out = run_megastore(
        &[
            "bench",
            "--config",
            config_arg,
            "--site",
            "A",
            "--groups",
            "2",
            // One client: a read while another client's write to the group is in
            // flight finds a position accepted but not yet known chosen at the local
            // replica, and must learn it from a majority (a round trip) — with two
            // clients on two groups that is up to half the reads, and the median
            // landed either side of 300 ms.
            "--clients",
            "1",
            "--operations",
            "30",
            "--duration",
            "60",
            "--reads",
            "0.5",
        ],
        dir.path(),
        Duration::from_secs(90),
    );
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().expect("a JSON line")).expect("JSON");
    let p50 = |kind: usize| report["kinds"][kind]["p50_us"].as_u64().expect("p50");
    // A commit needs a majority: at least one replica at another site, 300 ms away.
    assert!(p50(1) >= 300_000, "writes at {} µs: {report}", p50(1));
    // A current read at a replica its coordinator vouches for stays at the site (the
    // first read of each group goes to a majority; the median does not).
    assert!(p50(0) < 300_000, "reads at {} µs: {report}", p50(0));
}

#[test]
fn the_shell_works_with_entities_of_the_schema() {
    let (_alone, dir, cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().expect("UTF-8 path");
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        first_commit(&client, &eg(1)).await;
    });
    let photos = megastore_e2e::repo_root().join("schema/photos.msdl");
    let applied = run_megastore(
        &[
            "schema",
            "apply",
            photos.to_str().unwrap(),
            "--config",
            config_arg,
        ],
        dir.path(),
        LIMIT,
    );
    assert!(applied.status.success(), "{applied:?}");
    // An untyped group named by User 7's group's raw key: a group of its own, whose
    // rows never reach User 7's (issue 11: they once did).
    let catalog = megastore_schema::compile(
        "photos.msdl",
        &std::fs::read_to_string(&photos).unwrap(),
        None,
    )
    .unwrap();
    let user_group: String = catalog
        .group_prefix(catalog.table("User").unwrap(), &[7i64.into()])
        .unwrap()
        .iter()
        .map(|b| format!("\\x{b:02x}"))
        .collect();
    let script = format!(
        "\
tables
entity put User user_id=7 name=Ann
begin User 7
entity get User 8
entity put Photo user_id=7 photo_id=1 time=100 full_url=http://p/1 tag=cat tag=sea
entity put Photo user_id=7 photo_id=2 time=200 full_url=http://p/2
entity put Photo user_id=7 photo_id=3 time=300 full_url=http://p/3 tag=sea tag=sun
put raw column value
entity scan Photo 7
commit
entity get User 7
entity delete Photo 7 2
entity scan Photo 7 --limit 10
index scan PhotosByTag sea --verify
index scan PhotosByTime 7
index scan PhotosByTime 7 --from 100 --reverse --limit 1
index join PhotosByTag sea + PhotosByTag sun --verify
index scan NoSuchIndex x
entity get Photo 7 x
use {user_group}
put raw column value
entity get User 7
"
    );
    let out = run_megastore_with_input(
        &["shell", "--config", config_arg],
        &script,
        dir.path(),
        LIMIT,
    );
    let text = &out.stdout;
    assert_eq!(
        out.status.code(),
        Some(1),
        "bad commands: exit 1\n{text}\n{}",
        out.stderr
    );
    // Untyped rows would land among the schema's rows of that group: refused.
    assert!(
        text.contains("error: this transaction is on an entity group of the schema"),
        "{text}"
    );
    let untyped = text
        .split("> put raw column value\n")
        .nth(2)
        .expect("the untyped put");
    assert!(untyped.starts_with("committed at log position 1"), "{text}");
    assert!(
        untyped.contains("| 7       | \"Ann\" |"),
        "User 7 is unchanged: {text}"
    );
    assert!(text.contains("| Photo | user_id, photo_id |"), "{text}");
    assert!(text.contains("| 7       | \"Ann\" |"), "{text}");
    // Inside the transaction the scan sees both staged photos; after the delete, one.
    let in_txn = text
        .split("entity scan Photo 7\n")
        .nth(1)
        .expect("the scan");
    assert!(in_txn.contains("\"http://p/2\""), "{text}");
    assert!(text.contains("[\"cat\", \"sea\"]"), "{text}");
    let after = text
        .split("entity scan Photo 7 --limit 10\n")
        .nth(1)
        .expect("the second scan");
    let table = after.split("> ").next().unwrap_or_default();
    assert!(
        table.contains("\"http://p/1\"") && !table.contains("\"http://p/2\""),
        "{text}"
    );
    assert!(
        text.contains("error: Photo.photo_id: \"x\" is not a valid int32"),
        "{text}"
    );
    // Groups are named by their root entity, in the prompt and in errors.
    assert!(text.contains("transaction begun on User(7)"), "{text}");
    assert!(text.contains("User(7) (txn)> "), "{text}");
    assert!(
        text.contains(
            "User(8) lives in the entity group of User(8), not in this transaction's, User(7)"
        ),
        "{text}"
    );
    // Index scans: the global PhotosByTag across groups (photo 1 is tagged sea), the
    // local PhotosByTime in User 7's group (photo 2 was deleted).
    let section = |command: &str| {
        text.split(&format!("{command}\n"))
            .nth(1)
            .and_then(|rest| rest.split("> ").next())
            .unwrap_or_default()
            .to_string()
    };
    let by_tag = section("index scan PhotosByTag sea --verify");
    assert!(
        by_tag.contains("| tag ") && by_tag.contains("\"sea\"") && by_tag.contains("7, 1"),
        "{text}"
    );
    let by_time = section("index scan PhotosByTime 7");
    assert!(
        by_time.contains("7, 1") && !by_time.contains("7, 2"),
        "{text}"
    );
    // An entity read outside a transaction says how it was served, as row reads do.
    let read = section("entity get User 7");
    assert!(
        read.contains("current read at position") && read.contains("from replica"),
        "{text}"
    );
    // A range read newest first, one per page: photo 3, and a token for the next page.
    let newest = section("index scan PhotosByTime 7 --from 100 --reverse --limit 1");
    assert!(
        newest.contains("7, 3")
            && !newest.contains("7, 1")
            && newest.contains("(more: the same scan with --page "),
        "{text}"
    );
    // Only photo 3 is tagged both sea and sun.
    let joined = section("index join PhotosByTag sea + PhotosByTag sun --verify");
    let rows: Vec<Vec<&str>> = joined
        .lines()
        .filter(|l| l.starts_with("| ") && !l.contains("user_id"))
        .map(|l| {
            l.split('|')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows, vec![vec!["7", "3"]], "{text}");
    assert!(
        text.contains("error: schema PhotoApp has no index \"NoSuchIndex\" (indexes: "),
        "{text}"
    );
}

/// A config file that is not there is one clear error, naming it, said once.
#[test]
fn a_missing_config_file_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.toml");
    let out = run_megastore(
        &["status", "--config", missing.to_str().unwrap()],
        dir.path(),
        LIMIT,
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stderr.contains("nowhere.toml"), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("No such file or directory").count(),
        1,
        "{}",
        out.stderr
    );
}
