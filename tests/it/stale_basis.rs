//! A blind write's basis is a snapshot read of the local replica, without the
//! coordinator (docs/protocol.md, "A blind write's basis"), through the public gRPC API
//! on real processes. Site B's full replica is stopped while site A commits to a
//! group, then started again: it is behind, and for ten sweeps or so nothing catches it
//! up — its start pass finds the group, first written while it was down, in the other
//! replicas' registries only after 2,560 groups that sort before it, written then too.
//! A blind `Begin` at B takes its stale position; the commit after it loses the positions
//! chosen since (past its commit span: a conflict naming no rows), and the next blind
//! Begin there reads current, which catches b up. Once b's start pass has caught up
//! the fillers too, writers at A and B write the group together, retrying at once,
//! while the two gateways duel for its positions.
//! Checked: B's first basis was stale and the next current; in the duel, every write
//! commits within its attempts and the lost attempts stay few (neither site starves);
//! every committed row is present and no row of an attempt that did not commit.

use std::time::{Duration, Instant};

use megastore_paxos::COMMIT_SPAN;
use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use tonic::transport::Channel;

use crate::support::{api_at, grpc_current_rows, replica_address, start_cluster};

const GROUP: &[u8] = b"stale-basis";
/// Commits at A while b is down: more than a commit span, so a commit after b's
/// position cannot reach a free one.
const WHILE_B_IS_DOWN: u64 = 3 * COMMIT_SPAN + 8;
/// Writers at each site in the second phase, and the writes each makes.
const WRITERS: usize = 3;
const WRITES: usize = 40;
/// Attempts a write gets (a conflict naming no rows is safe to retry).
const ATTEMPTS: usize = 8;
/// Attempts the duel's writers lose in all, at most. Measured on loopback (2 vCPU,
/// debug build, 240 writes): 3–8 when the gateway away from the leader follows it;
/// 27–58 when it did not (and 4 runs in 6 had a write lose all 8 attempts).
const DUEL_LOST_MAX: usize = 40;

fn key(writer: &str, write: usize, attempt: usize) -> Vec<u8> {
    format!("{writer}-{write:03}-{attempt}").into_bytes()
}

/// How one blind attempt ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Committed at this position.
    Committed(u64),
    /// A conflict naming no rows: it lost every position of its span.
    LostItsSpan,
}

/// Groups first written while b is down that sort before the group: its start pass
/// lists the other replicas' registries 256 groups a sweep, so it reaches the group
/// about ten sweeps after it starts.
const FILLERS: usize = 2_560;
/// Concurrent writers of the fillers.
const FILLER_WRITERS: usize = 8;

/// A blind `Begin` of the group at `api`.
async fn begin_blind(
    api: &mut MegastoreClient<Channel>,
) -> Result<pb::BeginResponse, tonic::Status> {
    begin_blind_in(api, GROUP).await
}

/// A blind `Begin` of group `eg` at `api`.
async fn begin_blind_in(
    api: &mut MegastoreClient<Channel>,
    eg: &[u8],
) -> Result<pb::BeginResponse, tonic::Status> {
    let request = pb::BeginRequest {
        eg: eg.to_vec(),
        blind: true,
        ..Default::default()
    };
    api.begin(request).await.map(tonic::Response::into_inner)
}

/// One blind transaction at `api` writing `row`: Begin's position, and how it ended.
async fn blind_attempt(api: &mut MegastoreClient<Channel>, row: Vec<u8>) -> (u64, Ended) {
    blind_attempt_in(api, GROUP, row).await
}

