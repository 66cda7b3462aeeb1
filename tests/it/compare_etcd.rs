//! `megastore bench --etcd`: the closed loop against the peer users would compare
//! megastore with (`scripts/compare-etcd.sh` runs both side by side). One etcd member
//! (Debian's `etcd-server`, which `.ci/setup.sh` installs) on loopback; the report has
//! the same shape as megastore's, names etcd, and counts every operation (here of four
//! clients sharing two connections); `--watches --etcd` times every put to its
//! watch; `--board --etcd` runs the task board's code on etcd's transactions; and
//! `--leases --etcd` keeps etcd's leases alive.

use std::time::{Duration, Instant};

use megastore_e2e::{Process, free_ports, run_megastore};

#[test]
fn bench_runs_the_same_closed_loop_against_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let [client, peer] = free_ports(2)[..] else {
        unreachable!("two ports")
    };
    let (client_url, peer_url) = (
        format!("http://127.0.0.1:{client}"),
        format!("http://127.0.0.1:{peer}"),
    );
    let data = dir.path().join("etcd");
    let _etcd = Process::start_program(
        "etcd",
        std::path::Path::new("etcd"),
        &[
            "--name",
            "e0",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &format!("e0={peer_url}"),
        ],
        dir.path(),
    );
    let endpoint = format!("127.0.0.1:{client}");
    // The member takes a moment to elect itself.
    let started = Instant::now();
    let report = loop {
        let out = run_megastore(
            &[
                "bench",
                "--etcd",
                &endpoint,
                "--operations",
                "100",
                "--duration",
                "30",
                "--clients",
                "4",
                "--groups",
                "10",
                "--reads",
                "0.5",
                "--value-size",
                "256",
                "--connections",
                "2",
            ],
            dir.path(),
            Duration::from_secs(60),
        );
        let line = out.stdout.lines().last().unwrap_or_default().to_string();
        match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(report) if out.status.success() => break report,
            _ => {
                assert!(started.elapsed() < Duration::from_secs(30), "{out:?}");
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    };
    assert_eq!(report["system"], "etcd", "{report}");
    // Four clients shared two connections.
    assert_eq!(report["connections"], 2, "{report}");
    let kinds = report["kinds"].as_array().unwrap();
    let total: u64 = kinds
        .iter()
        .map(|k| k["count"].as_u64().unwrap() + k["errors"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 100, "every operation is accounted for: {report}");
    for kind in kinds {
        assert!(kind["count"].as_u64().unwrap() > 0, "{report}");
    }
    assert!(report["client_cpu_s"].as_f64().unwrap() > 0.0, "{report}");

    // And the watch: every put timed from its acknowledgement to the watcher.
    let out = run_megastore(
        &["bench", "--etcd", &endpoint, "--watches", "--runs", "20"],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(report["system"], "etcd", "{report}");
    assert_eq!(report["kinds"][1]["count"], 20, "{report}");

    // The task board's code on etcd's transactions, and etcd's leases.
    for (flag, step) in [("--board", "complete"), ("--leases", "keep_alive")] {
        let out = run_megastore(
            &[
                "bench",
                "--etcd",
                &endpoint,
                flag,
                "--runs",
                "30",
                "--clients",
                "4",
            ],
            dir.path(),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "{out:?}");
        let report: serde_json::Value =
            serde_json::from_str(out.stdout.lines().last().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}: {out:?}"));
        assert_eq!(
            (&report["system"], &report["kinds"][1]["kind"]),
            (&"etcd".into(), &step.into()),
            "{report}"
        );
        assert_eq!(report["kinds"][1]["count"], 30, "{flag}: {report}");
    }
}
