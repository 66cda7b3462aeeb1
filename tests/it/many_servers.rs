//! Issue 17's cluster of many servers: replicas a (site A) and b (site B) each run on
//! three servers, 10,000 groups are spread over them by `range split` and `range
//! rebalance`, and while writers at both sites commit and check that reads stay
//! current, ranges are split and moved at both sites, the witness is removed from
//! every range and stopped, and a server is SIGKILLed and started again. Every
//! acknowledged write is then present exactly once, and each server serves exactly the
//! ranges the placement gives it (so no range twice at a site).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megastore_client::Client;
use megastore_paxos::{DataQuery, ReadMode};
use megastore_placement::{Placement, ServerId};
use megastore_types::ReplicaId;

use crate::servers::{cli_of, ranges_at, with_extra_servers};
use crate::support::{connect, counter_value, eg, increment, row, start_cluster_edited};

/// How many groups the cluster holds.
const GROUPS: u32 = 10_000;
/// The extra servers: two more for replica a at site A and two for b at site B.
const EXTRA: [(&str, u16, &str); 4] = [
    ("a2", 11, "a"),
    ("a3", 21, "a"),
    ("b2", 12, "b"),
    ("b3", 22, "b"),
];
/// How long the workload runs at most.
const WORKLOAD: Duration = Duration::from_secs(60);

/// Runs `each(n)` for every n in `0..count`, `tasks` at a time.
async fn for_each_concurrently<F, Fut>(count: u32, tasks: u32, each: F)
where
    F: Fn(u32) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let each = &each;
    futures::future::join_all((0..tasks).map(|task| async move {
        let mut n = task;
        while n < count {
            each(n).await;
            n += tasks;
        }
    }))
    .await;
}

/// The counter `column` of group `eg(n)` by a current read, or `None` if the read
/// failed.
async fn read_counter(client: &Client, n: u32, column: &str) -> Option<u64> {
    let group = eg(n);
    let read = client
        .read(
            &group,
            ReadMode::Current,
            DataQuery::Rows(vec![row(&group, column)]),
        )
        .await
        .ok()?;
    Some(counter_value(read.rows.into_iter().next()))
}

/// What one writer saw: per group it wrote, (acknowledged, failed) increments of its
/// own column; how many reads at the other site it checked and how many failed.
#[derive(Default)]
struct Writer {
    counts: std::collections::BTreeMap<u32, (u64, u64)>,
    reads_checked: u64,
    reads_failed: u64,
}