/// One blind transaction of group `eg` at `api` writing `row`.
async fn blind_attempt_in(
    api: &mut MegastoreClient<Channel>,
    eg: &[u8],
    row: Vec<u8>,
) -> (u64, Ended) {
    use pb::commit_response::Outcome;
    let begun = begin_blind_in(api, eg).await.expect("a blind Begin");
    api.write(pb::WriteRequest {
        txn: begun.txn,
        rows: vec![pb::RowWrite {
            key: row,
            cells: vec![pb::CellWrite {
                column: b"n".to_vec(),
                change: Some(pb::cell_write::Change::Set(b"1".to_vec())),
            }],
        }],
    })
    .await
    .expect("a Write");
    let outcome = api
        .commit(pb::CommitRequest { txn: begun.txn })
        .await
        .expect("a Commit answered (every replica is up)")
        .into_inner()
        .outcome;
    let ended = match outcome {
        Some(Outcome::Committed(c)) => Ended::Committed(c.position),
        Some(Outcome::Conflict(c)) => {
            assert!(
                c.keys.is_empty(),
                "a blind write conflicts only by losing its span: {c:?}"
            );
            Ended::LostItsSpan
        }
        other => panic!("a blind commit ended {other:?}"),
    };
    (begun.position, ended)
}

/// Writes `write` of `writer` at `api` until it commits: the attempts that did not.
async fn write_until_committed(
    api: &mut MegastoreClient<Channel>,
    writer: &str,
    write: usize,
) -> (usize, Vec<usize>) {
    let mut lost = Vec::new();
    for attempt in 0..ATTEMPTS {
        match blind_attempt(api, key(writer, write, attempt)).await.1 {
            Ended::Committed(_) => return (attempt, lost),
            Ended::LostItsSpan => lost.push(attempt),
        }
    }
    panic!("{writer}'s write {write} lost its span {ATTEMPTS} times");
}

