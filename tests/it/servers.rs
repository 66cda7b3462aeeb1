//! `[[servers]]`: more replica servers for a replica's slot, added to a running
//! cluster (docs/operations.md, "Adding a replica server"). A server lists itself in
//! the placement at its replica's site holding nothing, its coordinator takes the
//! server's lock, and it starts as a server that never voted (not rejoining): after a
//! crash it stays so, after losing its store it rejoins like any other. Writers run
//! throughout and lose nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use megastore_client::placement_store::change_placement;
use megastore_e2e::{free_ports, run_megastore};
use megastore_lock::{LockCommand, LockReply};
use megastore_placement::{RangeId, ServerId, Version};
use megastore_rpc::pb::admin as pb;
use megastore_rpc::pb::admin::admin_client::AdminClient;
use megastore_types::{EgId, ReplicaId};

use crate::support::{
    assert_rejoined, connect, current_counter, eg, increment, start_cluster_edited,
};

pub(crate) const LIMIT: Duration = Duration::from_secs(60);

/// `config` with servers `a2` (id 11, for full replica a) and `c2` (id 13, for witness
/// c) added, on ports no process of it has.
pub(crate) fn with_servers(config: &str) -> String {
    with_extra_servers(config, &[("a2", 11, "a"), ("c2", 13, "c")])
}

/// `config` with these servers `(name, id, replica)` added, each on ports no process
/// of it has, with a coordinator for a full replica's (`a` or `b`) and its data in
/// `data/NAME`.
pub(crate) fn with_extra_servers(config: &str, servers: &[(&str, u16, &str)]) -> String {
    let mut config = config.to_string();
    for &(name, id, replica) in servers {
        let (address, coordinator) = loop {
            let [a, b] = free_ports(2)[..] else {
                unreachable!("two ports asked for")
            };
            if [a, b]
                .iter()
                .all(|port| !config.contains(&format!(":{port}\"")))
            {
                break (a, b);
            }
        };
        config += &format!(
            "\n[[servers]]\nname = \"{name}\"\nid = {id}\nreplica = \"{replica}\"\n\
             address = \"127.0.0.1:{address}\"\ndata_dir = \"data/{name}\"\n"
        );
        if ["a", "b"].contains(&replica) {
            config += &format!("coordinator_address = \"127.0.0.1:{coordinator}\"\n");
        }
    }
    config
}

/// The `megastore` CLI, run in `dir` against `cluster`'s config file (within
/// [`LIMIT`]).
pub(crate) fn cli_of(
    cluster: &megastore_e2e::LocalCluster,
    dir: &std::path::Path,
) -> impl Fn(&[&str]) -> megastore_e2e::Finished + use<> {
    let config = cluster.config_path.to_str().expect("UTF-8").to_string();
    let dir = dir.to_path_buf();
    move |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", &config]);
        run_megastore(&all, &dir, LIMIT)
    }
}

/// Starts server a2 and its coordinator, and waits until a2 serves.
pub(crate) fn start_a2(cluster: &mut megastore_e2e::LocalCluster) {
    cluster.start_processes(&["replica-a2", "coordinator-a2"]);
    cluster.wait_for_log("replica-a2", "replica serving", LIMIT);
}

