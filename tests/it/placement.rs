//! `megastore range`: the placement of groups held in lockd, read by `range list` and
//! `status`, split by several operators at once while lockd loses its leader, and
//! followed by every replica server and coordinator while writers run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_e2e::run_megastore;

use crate::support::{connect, counter_value, eg, increment, row, start_cluster};

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
            &["range", "split", "7", "--at", "\\xfek"][..],
            "range-7 does not exist",
        ),
        (
            &["range", "split", "x7", "--at", "\\xfek"],
            "\"x7\" is not a range number",
        ),
        // A split must fall between groups: not inside one, and not among the groups
        // of a table the schema does not have (none is applied here).
        (
            &["range", "split", "--at", "\\xfeeg-0012\\x00\\x01k"],
            "inside entity group untyped \"eg-0012\"",
        ),
        (
            &["range", "split", "--at", "k1"],
            "no table of the cluster's schema",
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
            // Between untyped groups, after every `eg-…` (tag 0xfe, then `k` > `e`).
            .map(move |i| format!("\\xfek{operator}{i:02}"))
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
        .map(|key| split_key_bytes(&key))
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
            starts.get(&split_key_bytes(key)),
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
    // Counted per range: each group in exactly one. The keys above all sort after the
    // `eg-…` groups, so the first range holds them all; a split at a group's name cuts
    // them in two.
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

/// The bytes of a split key given as `\xfe` and then text (`--at \xfek003`).
fn split_key_bytes(key: &str) -> Vec<u8> {
    let text = key
        .strip_prefix("\\xfe")
        .expect("split keys start with \\xfe");
    [&[0xfe][..], text.as_bytes()].concat()
}

/// Writers at two sites, each incrementing counters of groups of its own, while ranges
/// split under them and replica b is killed and restarted: every replica server and
/// coordinator ends judging by the stored placement (their gauges say so), and every
/// counter holds exactly its acknowledged increments (plus at most those of unknown
/// outcome): a server that refused, or lost, what it still serves fails this.
#[test]
fn servers_follow_splits_made_while_writers_run_through_a_replica_crash() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().expect("UTF-8").to_string();
    let megastore = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", &config_arg]);
        run_megastore(&all, dir.path(), LIMIT)
    };
    const WRITERS: u32 = 4;
    const GROUPS_PER_WRITER: u32 = 5;
    const INCREMENTS_MAX: u32 = 400;
    let group_of = |writer: u32, i: u32| eg(100 + writer * GROUPS_PER_WRITER + i);
    let stop = AtomicBool::new(false);
    // Each writer: per group, the increments acknowledged and those that failed (which
    // may or may not have committed).
    let writers = (0..WRITERS).map(|writer| {
        let (config, stop) = (&config, &stop);
        async move {
            let site = if writer % 2 == 0 { "A" } else { "B" };
            let client = connect(config, site).await;
            let mut acked = vec![0u64; GROUPS_PER_WRITER as usize];
            let mut failed = vec![0u64; GROUPS_PER_WRITER as usize];
            let started = Instant::now();
            for n in 0..INCREMENTS_MAX {
                if stop.load(Ordering::SeqCst) || started.elapsed() > LIMIT {
                    break;
                }
                let i = n % GROUPS_PER_WRITER;
                match increment(&client, &group_of(writer, i), "n").await {
                    Ok(_) => acked[i as usize] += 1,
                    Err(_) => failed[i as usize] += 1,
                }
            }
            (acked, failed)
        }
    });
    let outcomes: Vec<(Vec<u64>, Vec<u64>)> = std::thread::scope(|scope| {
        let writing = scope.spawn(|| runtime.block_on(futures::future::join_all(writers)));

        // Splits between the writers' groups, replica b killed among them.
        let split = |group: u32| {
            let name = format!("eg-{group:04}");
            let out = megastore(&["range", "split", "--at-group", &name]);
            assert!(out.status.success(), "split at {name}: {out:?}");
        };
        for group in [103, 108, 113] {
            split(group);
            std::thread::sleep(Duration::from_millis(300));
        }
        cluster.process("replica-b").kill();
        split(106);
        std::thread::sleep(Duration::from_millis(500));
        cluster.start_process("replica-b");
        for group in [111, 116] {
            split(group);
            std::thread::sleep(Duration::from_millis(300));
        }
        std::thread::sleep(Duration::from_secs(2));
        // While the writers run, the replicas report the ranges' write rates.
        let status = megastore(&["status", "-o", "json"]);
        assert!(status.status.success(), "{status:?}");
        let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
        let rate: f64 = json["replicas"][0]["ranges"]["ranges"]
            .as_array()
            .unwrap_or_else(|| panic!("replica a reports no ranges: {json}"))
            .iter()
            .map(|r| r["applied_per_second"].as_f64().expect("a rate"))
            .sum();
        assert!(rate > 0.0, "no writes per second while writers run: {json}");
        stop.store(true, Ordering::SeqCst);
        writing.join().expect("the writers")
    });

    // Every counter holds its acknowledged increments, and no more than those plus the
    // ones of unknown outcome.
    let at_a = runtime.block_on(connect(&config, "A"));
    let mut acknowledged = 0;
    for (writer, (acked, failed)) in (0..WRITERS).zip(&outcomes) {
        for i in 0..GROUPS_PER_WRITER {
            let group = group_of(writer, i);
            let value = runtime.block_on(async {
                let read = at_a
                    .read(
                        &group,
                        megastore_paxos::ReadMode::Current,
                        megastore_paxos::DataQuery::Rows(vec![row(&group, "n")]),
                    )
                    .await
                    .expect("a current read");
                counter_value(read.rows.into_iter().next())
            });
            let (acked, failed) = (acked[i as usize], failed[i as usize]);
            assert!(
                (acked..=acked + failed).contains(&value),
                "{group}: counter {value}, {acked} increments acknowledged, {failed} failed"
            );
            acknowledged += acked;
        }
    }
    assert!(
        acknowledged >= u64::from(WRITERS) * 20,
        "too few writes acknowledged while ranges split: {outcomes:?}"
    );
    // Replica a, up throughout, applied one entry per increment that landed (each
    // group has one writer, so none shares an entry), each counted under some range.
    let failed: u64 = outcomes.iter().flat_map(|(_, f)| f).sum();
    let started = Instant::now();
    loop {
        let status = megastore(&["status", "-o", "json"]);
        let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
        let applied: u64 = json["replicas"][0]["ranges"]["ranges"]
            .as_array()
            .map(|ranges| {
                ranges
                    .iter()
                    .map(|r| r["applied"].as_u64().expect("a count"))
                    .sum()
            })
            .unwrap_or(0);
        assert!(
            applied <= acknowledged + failed,
            "replica a counts {applied} entries applied, more than the {acknowledged} increments acknowledged and {failed} failed"
        );
        if applied >= acknowledged {
            let text = megastore(&["status"]).stdout;
            assert!(text.contains("WRITES/S (10 s)"), "{text}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "replica a counts {applied} entries applied, fewer than the {acknowledged} increments acknowledged"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // Every process judges by the stored placement, and holds every range.
    let out = megastore(&["range", "list", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("list JSON");
    let version = json["placement"]["version"].as_f64().expect("a version");
    let ranges = json["placement"]["ranges"]
        .as_array()
        .expect("ranges")
        .len() as f64;
    assert_eq!(ranges, 7.0, "{json}");
    let processes = ["a", "b", "c", "d"]
        .into_iter()
        .map(|name| {
            let replica = config.replica(name).expect("a replica");
            (replica.metrics_address.clone(), "megastore_replica")
        })
        .chain(["a", "b"].into_iter().map(|name| {
            let replica = config.replica(name).expect("a replica");
            (
                replica.coordinator_metrics_address.clone(),
                "megastore_coordinator",
            )
        }));
    for (address, prefix) in processes {
        let address = address.expect("a metrics address");
        let started = Instant::now();
        loop {
            let text = megastore_e2e::scrape_metrics(&address);
            let seen = (
                megastore_e2e::metric_value(&text, &format!("{prefix}_placement_version")),
                megastore_e2e::metric_value(&text, &format!("{prefix}_ranges_held")),
            );
            if seen == (Some(version), Some(ranges)) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{prefix} at {address} judges by (version, ranges) {seen:?}, not {:?}",
                (version, ranges)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // `megastore status` says so too, for each replica with data (a, b and d; the
    // witness holds none).
    let text = megastore(&["status"]).stdout;
    let following = format!("v{version} ({ranges} ranges)");
    assert_eq!(
        text.lines().filter(|l| l.contains(&following)).count(),
        3,
        "{text}"
    );
}