/// Waits until b's registry lists every filler (each persisted there: caught up).
async fn b_holds_every_filler(config: &megastore_config::ClusterConfig) {
    let b = config.replica("b").expect("replica b");
    let channel = Channel::from_shared(format!("http://{}", b.admin_endpoint()))
        .expect("b's admin address")
        .connect_lazy();
    let mut admin = megastore_rpc::pb::admin::admin_client::AdminClient::new(channel);
    let started = Instant::now();
    loop {
        let listed = admin
            .list_groups(megastore_rpc::pb::admin::ListGroupsRequest {
                start: Vec::new(),
                end: None,
                limit: 10_000,
            })
            .await
            .expect("b lists its groups")
            .into_inner()
            .groups;
        let fillers = listed
            .iter()
            .filter(|eg| eg.windows(7).any(|w| w == b"filler-"))
            .count();
        if fillers == FILLERS {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "b holds {fillers} of {FILLERS} fillers after a minute"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_blind_write_at_a_replica_left_behind_commits_after_one_stale_attempt() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let (at_a, at_b) = (replica_address(&config, "a"), replica_address(&config, "b"));
    let mut committed: Vec<Vec<u8>> = Vec::new();
    let mut not_committed: Vec<Vec<u8>> = Vec::new();

    // b is down while A commits: it misses every accept and visible mark.
    assert!(
        cluster
            .process("replica-b")
            .terminate(Duration::from_secs(10))
    );
    // The fillers first, from eight concurrent writers: each group written once.
    let fillers: Vec<_> = (0..FILLER_WRITERS)
        .map(|w| {
            let at_a = at_a.clone();
            runtime.spawn(async move {
                let mut a = api_at(&at_a);
                for i in (w..FILLERS).step_by(FILLER_WRITERS) {
                    let eg = format!("filler-{i:05}").into_bytes();
                    assert!(eg.as_slice() < GROUP, "a filler sorts before the group");
                    let ended = blind_attempt_in(&mut a, &eg, b"f".to_vec()).await.1;
                    assert!(
                        matches!(ended, Ended::Committed(_)),
                        "filler {i}: {ended:?}"
                    );
                }
            })
        })
        .collect();
    for filler in fillers {
        runtime.block_on(filler).expect("a filler writer");
    }
    let newest = runtime.block_on(async {
        let mut a = api_at(&at_a);
        let mut newest = 0;
        for write in 0..WHILE_B_IS_DOWN as usize {
            let (attempt, lost) = write_until_committed(&mut a, "down", write).await;
            assert!(lost.is_empty(), "nothing else writes the group: {lost:?}");
            committed.push(key("down", write, attempt));
            newest += 1;
        }
        newest
    });
    cluster.start_process("replica-b");
    cluster.wait_for_log("replica-b", "replica serving", Duration::from_secs(30));

    // At B: the first basis is b's stale position; its commit cannot reach a free
    // position within its span; the next Begin reads current and commits.
    let b_committed = runtime.block_on(async {
        let mut b = api_at(&at_b);
        let started = Instant::now();
        let (stale, ended) = loop {
            // b answers once it has read its placement and lock (a moment after it
            // says it serves).
            match begin_blind(&mut b).await {
                Ok(begun) => {
                    let _ = b.abort(pb::AbortRequest { txn: begun.txn }).await;
                    break blind_attempt(&mut b, key("b", 0, 0)).await;
                }
                Err(e) => assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "b does not serve: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            stale + COMMIT_SPAN < newest,
            "b's basis {stale} is not behind the {newest} positions A committed: the test \
             did not leave b behind"
        );
        assert_eq!(ended, Ended::LostItsSpan, "the commit after a stale basis");
        not_committed.push(key("b", 0, 0));
        let (current, ended) = blind_attempt(&mut b, key("b", 0, 1)).await;
        assert!(
            current >= newest,
            "after a stale basis the next Begin reads current: {current} < {newest}"
        );
        let Ended::Committed(position) = ended else {
            panic!("after a current read: {ended:?}");
        };
        committed.push(key("b", 0, 1));
        position
    });

    // b catches up on what it missed (the current read started it). Until then a
    // blind basis at B is stale, and its commits lose their span to a replica left
    // behind, not to the other site's writers.
    runtime.block_on(async {
        let mut b = api_at(&at_b);
        let started = Instant::now();
        loop {
            let begun = begin_blind(&mut b).await.expect("a blind Begin");
            let _ = b.abort(pb::AbortRequest { txn: begun.txn }).await;
            if begun.position >= b_committed {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "b's basis stays at {} behind B's commit at {b_committed}",
                begun.position
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });

    // b's start pass goes on through the fillers' catch-up; the duel waits for it, so
    // that B's writers meet A's, not a replica still catching up 2,560 groups.
    runtime.block_on(b_holds_every_filler(&config));

    // Writers at both sites together, retrying at once after each lost span. B's gateway
    // is the position leader (its commit was the last), so the gateways duel: the one
    // away from the leader loses its span, then follows the leader (docs/protocol.md,
    // "Relayed commits", step 7). Every write still commits, within its attempts;
    // without following, one site's writers lost every attempt while the other's wrote.
    let tasks: Vec<_> = (0..2 * WRITERS)
        .map(|w| {
            let address = if w % 2 == 0 {
                at_a.clone()
            } else {
                at_b.clone()
            };
            let writer = format!("w{w}");
            runtime.spawn(async move {
                let mut api = api_at(&address);
                let (mut done, mut lost) = (Vec::new(), Vec::new());
                for write in 0..WRITES {
                    let (attempt, failed) = write_until_committed(&mut api, &writer, write).await;
                    done.push(key(&writer, write, attempt));
                    lost.extend(failed.into_iter().map(|a| key(&writer, write, a)));
                }
                (done, lost)
            })
        })
        .collect();
    let mut duel_lost = Vec::new();
    for task in tasks {
        let (done, lost) = runtime.block_on(task).expect("a writer");
        committed.extend(done);
        duel_lost.extend(lost);
    }
    not_committed.extend(duel_lost.iter().cloned());

    let rows = runtime.block_on(grpc_current_rows(&at_a, GROUP));
    for row in &committed {
        assert!(
            rows.contains_key(row),
            "{} committed, and is missing",
            String::from_utf8_lossy(row)
        );
    }
    for row in &not_committed {
        assert!(
            !rows.contains_key(row),
            "{} did not commit, and is there",
            String::from_utf8_lossy(row)
        );
    }
    assert_eq!(
        rows.len(),
        committed.len(),
        "no row beyond the committed ones"
    );
    assert!(
        duel_lost.len() <= DUEL_LOST_MAX,
        "the duel's writers lost {} attempts (at most {DUEL_LOST_MAX}): {:?}",
        duel_lost.len(),
        duel_lost
            .iter()
            .map(|row| String::from_utf8_lossy(row).into_owned())
            .collect::<Vec<_>>()
    );
}
