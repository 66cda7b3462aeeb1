//! Replacing a full replica (docs/operations.md, "Replacing a full replica"), from
//! outside: a full replica, e, joins at site C and its join is caught up; a removal of
//! a that cannot be fenced in time is given up (a serves again); then, while
//! writers at sites A, B and C commit, `megastore range remove-replica a` takes full
//! replica a out of every range — with a's coordinator SIGSTOPped, so the removal is
//! fenced by its lock lapsing, not by its answer. The coordinator is then let go on
//! with the placement from before the removal: it takes its lock again, reads the
//! placement first, and vouches for nothing. Every acknowledged increment is present
//! exactly once, a reader at site A reads every write (no longer at a), a's server
//! serves nothing, and the removal is caught up like a witness's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megastore_paxos::ReadPath;
use megastore_types::ReplicaId;

use crate::servers::{LIMIT, ranges_at};
use crate::support::{
    assert_counted, connect, counter_value, current_read_until, eg, first_commit, increment,
    increments_until, row, start_cluster,
};
use crate::voter_changes::wait_for_writes;

/// Runs `megastore` with the grown config until `done` accepts its output (bounded),
/// and returns that output.
fn until(
    cli: &impl Fn(&[&str]) -> megastore_e2e::Finished,
    args: &[&str],
    done: impl Fn(&megastore_e2e::Finished) -> bool,
) -> megastore_e2e::Finished {
    let started = Instant::now();
    loop {
        let out = cli(args);
        if done(&out) {
            return out;
        }
        assert!(started.elapsed() < LIMIT, "{args:?} never did: {out:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_full_replica_removed_while_writers_run_loses_no_write_and_its_coordinator_vouches_no_more() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let groups = [eg(210), eg(420)];
    runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        for group in &groups {
            first_commit(&at_a, group).await;
        }
    });

    // e joins as a full replica at site C (a voter change of every range), and once
    // it holds every group its join is caught up, so a may leave.
    let (grown_path, grown) = crate::operations::grow_by_full_e(&mut cluster, dir.path());
    cluster.start_process_with("replica-e", &grown_path);
    cluster.start_process_with("coordinator-e", &grown_path);
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", grown_path.to_str().expect("UTF-8")]);
        megastore_e2e::run_megastore(&all, dir.path(), LIMIT)
    };
    until(&cli, &["range", "catch-up"], |out| out.status.success());

    // A removal that cannot be fenced in time stops with the slot leaving, says why,
    // and is listed; given up, the slot stays and a serves local reads at A again. (The
    // operator here cannot reach a's coordinator — its config names another port —
    // while the coordinator holds its lock, and has no patience.)
    let local_read_at_a = || {
        runtime.block_on(async {
            let at_a = connect(&grown, "A").await;
            let group = &groups[0];
            let read = current_read_until(&at_a, group, &row(group, "counter"), |r| {
                r.path == ReadPath::LocalVouched && r.replica == ReplicaId(1)
            })
            .await;
            assert!(counter_value(read.rows.into_iter().next()) >= 1);
        });
    };
    // a's coordinator vouches, so it holds its lock.
    local_read_at_a();
    let unreachable = dir.path().join("unreachable.toml");
    let address = grown
        .replica("a")
        .and_then(|a| a.coordinator_address.clone());
    let address = address.expect("a has a coordinator");
    let elsewhere = format!("127.0.0.1:{}", megastore_e2e::free_ports(1)[0]);
    let text = std::fs::read_to_string(&grown_path).expect("the grown config");
    std::fs::write(&unreachable, text.replace(&address, &elsewhere)).expect("a config");
    let stuck = megastore_e2e::run_megastore(
        &[
            "range",
            "remove-replica",
            "a",
            "--patience",
            "0",
            "--config",
            unreachable.to_str().expect("UTF-8"),
        ],
        dir.path(),
        LIMIT,
    );
    assert!(
        !stuck.status.success()
            && stuck.stderr.contains("server 1:")
            && stuck.stderr.contains("its coordinator's lock is held"),
        "{stuck:?}"
    );
    let listed = cli(&["range", "list"]).stdout;
    assert!(
        listed.contains("leaving (`range remove-replica` finishes"),
        "{listed}"
    );
    assert!(listed.contains("a from range-0"), "{listed}");
    let kept = cli(&["range", "remove-replica", "a", "--give-up"]);
    assert!(
        kept.status.success() && kept.stdout.contains("its removal is given up"),
        "{kept:?}"
    );
    assert!(!cli(&["range", "list"]).stdout.contains("leaving"));
    local_read_at_a();

    let stop = AtomicBool::new(false);
    let acked = AtomicU64::new(0);
    let more = |n: u64| acked.load(Ordering::SeqCst) + n;
    let sites = ["A", "B", "C"];
    let (outcomes, removed) = std::thread::scope(|scope| {
        // The writers' futures are made on the thread that runs them.
        let writing = scope.spawn(|| {
            let writers = sites.map(|site| increments_until(&grown, site, &groups, &stop, &acked));
            runtime.block_on(futures::future::join_all(writers))
        });
        wait_for_writes(&acked, more(10), "before the removal");
        // a's coordinator hangs: it answers nothing, and holds its lock until the
        // lock service ends its session.
        cluster.process("coordinator-a").signal("STOP");
        let removed = cli(&["range", "remove-replica", "a"]);
        cluster.process("coordinator-a").signal("CONT");
        wait_for_writes(&acked, more(10), "after the removal");
        // a's server reads the placement within a poll and serves nothing.
        let started = Instant::now();
        while runtime.block_on(ranges_at(&grown, "a")) != Some(Vec::new()) {
            assert!(started.elapsed() < LIMIT, "a still serves a range");
            std::thread::sleep(Duration::from_millis(50));
        }
        wait_for_writes(&acked, more(10), "once a served nothing");
        stop.store(true, Ordering::SeqCst);
        (writing.join().expect("the writers"), removed)
    });
    assert!(removed.status.success(), "{removed:?}");
    assert!(
        removed
            .stdout
            .contains("its coordinator vouches for none of those ranges")
            && removed
                .stdout
                .contains("server a: its coordinator holds no lock (down): fenced")
            && removed.stdout.contains("removed replica a from range-0")
            && removed.stdout.contains("has left the cluster"),
        "{removed:?}"
    );

    // Every counter holds its acknowledged increments, read at site A — no longer at
    // a, which the placement leaves out.
    let at_a = runtime.block_on(connect(&grown, "A"));
    runtime.block_on(assert_counted(&at_a, &sites, &groups, &outcomes));
    runtime.block_on(async {
        let group = &groups[0];
        let written = increment(&at_a, group, "after").await.expect("a write");
        let read = current_read_until(&at_a, group, &row(group, "after"), |_| true).await;
        assert_ne!(
            read.replica,
            ReplicaId(1),
            "read at a, which left: {read:?}"
        );
        assert_eq!(counter_value(read.rows.into_iter().next()), written);
        // A reader at C still reads locally at e.
        let at_c = connect(&grown, "C").await;
        let read = current_read_until(&at_c, group, &row(group, "after"), |r| {
            r.path == ReadPath::LocalVouched
        })
        .await;
        assert_eq!(read.replica, ReplicaId(5));
        assert_eq!(counter_value(read.rows.into_iter().next()), written);
    });

    // a's coordinator, let go on with its old placement, took its lock again and read
    // the placement before vouching: even validated, it vouches for none of the
    // group's range (a validate it took would make it vouch).
    runtime.block_on(async {
        use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
        use megastore_paxos::Message;
        use megastore_types::{NodeId, Position};
        let peers = megastore_rpc::Peers::new(&grown).expect("peers");
        let a = NodeId::Coordinator(ReplicaId(1));
        let ask = |request| {
            let peers = &peers;
            async move {
                match peers.request(a, Message::CoordinatorRequest(request)).await {
                    Some(Message::CoordinatorReply(CoordinatorReply::Query {
                        vouched,
                        epoch,
                        ..
                    })) => Some((vouched, epoch)),
                    _ => None,
                }
            }
        };
        let query = || CoordinatorRequest::Query {
            id: 1,
            eg: groups[0].clone(),
        };
        let started = Instant::now();
        let epoch = loop {
            if let Some((_, Some(epoch))) = ask(query()).await {
                break epoch;
            }
            assert!(started.elapsed() < LIMIT, "a's coordinator holds no lock");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let validate = CoordinatorRequest::Validate {
            eg: groups[0].clone(),
            position: Position(1_000_000),
            epoch,
        };
        let _ = peers
            .request(a, Message::CoordinatorRequest(validate))
            .await;
        let answer = ask(query()).await;
        assert_eq!(
            answer.map(|(vouched, _)| vouched),
            Some(false),
            "a's coordinator vouches for a range its replica left"
        );
    });

    // The removal is a voter change of every range: caught up like a witness's.
    let listed = cli(&["range", "list"]).stdout;
    assert!(listed.contains("voter changes not caught up"), "{listed}");
    until(&cli, &["range", "catch-up"], |out| out.status.success());
    let again = cli(&["range", "remove-replica", "a"]);
    assert!(
        again.status.success() && again.stdout.contains("was removed already"),
        "{again:?}"
    );
}
