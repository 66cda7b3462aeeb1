//! Removing a voter (docs/protocol.md, "Voter changes"), from outside: `megastore range
//! remove-replica c` takes the witness out of every range while writers at sites A and
//! B commit; the witness's server stops serving as soon as it reads the placement, and
//! is then SIGKILLed for good, and b is SIGKILLed and started again, so the two voters
//! left carry every write. Every acknowledged increment is present exactly once, the
//! replicas go on truncating their logs without the witness (which they would wait
//! for forever if they still counted it), and the witness started again does not add
//! itself back. The read-only replica then leaves too, while its server is stopped.
//!
//! The removal is then caught up (`megastore range catch-up`), the step that lets a
//! range take another voter change: not while b is down (the two voters left must
//! both hold every group's log), and once b is back, while the writers run. Then the
//! witness is replaced: a new witness, e, joins (the next voter change), catches up,
//! and is the vote writes need while b is stopped; its join is caught up in turn.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::servers::{LIMIT, cli_of, ranges_at, wait_for_starts};
use crate::support::{
    assert_counted, connect, eg, increment, increments_until, start_cluster_with,
};

/// Waits until `acked` is at least `at_least` (writers keep committing), or fails
/// naming `what`.
pub(crate) fn wait_for_writes(acked: &AtomicU64, at_least: u64, what: &str) {
    let started = Instant::now();
    while acked.load(Ordering::SeqCst) < at_least {
        assert!(started.elapsed() < LIMIT, "no writes acknowledged {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_witness_removed_while_writers_run_serves_nothing_and_every_write_stays() {
    // No log entries kept below what every replica applied: truncation shows at once.
    let (_alone, dir, mut cluster, config, runtime) =
        start_cluster_with("\n[history]\nlog_positions = 0\n");
    let megastore = cli_of(&cluster, dir.path());

    // Bad input is refused by name, and nothing changes.
    let out = megastore(&["range", "remove-replica", "a", "7"]);
    assert!(
        !out.status.success() && out.stderr.contains("range-7 does not exist"),
        "{out:?}"
    );
    let out = megastore(&["range", "remove-replica", "zz"]);
    assert!(
        !out.status.success() && out.stderr.contains("\"zz\" is no replica of the config"),
        "{out:?}"
    );

    let groups = [eg(200), eg(400)];
    let stop = AtomicBool::new(false);
    let acked = AtomicU64::new(0);
    let (outcomes, removed) = std::thread::scope(|scope| {
        // The writers' futures are made on the thread that runs them.
        let writing = scope.spawn(|| {
            let writers =
                ["A", "B"].map(|site| increments_until(&config, site, &groups, &stop, &acked));
            runtime.block_on(futures::future::join_all(writers))
        });
        wait_for_writes(&acked, 10, "before the removal");
        let removed = megastore(&["range", "remove-replica", "c"]);
        let listed = megastore(&["range", "list"]).stdout;
        assert!(
            listed.contains("voter changes not caught up (`range catch-up`): range-0 (at v"),
            "{listed}"
        );
        // The witness's server reads the placement within a poll and serves nothing.
        let started = Instant::now();
        while runtime.block_on(ranges_at(&config, "c")) != Some(Vec::new()) {
            assert!(started.elapsed() < LIMIT, "c still serves a range");
            std::thread::sleep(Duration::from_millis(50));
        }
        wait_for_writes(
            &acked,
            acked.load(Ordering::SeqCst) + 10,
            "after the removal",
        );
        cluster.process("replica-c").kill();
        wait_for_writes(&acked, acked.load(Ordering::SeqCst) + 10, "without c");
        // With c gone, a and b are the only voters: b's crash stops writes until it is
        // back, and then they go on.
        cluster.process("replica-b").kill();
        // With b down no majority of the voters can hold the logs: the change is
        // not caught up, and the command says which voter did not run its pass.
        let early = megastore(&["range", "catch-up"]);
        assert!(
            !early.status.success()
                && early.stdout.contains("is not caught up yet")
                && early.stdout.contains("server b: no pass"),
            "{early:?}"
        );
        cluster.start_process("replica-b");
        wait_for_starts(&mut cluster, "replica-b", 2);
        wait_for_writes(
            &acked,
            acked.load(Ordering::SeqCst) + 10,
            "after b restarted",
        );
        // Once b is back, the change is caught up while the writers go on.
        let caught_up = megastore(&["range", "catch-up"]);
        assert!(
            caught_up.status.success()
                && caught_up.stdout.contains("is caught up (placement")
                && caught_up
                    .stdout
                    .contains("each held by a majority of the voters"),
            "{caught_up:?}"
        );
        wait_for_writes(
            &acked,
            acked.load(Ordering::SeqCst) + 10,
            "after the catch-up",
        );
        stop.store(true, Ordering::SeqCst);
        (writing.join().expect("the writers"), removed)
    });
    // Recorded: no range has a change waiting, and asking again does nothing.
    let listed = megastore(&["range", "list", "-o", "json"]).stdout;
    assert!(!listed.contains("voters_changed"), "{listed}");
    let again = megastore(&["range", "catch-up"]);
    assert!(
        again.status.success() && again.stdout.contains("no range has a voter change waiting"),
        "{again:?}"
    );
    assert!(removed.status.success(), "{removed:?}");
    assert!(
        removed.stdout.contains("removed replica c from range-0")
            && removed.stdout.contains("has left the cluster")
            // The command waited until c's server read the removal.
            && removed.stdout.contains("server c read placement")
            && removed.stdout.contains("waits for `megastore range catch-up`"),
        "{removed:?}"
    );

    // Every counter holds its acknowledged increments, read at site A.
    let at_a = runtime.block_on(connect(&config, "A"));
    runtime.block_on(assert_counted(&at_a, &["A", "B"], &groups, &outcomes));

    // The logs are truncated without c: every replica left applied the writes, and the
    // sweeps no longer wait for the witness's answer.
    runtime.block_on(async {
        let peers = megastore_rpc::Peers::new(&config).expect("peers");
        let group = &groups[0];
        for _ in 0..5 {
            increment(&at_a, group, "after").await.expect("a write");
        }
        let started = Instant::now();
        loop {
            let status =
                megastore_client::status::cluster_status(&config, &peers, Some(group)).await;
            let log = status
                .replicas
                .iter()
                .find(|r| r.name == "a")
                .and_then(|r| r.log);
            if log.is_some_and(|log| log.truncated.0 + 2 >= log.applied.0 && log.applied.0 > 20) {
                break;
            }
            assert!(
                started.elapsed() < LIMIT,
                "a's log of {group} is not truncated: {log:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    // Started again, the removed witness does not add itself back: it serves nothing,
    // and the placement lists it as removed.
    cluster.start_process("replica-c");
    wait_for_starts(&mut cluster, "replica-c", 2);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(runtime.block_on(ranges_at(&config, "c")), Some(Vec::new()));
    let text = megastore(&["range", "list"]).stdout;
    assert!(text.contains("removed replicas: c"), "{text}");
    assert!(!text.contains("not caught up"), "caught up above: {text}");
    assert!(!text.contains("c@c"), "{text}");
    let status = megastore(&["status", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let shown: Vec<(&str, bool)> = json["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .map(|r| (r["name"].as_str().unwrap_or(""), r["removed"] == true))
        .collect();
    assert_eq!(
        shown,
        [("a", false), ("b", false), ("c", true), ("d", false)],
        "{json}"
    );
    assert!(megastore(&["status"]).stdout.contains("witness (removed)"));
    let again = megastore(&["range", "remove-replica", "c"]);
    assert!(
        again.status.success() && again.stdout.contains("was removed already"),
        "{again:?}"
    );

    // A read-only replica is not a voter: it can leave after the witness did. Its
    // server stopped, the command says it did not confirm, and once it runs again it
    // serves nothing.
    cluster.process("replica-d").signal("STOP");
    let out = megastore(&["range", "remove-replica", "d"]);
    cluster.process("replica-d").signal("CONT");
    assert!(
        out.status.success() && out.stdout.contains("server d did not confirm"),
        "{out:?}"
    );
    let started = Instant::now();
    while runtime.block_on(ranges_at(&config, "d")) != Some(Vec::new()) {
        assert!(started.elapsed() < LIMIT, "d still serves a range");
        std::thread::sleep(Duration::from_millis(50));
    }
    runtime.block_on(async {
        increment(&at_a, &groups[1], "after")
            .await
            .expect("a write without c and d");
    });

    // Replacing the witness: c's removal is caught up, so a new witness, e, may join
    // (docs/operations.md, "Replacing a witness"): every process restarts with the
    // config that names it, then it starts, places itself in every range (a voter
    // change of each), rejoins and catches up, and votes — with b stopped, a and e
    // are the majority that writes need. Its join is then caught up in turn.
    let (grown_path, grown) = crate::operations::grow_by_witness_e(&mut cluster, dir.path());
    cluster.start_process_with("replica-e", &grown_path);
    let grown_cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", grown_path.to_str().expect("UTF-8")]);
        megastore_e2e::run_megastore(&all, dir.path(), LIMIT)
    };
    let group = &groups[0];
    runtime.block_on(async {
        let at_a = connect(&grown, "A").await;
        let peers = megastore_rpc::Peers::new(&grown).expect("peers");
        let started = Instant::now();
        loop {
            // Writes go on meanwhile; e is caught up once it has a's visible position.
            increment(&at_a, group, "after")
                .await
                .expect("a write while e joins");
            let status =
                megastore_client::status::cluster_status(&grown, &peers, Some(group)).await;
            let visible = |name: &str| {
                status
                    .replicas
                    .iter()
                    .find(|r| r.name == name)
                    .and_then(|r| r.log)
                    .map(|log| log.visible)
            };
            if visible("e").is_some() && visible("e") >= visible("a") {
                break;
            }
            assert!(
                started.elapsed() < LIMIT,
                "e did not catch up: {:?}",
                visible("e")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let listed = grown_cli(&["range", "list"]).stdout;
    assert!(
        listed.contains("e@e"),
        "e placed itself in every range: {listed}"
    );
    cluster.process("replica-b").signal("STOP");
    runtime.block_on(async {
        let at_a = connect(&grown, "A").await;
        let started = Instant::now();
        while let Err(e) = increment(&at_a, group, "after").await {
            assert!(
                started.elapsed() < LIMIT,
                "no write with e as the second vote: {e}"
            );
        }
    });
    cluster.process("replica-b").signal("CONT");
    let joined = grown_cli(&["range", "catch-up"]);
    assert!(
        joined.status.success() && joined.stdout.contains("is caught up (placement"),
        "{joined:?}"
    );
}
