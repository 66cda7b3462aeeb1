//! `[[servers]]`: more replica servers for a replica's slot, added to a running
//! cluster (docs/operations.md, "Adding a replica server"). A server lists itself in
//! the placement at its replica's site holding nothing, its coordinator takes the
//! server's lock, and it starts as a server that never voted (not rejoining): after a
//! crash it stays so, after losing its store it rejoins like any other. Writers run
//! throughout and lose nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use megastore_e2e::{free_ports, run_megastore};
use megastore_lock::{LockCommand, LockReply};

use crate::support::{
    assert_rejoined, connect, counter_value, eg, increment, row, start_cluster_edited,
};

const LIMIT: Duration = Duration::from_secs(60);

/// `config` with servers `a2` (id 11, for full replica a) and `c2` (id 13, for witness
/// c) added, on ports no process of it has.
fn with_servers(config: &str) -> String {
    let (a2, a2_coordinator, c2) = loop {
        let [a, b, c] = free_ports(3)[..] else {
            unreachable!("three ports asked for")
        };
        if [a, b, c]
            .iter()
            .all(|port| !config.contains(&format!(":{port}\"")))
        {
            break (a, b, c);
        }
    };
    config.to_string()
        + &format!(
            "\n[[servers]]\nname = \"a2\"\nid = 11\nreplica = \"a\"\naddress = \"127.0.0.1:{a2}\"\n\
         coordinator_address = \"127.0.0.1:{a2_coordinator}\"\ndata_dir = \"data/a2\"\n\
         \n[[servers]]\nname = \"c2\"\nid = 13\nreplica = \"c\"\naddress = \"127.0.0.1:{c2}\"\n\
         data_dir = \"data/c2\"\n"
        )
}

/// The line a replica server logs when it serves, with whether it rejoins.
fn serving(rejoining: bool) -> String {
    format!("rejoining={rejoining}")
}

/// Waits until replica server process `name` has logged that it serves `starts` times
/// (its log is kept across restarts).
fn wait_for_starts(cluster: &mut megastore_e2e::LocalCluster, name: &str, starts: usize) {
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
    let config_arg = cluster.config_path.to_str().expect("UTF-8").to_string();
    let megastore = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", &config_arg]);
        run_megastore(&all, dir.path(), LIMIT)
    };

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
