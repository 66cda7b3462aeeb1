//! `megastore range`: the placement of groups held in lockd, read by `range list` and
//! `status`, and split by several operators at once while lockd loses its leader.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_e2e::run_megastore;

use crate::support::{connect, eg, increment, start_cluster};

const LIMIT: Duration = Duration::from_secs(60);

/// Splits at distinct keys from four CLI processes at once, with lockd's leader killed
/// among them: every acknowledged split is in the stored placement exactly once, and
/// nothing is there that no one asked for.
#[test]
fn concurrent_splits_through_a_lockd_leader_kill_each_land_exactly_once() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    // Groups to count: eg-0000 … eg-0029, one write each.
    let groups = 30;
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        for n in 0..groups {
            increment(&client, &eg(n), "n")
                .await
                .expect("a first write");
        }
    });
    let config_arg = cluster.config_path.to_str().expect("UTF-8").to_string();
    let megastore = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", &config_arg]);
        run_megastore(&all, dir.path(), LIMIT)
    };

    let out = megastore(&["range", "list"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout.starts_with("placement v1: 1 range (the default"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("a@a b@b c@c d@d"), "{}", out.stdout);

    // Bad input names what and where, and stores nothing.
    for (args, expected) in [
        (
            &["range", "split", "7", "--at", "k"][..],
            "range-7 does not exist",
        ),
        (
            &["range", "split", "x7", "--at", "k"],
            "\"x7\" is not a range number",
        ),
        (
            &["range", "split", "--at", ""],
            "the key space starts at the empty key",
        ),
        (&["range", "split", "--at", "\\xZZ"], "--at:"),
        (&["range", "split", "0"], "--at"),
    ] {
        let out = megastore(args);
        assert!(!out.status.success(), "{args:?} succeeded: {out:?}");
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
    }

    // Which lockd node leads: the one to kill.
    let status = megastore(&["status", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    assert_eq!(json["placement"]["stored"], false, "{json}");
    let leader = json["lockd_leader"].as_u64().expect("a lockd leader");
    let leader_name = json["lockd"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"].as_u64() == Some(leader))
        .and_then(|l| l["name"].as_str())
        .expect("the leader's name")
        .to_string();

    let operators = 4;
    let per_operator = 10;
    // Commands finished, and how many were acknowledged after the kill.
    let finished = AtomicUsize::new(0);
    let killed = AtomicBool::new(false);
    let acked_after_kill = AtomicUsize::new(0);
    // Splits not acknowledged, with why: shown if too many.
    let refused = std::sync::Mutex::new(Vec::new());
    let keys = |operator: usize| {
        (0..per_operator)
            .map(move |i| format!("k{operator}{i:02}"))
            .collect::<Vec<_>>()
    };
    let acknowledged = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..operators)
            .map(|operator| {
                let (megastore, finished, killed, acked_after_kill, refused) =
                    (&megastore, &finished, &killed, &acked_after_kill, &refused);
                scope.spawn(move || {
                    let mut acked = Vec::new();
                    for key in keys(operator) {
                        let began_after_kill = killed.load(Ordering::SeqCst);
                        let out = megastore(&["range", "split", "--at", &key]);
                        if out.status.success() {
                            assert!(out.stdout.contains("split range-"), "{}", out.stdout);
                            acked.push(key);
                            if began_after_kill {
                                acked_after_kill.fetch_add(1, Ordering::SeqCst);
                            }
                        } else {
                            refused
                                .lock()
                                .expect("the refusals")
                                .push((key, out.stderr));
                        }
                        finished.fetch_add(1, Ordering::SeqCst);
                    }
                    acked
                })
            })
            .collect();
        // The leader dies with a quarter of the splits done.
        let deadline = Instant::now() + LIMIT;
        while finished.load(Ordering::SeqCst) < operators * per_operator / 4 {
            assert!(Instant::now() < deadline, "the first splits did not finish");
            std::thread::sleep(Duration::from_millis(10));
        }
        cluster.process(&leader_name).kill();
        killed.store(true, Ordering::SeqCst);
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("an operator thread"))
            .collect::<Vec<_>>()
    });
    let attempted: BTreeSet<Vec<u8>> = (0..operators)
        .flat_map(keys)
        .map(String::into_bytes)
        .collect();
    assert!(
        acknowledged.len() * 2 >= attempted.len(),
        "most splits should be acknowledged through one lockd kill; refused: {:?}",
        refused.lock().expect("the refusals")
    );
    assert!(
        acked_after_kill.load(Ordering::SeqCst) > 0,
        "no split begun after the kill was acknowledged: lockd did not fail over"
    );

    let out = megastore(&["range", "list", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("list JSON");
    assert_eq!(json["stored"], true);
    let ranges = json["placement"]["ranges"].as_array().expect("ranges");
    let mut starts: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for range in ranges {
        let start: Vec<u8> = serde_json::from_value(range["start"].clone()).expect("a start");
        *starts.entry(start).or_default() += 1;
    }
    for key in &acknowledged {
        assert_eq!(
            starts.get(key.as_bytes()),
            Some(&1),
            "acknowledged split at {key}"
        );
    }
    for start in starts.keys().filter(|s| !s.is_empty()) {
        assert!(
            attempted.contains(start),
            "a range starts at {start:?}, which nobody asked for"
        );
    }
    // One version per split that landed, after the default's 1.
    assert_eq!(
        json["placement"]["version"].as_u64(),
        Some(ranges.len() as u64),
        "{json}"
    );

    // An acknowledged split, asked again, is already made.
    if let Some(key) = acknowledged.first() {
        let out = megastore(&["range", "split", "--at", key]);
        assert!(out.status.success(), "{out:?}");
        assert!(out.stdout.starts_with("already split"), "{}", out.stdout);
    }
    // Counted per range: each group in exactly one. The raw keys above all sort before
    // untyped groups (tag 0xfe); a split at a group's name cuts them in two.
    let out = megastore(&["range", "split", "--at-group", "eg-0012"]);
    assert!(out.status.success(), "{out:?}");
    let out = megastore(&["range", "list", "--groups", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("list JSON");
    let counts: BTreeMap<String, u64> =
        serde_json::from_value(json["groups"].clone()).expect("counts per range");
    let mut nonzero: Vec<u64> = counts.values().copied().filter(|n| *n > 0).collect();
    nonzero.sort_unstable();
    assert_eq!(nonzero, [12, 18], "{counts:?}");
    let text = megastore(&["range", "list", "--groups"]).stdout;
    assert!(text.contains("(group eg-0012)"), "{text}");

    let ranges = json["placement"]["ranges"].as_array().expect("ranges");
    let out = megastore(&["status"]);
    assert!(
        out.stdout
            .contains(&format!("{} ranges (held in lockd)", ranges.len())),
        "{}",
        out.stdout
    );
}