/// Waits until replica a's first server holds the ranges `at_a` and server a2
/// `at_a2` (each reads the placement from lockd every second).
pub(crate) async fn a_and_a2_hold(
    config: &megastore_config::ClusterConfig,
    at_a: &[u64],
    at_a2: &[u64],
) {
    let held = async |name: &str| -> Vec<u64> {
        let ranges = ranges_at(config, name).await.unwrap_or_default();
        ranges.iter().map(|r| r.range).collect()
    };
    let started = Instant::now();
    loop {
        let (a, a2) = (held("a").await, held("a2").await);
        if a == at_a && a2 == at_a2 {
            return;
        }
        assert!(
            started.elapsed() < LIMIT,
            "a holds {a:?} and a2 {a2:?}, not {at_a:?} and {at_a2:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The line a replica server logs when it serves, with whether it rejoins.
fn serving(rejoining: bool) -> String {
    format!("rejoining={rejoining}")
}

/// Waits until replica server process `name` has logged that it serves `starts` times
/// (its log is kept across restarts).
pub(crate) fn wait_for_starts(
    cluster: &mut megastore_e2e::LocalCluster,
    name: &str,
    starts: usize,
) {
    let started = Instant::now();
    while cluster
        .process(name)
        .log()
        .matches("replica serving")
        .count()
        < starts
    {
        assert!(
            started.elapsed() < LIMIT,
            "{name} did not start {starts} times:\n{}",
            cluster.process(name).log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn servers_added_while_writers_run_list_themselves_holding_nothing_and_never_rejoin() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster_edited(with_servers);
    let megastore = cli_of(&cluster, dir.path());

    const WRITERS: u32 = 2;
    const INCREMENTS_MAX: u32 = 300;
    let stop = AtomicBool::new(false);
    // Each writer increments a counter of its own: (acknowledged, failed).
    let writers = (0..WRITERS).map(|writer| {
        let (config, stop) = (&config, &stop);
        async move {
            let client = connect(config, if writer == 0 { "A" } else { "B" }).await;
            let (mut acked, mut failed) = (0u64, 0u64);
            let started = Instant::now();
            for _ in 0..INCREMENTS_MAX {
                if stop.load(Ordering::SeqCst) || started.elapsed() > LIMIT {
                    break;
                }
                match increment(&client, &eg(200 + writer), "n").await {
                    Ok(_) => acked += 1,
                    Err(_) => failed += 1,
                }
            }
            (acked, failed)
        }
    });
    let outcomes: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let writing = scope.spawn(|| runtime.block_on(futures::future::join_all(writers)));
        for process in ["replica-a2", "coordinator-a2", "replica-c2"] {
            cluster.start_process(process);
        }
        for process in ["replica-a2", "replica-c2"] {
            cluster.wait_for_log(process, "replica serving", LIMIT);
        }
        // Killed and started again: its own store, so still a server that never voted.
        cluster.process("replica-a2").kill();
        cluster.start_process("replica-a2");
        wait_for_starts(&mut cluster, "replica-a2", 2);
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::SeqCst);
        writing.join().expect("the writers")
    });

    for process in ["replica-a2", "replica-c2"] {
        let log = cluster.process(process).log();
        assert!(
            log.contains(&serving(false)) && !log.contains(&serving(true)),
            "{process} started rejoining:\n{log}"
        );
    }
    let stamp = std::fs::read_to_string(dir.path().join("data/a2/MEGASTORE_STAMP")).unwrap();
    assert!(stamp.contains("\"server\": 11"), "{stamp}");
    assert!(stamp.contains("\"rejoining\": false"), "{stamp}");

    // Listed in the placement at their replicas' sites, holding no range.
    let out = megastore(&["range", "list", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("list JSON");
    let servers = &json["placement"]["servers"];
    assert_eq!(servers["11"]["site"], 0, "a2 is at site A: {json}");
    assert_eq!(servers["13"]["site"], 2, "c2 is at site C: {json}");
    for range in json["placement"]["ranges"].as_array().expect("ranges") {
        for slot in range["slots"].as_array().expect("slots") {
            assert!(
                ![11, 13].contains(&slot["server"].as_u64().expect("a server id")),
                "a new server holds a range: {json}"
            );
        }
    }
    let text = megastore(&["range", "list"]).stdout;
    assert!(
        text.contains("A: a (1), a2 (0)") && text.contains("C: c (1), c2 (0)"),
        "{text}"
    );

    // a2's coordinator holds the server's own lock.
    runtime.block_on(async {
        let lockd = megastore_rpc::LockdClient::new(&config).expect("a lockd client");
        let started = Instant::now();
        loop {
            let holder = lockd
                .execute(LockCommand::Holder {
                    lock: "coordinator/11".into(),
                })
                .await;
            if matches!(holder, Ok(LockReply::Holder(Some(_)))) {
                break;
            }
            assert!(started.elapsed() < LIMIT, "no holder of coordinator/11");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    // Every counter holds its acknowledged increments, and no more than those plus the
    // ones of unknown outcome.
    let at_a = runtime.block_on(connect(&config, "A"));
    for (writer, (acked, failed)) in (0..WRITERS).zip(&outcomes) {
        let group = eg(200 + writer);
        let value = runtime.block_on(current_counter(&at_a, &group, "n"));
        assert!(
            (*acked..=acked + failed).contains(&value),
            "{group}: counter {value}, {acked} increments acknowledged, {failed} failed"
        );
        assert!(*acked >= 10, "too few writes acknowledged: {outcomes:?}");
    }

    // A server that served and lost its store rejoins, as any server does.
    cluster.process("replica-c2").kill();
    let c2_data = dir.path().join("data/c2");
    std::fs::remove_dir_all(&c2_data).unwrap();
    cluster.start_process("replica-c2");
    wait_for_starts(&mut cluster, "replica-c2", 2);
    assert_rejoined(&mut cluster, "replica-c2", &c2_data);

    // A name the config lacks is refused naming those it has.
    let out = megastore(&["replica", "--id", "a9"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        out.stderr
            .contains("replicas and servers: a, a2, b, c, c2, d"),
        "{}",
        out.stderr
    );
}

/// Every stored version of every group state row `dir`'s store holds (the replica
/// server using it stopped).
fn group_state(dir: &std::path::Path) -> Vec<megastore_rowstore::StoredRow> {
    use megastore_rowstore::{KeyRange, RowRead};
    let store = megastore_rowstore_rocksdb::RocksStore::open(dir).expect("the store");
    megastore_paxos::group_state_spans(&KeyRange::all())
        .iter()
        .flat_map(|span| store.export_rows(span, usize::MAX).expect("the rows"))
        .collect()
}

/// The progress messages of a copy into a2, or the status that ended it.
async fn copy_into(
    admin: &mut AdminClient<tonic::transport::Channel>,
    move_id: u64,
    last: bool,
) -> Result<Vec<pb::CopyProgress>, tonic::Status> {
    let mut stream = admin
        .copy_range(pb::CopyRangeRequest {
            range: 0,
            move_id,
            r#final: last,
        })
        .await?
        .into_inner();
    let mut progress = Vec::new();
    while let Some(message) = stream.message().await? {
        progress.push(message);
    }
    Ok(progress)
}

/// A move's copies between two processes (`Admin.CopyRange` at the target pulling
/// `Admin.ExportPage` pages from the source, `Admin.Freeze` at the source) while
/// writers run: the target killed mid-copy begins again; after the source froze, its
/// final copy — of only the groups changed since the bulk copy — makes the target hold
/// exactly the source's group state; the move given
/// up, the source serves again and the target retires the copy; every counter holds
/// exactly its acknowledged increments.
#[test]
fn a_range_is_copied_between_servers_while_writers_run_and_the_target_crashes() {
    copy_between_servers(false);
}

/// The same, with the source SIGKILLed and started again between the bulk copy and
/// its freeze: the new process tracked none of the changes since the bulk copy, so the
/// final copy is of the whole range — and still leaves the target exactly the source.
#[test]
fn a_final_copy_after_the_source_restarted_copies_the_whole_range() {
    copy_between_servers(true);
}

fn copy_between_servers(source_restarts: bool) {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster_edited(with_servers);
    start_a2(&mut cluster);
    let topology = config.topology().expect("a topology");
    let lockd = runtime.block_on(async { megastore_rpc::LockdClient::new(&config) });
    let lockd = lockd.expect("a lockd client");
    let admin_at = |name: &str| {
        let address = config
            .server_process(name)
            .expect("a server")
            .process
            .admin_endpoint()
            .to_string();
        let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
            .expect("an address")
            .connect_lazy();
        AdminClient::new(channel)
            .max_decoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX)
    };
    let (mut at_a2, mut at_a) = runtime.block_on(async { (admin_at("a2"), admin_at("a")) });

    // Many groups, so the copy takes many pages.
    const GROUPS: u32 = 120;
    let client = runtime.block_on(connect(&config, "B"));
    runtime.block_on(async {
        for n in 0..GROUPS {
            increment(&client, &eg(300 + n), "n")
                .await
                .expect("a first write");
        }
    });

    // Refused before the move exists, naming it.
    let refused = runtime
        .block_on(copy_into(&mut at_a2, 99, false))
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused}");
    assert!(
        refused.message().contains("range-0 has no move v99"),
        "{refused}"
    );

    let begun = runtime.block_on(change_placement(&lockd, &topology, |p| {
        p.begin_move(RangeId(0), ReplicaId(1), ServerId(11))
    }));
    let move_id = begun.expect("the move begins").version().0;

    const WRITERS: u32 = 2;
    let stop = AtomicBool::new(false);
    let writers = (0..WRITERS).map(|writer| {
        let (config, stop) = (&config, &stop);
        async move {
            let client = connect(config, if writer == 0 { "A" } else { "B" }).await;
            let (mut acked, mut failed) = (0u64, 0u64);
            let started = Instant::now();
            for _ in 0..400 {
                if stop.load(Ordering::SeqCst) || started.elapsed() > LIMIT {
                    break;
                }
                match increment(&client, &eg(200 + writer), "n").await {
                    Ok(_) => acked += 1,
                    Err(_) => failed += 1,
                }
            }
            (acked, failed)
        }
    });
    let outcomes: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let writing = scope.spawn(|| runtime.block_on(futures::future::join_all(writers)));
        runtime.block_on(async {
            // The bulk copy, broken off by the target's crash after its first page.
            let mut stream = at_a2
                .copy_range(pb::CopyRangeRequest {
                    range: 0,
                    move_id,
                    r#final: false,
                })
                .await
                .expect("the copy begins")
                .into_inner();
            let first = stream.message().await.expect("a page").expect("progress");
            assert!(!first.done, "the copy took one page: {first:?}");
        });
        cluster.process("replica-a2").kill();
        cluster.start_process("replica-a2");
        wait_for_starts(&mut cluster, "replica-a2", 2);
        runtime.block_on(async {
            // Begun again, to the end.
            let progress = retry_copy(&mut at_a2, move_id, false).await;
            let last = progress.last().expect("progress");
            assert!(last.done && last.pages > 3, "{progress:?}");
            assert!(last.rows >= u64::from(GROUPS), "{progress:?}");
        });
        if source_restarts {
            cluster.process("replica-a").kill();
            cluster.start_process("replica-a");
            wait_for_starts(&mut cluster, "replica-a", 2);
        }
        runtime.block_on(async {
            // The final copy is refused until the source froze.
            let refused = copy_into(&mut at_a2, move_id, true).await.unwrap_err();
            assert!(
                refused
                    .message()
                    .contains("the source is not frozen for the move"),
                "{refused}"
            );
            let started = Instant::now();
            let frozen = loop {
                // Asked again while a reconnects after its restart.
                match at_a.freeze(pb::FreezeRequest { range: 0, move_id }).await {
                    Ok(answer) => break answer.into_inner(),
                    Err(status) => assert!(started.elapsed() < LIMIT, "no freeze: {status}"),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            assert!(frozen.frozen);
            let progress = retry_copy(&mut at_a2, move_id, true).await;
            let last = progress.last().expect("progress");
            assert!(last.done, "{progress:?}");
            if source_restarts {
                // The source's new process tracked nothing since the bulk copy.
                assert_eq!(last.changed_groups, None, "{progress:?}");
                assert!(last.rows >= u64::from(GROUPS), "{progress:?}");
            } else {
                // a2's bulk copy (begun again after its crash) came whole from one
                // process of a, which tracked its changes since: the final copy is of
                // the groups the writers changed, not of the range.
                assert!(
                    last.changed_groups
                        .is_some_and(|n| n < u64::from(GROUPS) / 4),
                    "not a short final copy: {progress:?}"
                );
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
        writing.join().expect("the writers")
    });

    // The target holds exactly what the frozen source holds of the range.
    for process in ["replica-a", "replica-a2"] {
        assert!(cluster.process(process).terminate(Duration::from_secs(10)));
    }
    let source = group_state(&dir.path().join("data/a"));
    let target = group_state(&dir.path().join("data/a2"));
    assert!(source.len() > GROUPS as usize, "{} rows", source.len());
    assert!(
        source == target,
        "the target's copy differs from the frozen source"
    );

    // The move given up: the source serves the range again and the target retires it.
    let aborted = runtime.block_on(change_placement(&lockd, &topology, |p| {
        p.abort_move(RangeId(0), Version(move_id))
    }));
    aborted.expect("the move is given up");
    for process in ["replica-a", "replica-a2"] {
        cluster.start_process(process);
    }
    wait_for_starts(&mut cluster, "replica-a2", 3);
    let at_a = runtime.block_on(connect(&config, "A"));
    for (writer, (acked, failed)) in (0..WRITERS).zip(&outcomes) {
        let group = eg(200 + writer);
        let value = runtime.block_on(current_counter(&at_a, &group, "n"));
        assert!(
            (*acked..=acked + failed).contains(&value),
            "{group}: counter {value}, {acked} increments acknowledged, {failed} failed"
        );
        assert!(*acked >= 5, "too few writes acknowledged: {outcomes:?}");
    }
    runtime.block_on(async {
        increment(&at_a, &eg(200), "n")
            .await
            .expect("a write after the move");
    });
    // a2 retires the copy once it reads the placement that gave the move up (it
    // polls lockd every second); its store can only be read with it stopped, so look
    // every two seconds, starting it again between looks.
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            cluster
                .process("replica-a2")
                .terminate(Duration::from_secs(10))
        );
        let left = group_state(&dir.path().join("data/a2"));
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "a2 kept {} rows of the given-up move",
            left.len()
        );
        cluster.start_process("replica-a2");
    }
}

/// A copy into a2 to its end, asked again while a2 is still starting.
async fn retry_copy(
    admin: &mut AdminClient<tonic::transport::Channel>,
    move_id: u64,
    last: bool,
) -> Vec<pb::CopyProgress> {
    let started = Instant::now();
    loop {
        match copy_into(admin, move_id, last).await {
            Ok(progress) if progress.last().is_some_and(|p| p.done) => return progress,
            outcome => assert!(started.elapsed() < LIMIT, "no copy: {outcome:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ranges `name`'s server holds by its placement, with the entries it applied in
/// each since it started (`Admin.Ranges`).
pub(crate) async fn ranges_at(
    config: &megastore_config::ClusterConfig,
    name: &str,
) -> Option<Vec<pb::RangeApplied>> {
    let address = config
        .server_process(name)?
        .process
        .admin_endpoint()
        .to_string();
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .ok()?
        .connect_lazy();
    let answer = AdminClient::new(channel)
        .ranges(pb::RangesRequest {})
        .await
        .ok()?;
    Some(answer.into_inner().ranges)
}

/// `megastore range move` of one of two ranges while writers commit at both sites, in
/// both ranges: replica a's slot of range-1 moves to server a2, which then serves it
/// (it applies the writes that follow; a keeps range-0 and serves it); a is SIGKILLed
/// afterwards and range-1 does not notice; every counter holds exactly its
/// acknowledged increments. The longest gap between a writer's acknowledged commits
/// while the move runs is printed (the write stall a move causes).
#[test]
fn range_move_hands_a_slot_to_another_server_while_writers_run() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster_edited(with_servers);
    start_a2(&mut cluster);
    let megastore = cli_of(&cluster, dir.path());
    // range-0 holds eg-0200, range-1 eg-0300 and after.
    let out = megastore(&["range", "split", "--at-group", "eg-0300"]);
    assert!(out.status.success(), "{out:?}");
    // Some groups written before, so the copy has something to carry.
    let client = runtime.block_on(connect(&config, "B"));
    runtime.block_on(async {
        for n in 0..40 {
            increment(&client, &eg(300 + n), "n")
                .await
                .expect("a first write");
        }
    });

    // Bad input is refused by name, and nothing moves.
    let out = megastore(&["range", "move", "1", "--replica", "a", "--to", "b"]);
    assert!(
        !out.status.success() && out.stderr.contains("runs for replica \"b\", not \"a\""),
        "{out:?}"
    );
    let out = megastore(&["range", "move", "7", "--replica", "a", "--to", "a2"]);
    assert!(
        !out.status.success() && out.stderr.contains("range-7"),
        "{out:?}"
    );

    // Writers at site A and B, each in both ranges: (acknowledged, failed) per
    // group, and the longest gap between two acknowledged commits.
    let groups = [eg(200), eg(400)];
    let stop = AtomicBool::new(false);
    let writers = (0..2).map(|writer| {
        let (config, stop, groups) = (&config, &stop, &groups);
        async move {
            let site = if writer == 0 { "A" } else { "B" };
            let client = connect(config, site).await;
            let mut counts = [(0u64, 0u64); 2];
            let mut last_ack = Instant::now();
            let mut longest_gap = Duration::ZERO;
            let started = Instant::now();
            for n in 0..800 {
                if stop.load(Ordering::SeqCst) || started.elapsed() > LIMIT {
                    break;
                }
                let i = n % 2;
                match increment(&client, &groups[i], site).await {
                    Ok(_) => {
                        counts[i].0 += 1;
                        longest_gap = longest_gap.max(last_ack.elapsed());
                        last_ack = Instant::now();
                    }
                    Err(_) => counts[i].1 += 1,
                }
            }
            (counts, longest_gap)
        }
    });
    let (outcomes, moved) = std::thread::scope(|scope| {
        let writing = scope.spawn(|| runtime.block_on(futures::future::join_all(writers)));
        std::thread::sleep(Duration::from_millis(300));
        let moved = megastore(&["range", "move", "1", "--replica", "a", "--to", "a2"]);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
        (writing.join().expect("the writers"), moved)
    });
    assert!(moved.status.success(), "{moved:?}");
    assert!(
        moved
            .stdout
            .contains("moved range-1 of replica a to server a2"),
        "{moved:?}"
    );
    assert!(
        moved.stderr.contains("changed groups) done"),
        "a short final copy: {moved:?}"
    );
    let text = megastore(&["range", "list"]).stdout;
    assert!(text.contains("A: a (1), a2 (1)"), "{text}");
    for (site, (_, gap)) in ["A", "B"].iter().zip(&outcomes) {
        // Shown with --no-capture: what docs/operations.md quotes.
        #[allow(clippy::print_stdout)]
        {
            println!("writer at {site}: longest gap between acknowledged commits {gap:?}");
        }
        assert!(
            *gap < Duration::from_secs(15),
            "writes at {site} stalled {gap:?} during the move"
        );
    }

    // Each server holds its range, once it read the placement that finished the move
    // (each polls lockd every second).
    runtime.block_on(a_and_a2_hold(&config, &[0], &[1]));
    // Each measures the size of the range it holds, a2 soon after it came to hold it:
    // range-1's 40 copied groups and its writers' group.
    runtime.block_on(async {
        let started = Instant::now();
        loop {
            let size = async |name: &str| {
                let ranges = ranges_at(&config, name).await.unwrap_or_default();
                ranges.first().and_then(|r| r.bytes).unwrap_or(0)
            };
            let (at_a, at_a2) = (size("a").await, size("a2").await);
            if at_a > 0 && at_a2 > 0 {
                assert!(at_a2 > at_a, "range-1 holds more groups: {at_a2} ≤ {at_a}");
                break;
            }
            assert!(
                started.elapsed() < LIMIT,
                "sizes measured: a {at_a}, a2 {at_a2}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // Status shows the servers: a2 answers, holds range-1, its coordinator its lock.
    // The placement that ended the move gave a2 a range, which restarts its
    // coordinator's epoch (it gives its lock back and takes it again): a status read in
    // between finds the lock free, so this waits for the holder.
    let started = Instant::now();
    let json = loop {
        let status = megastore(&["status", "-o", "json"]);
        assert!(status.status.success(), "{status:?}");
        let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
        if json["servers"][0]["coordinator_holder"]["owner"].is_string() {
            break json;
        }
        assert!(
            started.elapsed() < LIMIT,
            "a2's coordinator holds no lock: {json}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let a2 = &json["servers"][0];
    assert_eq!(a2["name"], "a2", "{json}");
    assert_eq!(a2["replica"], "a", "{json}");
    assert_eq!(a2["answering"], true, "{json}");
    assert_eq!(a2["ranges"], serde_json::json!([1]), "{json}");
    let text = megastore(&["status"]).stdout;
    assert!(text.contains("a2 (id 11)"), "{text}");
    assert!(text.contains("SIZE"), "{text}");
    let replica_a = &json["replicas"][0];
    assert_eq!(replica_a["name"], "a", "{json}");
    assert!(
        replica_a["ranges"]["ranges"][0]["bytes"].as_u64() > Some(0),
        "{json}"
    );
    // A group whose only copies are at a2 and b (c and d down while it was written,
    // b stopped while groups are counted) is counted: a2 is asked too.
    let at_a = runtime.block_on(connect(&config, "A"));
    for process in ["replica-c", "replica-d"] {
        cluster.process(process).kill();
    }
    runtime.block_on(async {
        increment(&at_a, &eg(450), "n")
            .await
            .expect("a write at a2 and b");
    });
    for process in ["replica-c", "replica-d"] {
        cluster.start_process(process);
        wait_for_starts(&mut cluster, process, 2);
    }
    cluster.process("replica-b").signal("STOP");
    let listed = megastore(&["range", "list", "--groups", "-o", "json"]);
    cluster.process("replica-b").signal("CONT");
    assert!(listed.status.success(), "{listed:?}");
    let json: serde_json::Value = serde_json::from_str(&listed.stdout).expect("list JSON");
    // eg-0300 … eg-0339, eg-0400 and eg-0450.
    assert_eq!(json["groups"]["1"], 42, "{json}");
    // The source goes away: range-1 does not need it.
    cluster.process("replica-a").kill();
    cluster.process("coordinator-a").kill();

    // Every counter holds its acknowledged increments, read at site A.
    let read = |group: &EgId, column: &str| runtime.block_on(current_counter(&at_a, group, column));
    for (site, (counts, _)) in ["A", "B"].iter().zip(&outcomes) {
        for (group, (acked, failed)) in groups.iter().zip(counts) {
            let value = read(group, site);
            assert!(
                (*acked..=acked + failed).contains(&value),
                "{group} ({site}): counter {value}, {acked} increments acknowledged, {failed} failed"
            );
            assert!(*acked >= 3, "too few writes acknowledged: {outcomes:?}");
        }
    }
    // The groups copied before the move are all there.
    for n in 0..40 {
        assert_eq!(read(&eg(300 + n), "n"), 1, "{}", eg(300 + n));
    }
    // a2 applies range-1's writes.
    runtime.block_on(async {
        let before = ranges_at(&config, "a2").await.expect("a2 answers")[0].applied;
        for _ in 0..5 {
            increment(&at_a, &eg(410), "n")
                .await
                .expect("a write after the move");
        }
        let after = ranges_at(&config, "a2").await.expect("a2 answers")[0].applied;
        assert!(
            after > before,
            "a2 applied nothing of range-1: {before} → {after}"
        );
    });
}

/// `megastore range rebalance --by groups --every 1 --rounds 2` (the background
/// rebalancer, two rounds) over four ranges while a writer commits:
/// the plan takes half of replica a's ranges to a2 and half of witness c's to c2 (by
/// the groups each range holds), every move finishes, and every counter holds exactly
/// its acknowledged increments.
#[test]
fn range_rebalance_evens_out_each_replicas_servers_while_a_writer_runs() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster_edited(with_servers);
    forty_groups_in_four_ranges(&mut cluster, dir.path(), &runtime, &config);
    let megastore = cli_of(&cluster, dir.path());
    let dry = megastore(&["range", "rebalance", "--dry-run"]);
    assert!(dry.status.success(), "{dry:?}");
    assert_eq!(
        dry.stdout.matches("would move").count(),
        4,
        "{}",
        dry.stdout
    );
    assert!(
        megastore(&["range", "list"])
            .stdout
            .contains("A: a (4), a2 (0)")
    );

    let stop = AtomicBool::new(false);
    let (outcome, rebalanced) = std::thread::scope(|scope| {
        let writing = scope.spawn(|| write_forty_counters(&runtime, &config, &stop, 2_000, LIMIT));
        // As a background rebalancer: a round that moves, then one that finds the
        // servers balanced.
        let rebalanced = megastore(&[
            "range",
            "rebalance",
            "--by",
            "groups",
            "--every",
            "1",
            "--rounds",
            "2",
        ]);
        stop.store(true, Ordering::SeqCst);
        (writing.join().expect("the writer"), rebalanced)
    });
    assert!(rebalanced.status.success(), "{rebalanced:?}");
    assert_eq!(
        rebalanced.stdout.matches("  moved: epoch").count(),
        4,
        "{}",
        rebalanced.stdout
    );
    let second = rebalanced
        .stdout
        .split("round 2:")
        .nth(1)
        .unwrap_or_default();
    assert!(second.contains("balanced"), "{}", rebalanced.stdout);
    // Left running, it stops at SIGINT between rounds, cleanly.
    let mut background = std::process::Command::new(megastore_e2e::megastore_bin())
        .args(["range", "rebalance", "--every", "60", "--config"])
        .arg(&cluster.config_path)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("megastore range rebalance --every");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        background.stdout.take().expect("its stdout"),
    ));
    let first_round = (&mut lines)
        .map_while(Result::ok)
        .find(|line| line.starts_with("balanced"));
    assert!(first_round.is_some(), "the first round did not finish");
    let pid = background.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let status = background.wait().expect("it ends");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        status.success() && rest == ["stopped"],
        "{status:?} {rest:?}"
    );
    let text = megastore(&["range", "list"]).stdout;
    assert!(
        text.contains("A: a (2), a2 (2)") && text.contains("C: c (2), c2 (2)"),
        "{text}"
    );
    let again = megastore(&["range", "rebalance", "--dry-run"]);
    assert!(again.stdout.contains("balanced"), "{again:?}");

    assert_forty_counters_hold(&runtime, &config, outcome);
}

/// Starts servers a2 (with its coordinator) and c2, splits the placement into four
/// ranges at `eg-0510`, `eg-0520` and `eg-0530` (all still on a and c, so four moves
/// even them out) and writes the counter `n` of groups `eg-0500`..`eg-0539` once.
pub(crate) fn forty_groups_in_four_ranges(
    cluster: &mut megastore_e2e::LocalCluster,
    dir: &std::path::Path,
    runtime: &tokio::runtime::Runtime,
    config: &megastore_config::ClusterConfig,
) {
    cluster.start_processes(&["replica-a2", "coordinator-a2", "replica-c2"]);
    for process in ["replica-a2", "replica-c2"] {
        cluster.wait_for_log(process, "replica serving", LIMIT);
    }
    let megastore = cli_of(cluster, dir);
    for at in ["eg-0510", "eg-0520", "eg-0530"] {
        let out = megastore(&["range", "split", "--at-group", at]);
        assert!(out.status.success(), "{out:?}");
    }
    let client = runtime.block_on(connect(config, "B"));
    runtime.block_on(async {
        for n in 0..40 {
            increment(&client, &eg(500 + n), "n")
                .await
                .expect("a first write");
        }
    });
}

/// Increments the counter `w` of groups `eg-0500`..`eg-0539` in turn through a client
/// at site A, across all four ranges, until `stop`, `writes` attempts or `limit`:
/// (acknowledged, failed).
pub(crate) fn write_forty_counters(
    runtime: &tokio::runtime::Runtime,
    config: &megastore_config::ClusterConfig,
    stop: &AtomicBool,
    writes: u32,
    limit: Duration,
) -> (u64, u64) {
    runtime.block_on(async {
        let client = connect(config, "A").await;
        let (mut acked, mut failed) = (0u64, 0u64);
        let started = Instant::now();
        for n in 0..writes {
            if stop.load(Ordering::SeqCst) || started.elapsed() > limit {
                break;
            }
            match increment(&client, &eg(500 + n % 40), "w").await {
                Ok(_) => acked += 1,
                Err(_) => failed += 1,
            }
        }
        (acked, failed)
    })
}

/// The forty groups `eg-0500`..`eg-0539` a rebalancing test wrote: each holds its
/// first write `n` once, and the writer's increments of `w`, `outcome` (acknowledged,
/// failed), are there exactly once in all, give or take those of unknown outcome.
pub(crate) fn assert_forty_counters_hold(
    runtime: &tokio::runtime::Runtime,
    config: &megastore_config::ClusterConfig,
    (acked, failed): (u64, u64),
) {
    let at_a = runtime.block_on(connect(config, "A"));
    let total: u64 = runtime.block_on(async {
        let mut total = 0;
        for n in 0..40 {
            let group = eg(500 + n);
            assert_eq!(current_counter(&at_a, &group, "n").await, 1, "{group}");
            total += current_counter(&at_a, &group, "w").await;
        }
        total
    });
    assert!(
        (acked..=acked + failed).contains(&total),
        "{total} increments stored, {acked} acknowledged, {failed} failed"
    );
    assert!(acked >= 20, "too few writes acknowledged: {acked}");
}

/// Whether the stored placement shows range `range` moving.
fn moving(megastore: &dyn Fn(&[&str]) -> megastore_e2e::Finished, range: usize) -> bool {
    let out = megastore(&["range", "list", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("list JSON");
    !json["placement"]["ranges"][range]["moving"].is_null()
}

/// A `range move` SIGKILLed mid-move leaves the move under way in lockd; `--give-up`
/// rolls it back (the source keeps the slot and serves it, the target retires what
/// it copied); interrupted again and run again, the same command carries it on to the
/// end. Writes go on throughout and lose nothing.
#[test]
fn an_interrupted_move_is_given_up_or_carried_on_by_running_it_again() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster_edited(with_servers);
    start_a2(&mut cluster);
    let config_arg = cluster.config_path.to_str().expect("UTF-8").to_string();
    let megastore = cli_of(&cluster, dir.path());
    // Enough groups that the copy spans several pages.
    let client = runtime.block_on(connect(&config, "B"));
    runtime.block_on(async {
        for n in 0..300 {
            increment(&client, &eg(1000 + n), "n")
                .await
                .expect("a first write");
        }
    });
    let args = [
        "range",
        "move",
        "0",
        "--replica",
        "a",
        "--to",
        "a2",
        "--config",
        &config_arg,
    ];
    // Starts the move in the background and SIGKILLs it once lockd shows it. The
    // source's coordinator is stopped meanwhile, so the move cannot end first: the
    // operator waits for that coordinator to read the move before its final copy (a
    // move of these 300 groups otherwise takes about a tenth of a second, less than
    // one poll of `range list` on a loaded machine).
    let mut interrupted = || {
        cluster.process("coordinator-a").signal("STOP");
        let mut operator = megastore_e2e::Process::start("operator", &args, dir.path());
        let started = Instant::now();
        while !moving(&megastore, 0) {
            assert!(started.elapsed() < LIMIT, "the move never began");
            std::thread::sleep(Duration::from_millis(20));
        }
        operator.kill();
        cluster.process("coordinator-a").signal("CONT");
        assert!(
            moving(&megastore, 0),
            "the move ended before its operator was killed"
        );
    };

    interrupted();
    let given_up = megastore(&[
        "range",
        "move",
        "0",
        "--replica",
        "a",
        "--to",
        "a2",
        "--give-up",
    ]);
    assert!(given_up.status.success(), "{given_up:?}");
    assert!(
        given_up.stdout.contains("gave up moving range-0"),
        "{given_up:?}"
    );
    assert!(!moving(&megastore, 0));
    let text = megastore(&["range", "list"]).stdout;
    assert!(text.contains("a@a b@b"), "{text}");
    let again = megastore(&[
        "range",
        "move",
        "0",
        "--replica",
        "a",
        "--to",
        "a2",
        "--give-up",
    ]);
    assert!(again.stdout.contains("no move range-0"), "{again:?}");

    // Interrupted again, then carried on by the same command.
    let mut acked = 0u64;
    runtime.block_on(async {
        increment(&client, &eg(999), "n").await.expect("a write");
        acked += 1;
    });
    interrupted();
    runtime.block_on(async {
        increment(&client, &eg(999), "n")
            .await
            .expect("a write mid-move");
        acked += 1;
    });
    let carried_on = megastore(&["range", "move", "0", "--replica", "a", "--to", "a2"]);
    assert!(carried_on.status.success(), "{carried_on:?}");
    assert!(
        carried_on.stdout.contains("moved range-0"),
        "{carried_on:?}"
    );
    assert!(megastore(&["range", "list"]).stdout.contains("a@a2 b@b"));

    // Everything is there, read at site A (now served by a2).
    runtime.block_on(async {
        increment(&client, &eg(999), "n")
            .await
            .expect("a write after");
        acked += 1;
    });
    let at_a = runtime.block_on(connect(&config, "A"));
    let read = |group: EgId| runtime.block_on(current_counter(&at_a, &group, "n"));
    assert_eq!(read(eg(999)), acked);
    for n in (0..300).step_by(7) {
        assert_eq!(read(eg(1000 + n)), 1, "{}", eg(1000 + n));
    }
}