#[test]
fn ten_thousand_groups_over_three_servers_per_site_survive_splits_moves_a_witness_removal_and_a_crash()
 {
    let (_alone, dir, mut cluster, config, runtime) =
        start_cluster_edited(|text| with_extra_servers(text, &EXTRA));
    let extra: Vec<String> = EXTRA
        .iter()
        .flat_map(|(name, ..)| [format!("replica-{name}"), format!("coordinator-{name}")])
        .collect();
    cluster.start_processes(&extra.iter().map(String::as_str).collect::<Vec<_>>());
    let megastore = cli_of(&cluster, dir.path());

    // Every group written once, then six ranges spread two to a server at A and at B.
    let loading = Instant::now();
    runtime.block_on(async {
        let client = connect(&config, "A").await;
        let client = &client;
        for_each_concurrently(GROUPS, 32, async |n| {
            // Counter "n" set to 1 (not incremented, so a retry after an unknown
            // outcome cannot make it 2).
            let (group, key) = (eg(n), row(&eg(n), "n"));
            let started = Instant::now();
            while let Err(e) = client
                .transaction(&group, async |txn| txn.set(&key, b"n", b"1"))
                .await
            {
                assert!(
                    started.elapsed() < WORKLOAD,
                    "no first write of eg({n}): {e}"
                );
            }
        })
        .await;
    });
    // Shown with --no-capture.
    #[allow(clippy::print_stdout)]
    {
        println!("{GROUPS} groups written in {:?}", loading.elapsed());
    }
    for sixth in 1..6 {
        let at = format!("eg-{:04}", GROUPS * sixth / 6);
        let out = megastore(&["range", "split", "--at-group", &at]);
        assert!(out.status.success(), "{out:?}");
    }
    let out = megastore(&["range", "rebalance", "--by", "groups"]);
    assert!(out.status.success(), "{out:?}");
    let text = megastore(&["range", "list"]).stdout;
    for site in ["A: a (2), a2 (2), a3 (2)", "B: b (2), b2 (2), b3 (2)"] {
        assert!(text.contains(site), "not {site}:\n{text}");
    }

    // Four writers, two at each site, increment random groups' counters of their own;
    // after each acknowledged increment a current read at the other site must see it.
    let stop = AtomicBool::new(false);
    let acked_total = AtomicU64::new(0);
    let writers = (0..4u32).map(|writer| {
        let (config, stop, acked_total) = (&config, &stop, &acked_total);
        async move {
            let (site, other) = if writer % 2 == 0 {
                ("A", "B")
            } else {
                ("B", "A")
            };
            let client = connect(config, site).await;
            let reader = connect(config, other).await;
            let column = format!("w{writer}");
            let mut seen = Writer::default();
            let started = Instant::now();
            for i in 0..20_000u32 {
                if stop.load(Ordering::SeqCst) || started.elapsed() > WORKLOAD {
                    break;
                }
                let n = (i.wrapping_mul(7_919) + writer * 2_503) % GROUPS;
                let count = seen.counts.entry(n).or_default();
                let Ok(value) = increment(&client, &eg(n), &column).await else {
                    count.1 += 1;
                    continue;
                };
                count.0 += 1;
                acked_total.fetch_add(1, Ordering::SeqCst);
                match read_counter(&reader, n, &column).await {
                    Some(read) => {
                        assert!(
                            read >= value,
                            "eg({n}) {column}: a current read at {other} saw {read} after \
                             {value} was acknowledged at {site}"
                        );
                        seen.reads_checked += 1;
                    }
                    None => seen.reads_failed += 1,
                }
            }
            seen
        }
    });
    let (writers, operations) = std::thread::scope(|scope| {
        let writing = scope.spawn(|| runtime.block_on(futures::future::join_all(writers)));
        let wait_for_writes = |at_least: u64| {
            let started = Instant::now();
            while acked_total.load(Ordering::SeqCst) < at_least && started.elapsed() < WORKLOAD {
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        let mut operations = vec![];
        wait_for_writes(50);
        operations.push(megastore(&["range", "split", "--at-group", "eg-0800"]));
        wait_for_writes(100);
        // The range that holds eg-0800 and after, to a server at A that does not hold
        // it, and later one at B the same way.
        operations.push(move_away(&megastore, 800, "a"));
        wait_for_writes(150);
        // The witness leaves every range (a voter change), and is stopped for good.
        operations.push(megastore(&["range", "remove-replica", "c"]));
        cluster.process("replica-c").kill();
        cluster.process("replica-b2").kill();
        cluster.start_process("replica-b2");
        wait_for_writes(200);
        operations.push(move_away(&megastore, 9_000, "b"));
        wait_for_writes(300);
        stop.store(true, Ordering::SeqCst);
        (writing.join().expect("the writers"), operations)
    });
    for out in &operations {
        assert!(out.status.success(), "{out:?}");
    }
    let text = megastore(&["range", "list"]).stdout;
    assert!(text.contains("range-6"), "seven ranges:\n{text}");
    assert!(text.contains("removed replicas: c"), "{text}");
    // Each server of a and b serves exactly the ranges the placement gives it: between
    // them every range once.
    let placement = stored_placement(&megastore);
    runtime.block_on(async {
        for (replica, slot) in [("a", 1), ("b", 2)] {
            for (name, id) in servers_of(replica, slot) {
                let placed: std::collections::BTreeSet<u64> = placement
                    .ranges()
                    .iter()
                    .filter(|r| r.slot(ReplicaId(slot)).is_some_and(|s| s.server == id))
                    .map(|r| r.id.0)
                    .collect();
                let started = Instant::now();
                loop {
                    let served: Option<std::collections::BTreeSet<u64>> = ranges_at(&config, name)
                        .await
                        .map(|ranges| ranges.iter().map(|r| r.range).collect());
                    if served.as_ref() == Some(&placed) {
                        break;
                    }
                    assert!(
                        started.elapsed() < WORKLOAD,
                        "{name} serves {served:?}, placed {placed:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });

    // Every group's first write once; every writer's acknowledged increments, and at
    // most those plus the ones of unknown outcome.
    let (checked, failed_reads): (u64, u64) = writers
        .iter()
        .map(|w| (w.reads_checked, w.reads_failed))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    #[allow(clippy::print_stdout)]
    {
        println!(
            "{} increments acknowledged, {checked} reads at the other site checked, \
             {failed_reads} failed",
            acked_total.load(Ordering::SeqCst)
        );
    }
    assert!(
        acked_total.load(Ordering::SeqCst) >= 300,
        "too few writes acknowledged"
    );
    assert!(checked >= 200, "too few reads checked: {checked}");
    runtime.block_on(async {
        let client = connect(&config, "B").await;
        let client = &client;
        for_each_concurrently(GROUPS, 32, async |n| {
            let value = read_counter(client, n, "n").await;
            assert_eq!(value, Some(1), "eg({n})'s first write");
        })
        .await;
        for (writer, seen) in writers.iter().enumerate() {
            let column = format!("w{writer}");
            for (&n, &(acked, failed)) in &seen.counts {
                let value = read_counter(client, n, &column).await;
                assert!(
                    value.is_some_and(|v| (acked..=acked + failed).contains(&v)),
                    "eg({n}) {column}: {value:?} stored, {acked} acknowledged, {failed} failed"
                );
            }
        }
    });
}

/// The placement lockd holds, as `range list -o json` prints it.
fn stored_placement(megastore: &dyn Fn(&[&str]) -> megastore_e2e::Finished) -> Placement {
    let out = megastore(&["range", "list", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("list JSON");
    let bytes = serde_json::to_vec(&json["placement"]).expect("JSON");
    Placement::decode(&bytes).expect("the placement")
}

/// Replica `replica`'s servers (its slot is `slot`): its first server, with the
/// replica's name and id, then its `[[servers]]`.
fn servers_of(replica: &str, slot: u16) -> Vec<(&str, ServerId)> {
    [(replica, slot)]
        .into_iter()
        .chain(
            EXTRA
                .iter()
                .filter(|(_, _, of)| *of == replica)
                .map(|(name, id, _)| (*name, *id)),
        )
        .map(|(name, id)| (name, ServerId(id)))
        .collect()
}

/// `range move` of the range holding group `eg(n)` at `replica` (`a` or `b`) to one of
/// the replica's servers that does not hold it.
fn move_away(
    megastore: &dyn Fn(&[&str]) -> megastore_e2e::Finished,
    n: u32,
    replica: &str,
) -> megastore_e2e::Finished {
    let placement = stored_placement(megastore);
    let range = placement.range_of(&eg(n).0);
    let slot = if replica == "a" { 1 } else { 2 };
    let holder = range
        .slot(ReplicaId(slot))
        .expect("the replica's slot")
        .server;
    let target = servers_of(replica, slot)
        .into_iter()
        .find(|(_, id)| *id != holder)
        .expect("another server")
        .0;
    let range = range.id.0.to_string();
    megastore(&[
        "range",
        "move",
        &range,
        "--replica",
        replica,
        "--to",
        target,
    ])
}
