//! Watches, from outside: a gRPC watcher of a group's versioned keys while three
//! writers race on them and the replica it watches through is SIGKILLed. It resumes at
//! another replica from the last position it got. A second watcher, through the Rust
//! library at the killed replica's site, goes on by itself. Every acknowledged write must show up
//! exactly once, each key's versions without a gap, and the last value of each key must
//! be what a snapshot reads. Then a watch from the group's first position, long since
//! truncated, is refused as collected; and a library watch of a range of untyped keys
//! sees exactly the writes inside the range.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use megastore_client::{ClientError, Mutation, TxnResult};
use megastore_rowstore::KeyRange;
use megastore_rpc::pb::client as pb;
use megastore_types::{EgId, Position};

use crate::support::{api_at, connect, replica_address};

const GROUP: &[u8] = b"watched";
const KEYS: usize = 4;
const WRITERS: usize = 3;
/// How long the writers run (the kill lands at a third of it).
const LOAD: Duration = Duration::from_secs(9);
/// Log entries the replicas keep below what all have applied (small, so that the
/// group's first positions are collected within the test).
const LOG_POSITIONS: u64 = 16;

fn key(i: usize) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

/// The acknowledged writes: key → version → value.
type Acknowledged = BTreeMap<Vec<u8>, BTreeMap<u64, Vec<u8>>>;

/// One change a watcher received: the position, the key, its version and value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    position: u64,
    key: Vec<u8>,
    version: u64,
    value: Option<Vec<u8>>,
}

/// Checks a watcher's history against the acknowledged writes (`key → version →
/// value`) and the final state (`key → (version, value)`): positions never go back or
/// repeat across messages, each key's versions run 1, 2, 3… with no gap or repeat up to
/// its final version, and every acknowledged write is there with its value.
fn check_history(
    seen: &[Seen],
    acknowledged: &Acknowledged,
    last: &BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>,
) -> Result<(), String> {
    let mut previous_position = 0;
    type Watched<'a> = Vec<(u64, &'a Option<Vec<u8>>)>;
    let mut versions: BTreeMap<&[u8], Watched<'_>> = BTreeMap::new();
    for s in seen {
        if s.position < previous_position {
            return Err(format!("position {} after {previous_position}", s.position));
        }
        previous_position = s.position;
        versions
            .entry(&s.key)
            .or_default()
            .push((s.version, &s.value));
    }
    for (key, (final_version, final_value)) in last {
        let got = versions.get(key.as_slice()).cloned().unwrap_or_default();
        let numbers: Vec<u64> = got.iter().map(|(v, _)| *v).collect();
        let expected: Vec<u64> = (1..=*final_version).collect();
        if numbers != expected {
            let first_wrong = numbers
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(numbers.len().min(expected.len()));
            return Err(format!(
                "key {}: {} versions watched, expected 1..={final_version}; from the {}th on: \
                 {:?}",
                String::from_utf8_lossy(key),
                numbers.len(),
                first_wrong + 1,
                &numbers[first_wrong..numbers.len().min(first_wrong + 5)]
            ));
        }
        if got.last().map(|(_, v)| *v) != Some(final_value).filter(|_| *final_version > 0) {
            return Err(format!(
                "key {}: last value watched differs from the snapshot's",
                String::from_utf8_lossy(key)
            ));
        }
        for (version, value) in acknowledged.get(key).into_iter().flatten() {
            if got.iter().find(|(v, _)| v == version).map(|(_, v)| *v) != Some(&Some(value.clone()))
            {
                return Err(format!(
                    "key {}: acknowledged version {version} not watched with its value",
                    String::from_utf8_lossy(key)
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn the_history_check_catches_a_gap_a_repeat_and_a_lost_write() {
    let seen = |position, version, value: &str| Seen {
        position,
        key: key(0),
        version,
        value: Some(value.as_bytes().to_vec()),
    };
    let acknowledged = BTreeMap::from([(
        key(0),
        BTreeMap::from([(1, b"x".to_vec()), (2, b"y".to_vec())]),
    )]);
    let last = BTreeMap::from([(key(0), (2, Some(b"y".to_vec())))]);
    let good = [seen(3, 1, "x"), seen(5, 2, "y")];
    assert_eq!(check_history(&good, &acknowledged, &last), Ok(()));
    let gap = [seen(5, 2, "y")];
    assert!(check_history(&gap, &acknowledged, &last).is_err());
    let repeat = [seen(3, 1, "x"), seen(3, 1, "x"), seen(5, 2, "y")];
    assert!(check_history(&repeat, &acknowledged, &last).is_err());
    let backwards = [seen(5, 1, "x"), seen(3, 2, "y")];
    assert!(check_history(&backwards, &acknowledged, &last).is_err());
    let wrong_value = [seen(3, 1, "x"), seen(5, 2, "z")];
    assert!(check_history(&wrong_value, &acknowledged, &last).is_err());
}

/// Watches the group's versioned keys through the public API of the replicas at
/// `addresses`, in turn: from the first, then, whenever a stream breaks, from the next,
/// resuming after the last position received. Stops once it has passed `target` (set
/// when the writers are done), or at `deadline`. Each break: the position it resumed
/// from, and why.
async fn watch_through(
    addresses: Vec<String>,
    seen: Arc<Mutex<Vec<Seen>>>,
    target: Arc<Mutex<Option<u64>>>,
    deadline: Instant,
) -> Vec<(u64, String)> {
    let mut breaks = Vec::new();
    let mut from = 0;
    let mut at = 0;
    'watch: while Instant::now() < deadline {
        let mut api = api_at(&addresses[at % addresses.len()]);
        let request = pb::WatchRequest {
            eg: GROUP.to_vec(),
            keys: Some(pb::watch_request::Keys::KeyPrefix(b"k".to_vec())),
            from_position: from,
        };
        let mut stream = match api.watch(request).await {
            Ok(stream) => stream.into_inner(),
            Err(e) => {
                breaks.push((from, format!("watch at {at} refused: {e}")));
                at += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            if target.lock().unwrap().is_some_and(|t| from > t) {
                break 'watch;
            }
            let next = tokio::time::timeout(Duration::from_millis(500), stream.message()).await;
            match next {
                Ok(Ok(Some(message))) => {
                    for change in message.changes {
                        for entry in change.entries {
                            seen.lock().unwrap().push(Seen {
                                position: message.position,
                                key: entry.key,
                                version: entry.version,
                                value: entry.value,
                            });
                        }
                    }
                    from = message.position + 1;
                }
                // Quiet: look at the target again.
                Err(_) => {}
                // The stream broke (its replica died): resume at the next one.
                Ok(other) => {
                    breaks.push((from, format!("watch at {at} broke: {other:?}")));
                    at += 1;
                    continue 'watch;
                }
            }
        }
    }
    breaks
}

#[test]
fn a_watcher_resumes_at_another_replica_with_no_gap_and_no_repeat() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = megastore_e2e::LocalCluster::start_configured(dir.path(), |path| {
        let mut text = std::fs::read_to_string(path).unwrap();
        text += &format!("\n[history]\nlog_positions = {LOG_POSITIONS}\n");
        std::fs::write(path, text).unwrap();
    });
    let config = megastore_config::ClusterConfig::load(&cluster.config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let eg = megastore_client::group(GROUP).unwrap();
    let client = runtime.block_on(connect(&config, "B"));
    // The group exists before the watcher starts (retried while coordinators start).
    runtime.block_on(async {
        let started = Instant::now();
        while let Err(e) = client
            .versioned_txn(
                &eg,
                &[],
                &[Mutation::Put {
                    key: key(0),
                    value: b"first".to_vec(),
                }],
            )
            .await
        {
            assert!(started.elapsed() < Duration::from_secs(30), "{e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let acknowledged: Arc<Mutex<Acknowledged>> = Arc::default();
    acknowledged
        .lock()
        .unwrap()
        .entry(key(0))
        .or_default()
        .insert(1, b"first".to_vec());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let target: Arc<Mutex<Option<u64>>> = Arc::default();
    let watcher = runtime.spawn(watch_through(
        vec![replica_address(&config, "a"), replica_address(&config, "b")],
        Arc::clone(&seen),
        Arc::clone(&target),
        Instant::now() + LOAD + Duration::from_secs(40),
    ));
    // A second watcher, through the Rust library at site A: its own site's replica,
    // where its long polls wait, is the one killed.
    let library_seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let library_watcher =
        {
            let (seen, target) = (Arc::clone(&library_seen), Arc::clone(&target));
            let at_a = runtime.block_on(connect(&config, "A"));
            let eg = eg.clone();
            runtime.spawn(async move {
                let deadline = Instant::now() + LOAD + Duration::from_secs(40);
                let mut errors = Vec::new();
                let mut watch = at_a.watch_keys(&eg, b"k", Position(1)).unwrap();
                while Instant::now() < deadline {
                    if target
                        .lock()
                        .unwrap()
                        .is_some_and(|t| watch.resume_at().0 > t)
                    {
                        break;
                    }
                    match tokio::time::timeout(Duration::from_millis(500), watch.next()).await {
                        Ok(Ok(event)) => seen.lock().unwrap().extend(
                            event.changes.into_iter().map(|(_, entry)| Seen {
                                position: event.position.0,
                                key: entry.key,
                                version: entry.version,
                                value: entry.value,
                            }),
                        ),
                        // An error ends the watch; a new one resumes where it stood.
                        Ok(Err(e)) => {
                            errors.push(e.to_string());
                            watch = at_a.watch_keys(&eg, b"k", watch.resume_at()).unwrap();
                        }
                        Err(_) => {}
                    }
                }
                errors
            })
        };
    let stop = Instant::now() + LOAD;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (client, eg, acknowledged) =
                (client.clone(), eg.clone(), Arc::clone(&acknowledged));
            runtime.spawn(async move {
                let mut n = 0;
                while Instant::now() < stop {
                    n += 1;
                    let k = key((w + n) % KEYS);
                    let value = format!("w{w}-{n}").into_bytes();
                    let put = Mutation::Put {
                        key: k.clone(),
                        value: value.clone(),
                    };
                    // An error is no acknowledgment (it may still have committed: the
                    // version check covers it either way).
                    if let Ok(TxnResult::Applied { versions }) =
                        client.versioned_txn(&eg, &[], &[put]).await
                    {
                        acknowledged
                            .lock()
                            .unwrap()
                            .entry(k.clone())
                            .or_default()
                            .insert(versions[&k], value);
                    }
                }
            })
        })
        .collect();
    // The fault: the replica the watcher reads through dies.
    std::thread::sleep(LOAD / 3);
    cluster.process("replica-a").kill();
    for writer in writers {
        runtime.block_on(writer).unwrap();
    }
    cluster.start_process("replica-a");
    // The final state, and the position it was read at: the watcher stops past it.
    let keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
    let (last, at) = runtime.block_on(async {
        let entries = client.snapshot(&eg, &keys).await.unwrap();
        let read = client
            .read(
                &eg,
                megastore_paxos::ReadMode::Current,
                megastore_paxos::DataQuery::Rows(vec![b"-".to_vec()]),
            )
            .await
            .unwrap();
        let last: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> = entries
            .into_iter()
            .map(|e| (e.key, (e.version, e.value)))
            .collect();
        (last, read.position.unwrap().0)
    });
    *target.lock().unwrap() = Some(at);
    let breaks = runtime.block_on(watcher).unwrap();
    let library_errors = runtime.block_on(library_watcher).unwrap();
    let seen = seen.lock().unwrap().clone();
    let acknowledged = acknowledged.lock().unwrap().clone();
    let acks: usize = acknowledged.values().map(BTreeMap::len).sum();
    assert!(acks >= 30, "too few acknowledged writes to tell: {acks}");
    assert!(
        breaks.iter().any(|(from, _)| *from > 1),
        "the kill never broke the watcher's stream mid-way: {breaks:?}"
    );
    if let Err(e) = check_history(&seen, &acknowledged, &last) {
        panic!(
            "{e}\n{} changes watched, {acks} acknowledged, last position {at}, breaks {breaks:?}",
            seen.len()
        );
    }
    // It rode through the kill of its site's replica without an error.
    assert!(library_errors.is_empty(), "{library_errors:?}");
    let library_seen = library_seen.lock().unwrap().clone();
    if let Err(e) = check_history(&library_seen, &acknowledged, &last) {
        panic!(
            "library watcher at site A: {e}\n{} changes watched, errors {library_errors:?}",
            library_seen.len()
        );
    }

    // The group's first positions are long gone from every replica's log (once the
    // restarted replica has caught up and a sweep has truncated): a watch from 1 is
    // refused, naming the position.
    runtime.block_on(async {
        let address = replica_address(&config, "b");
        let started = Instant::now();
        loop {
            let mut api = api_at(&address);
            let request = pb::WatchRequest {
                eg: GROUP.to_vec(),
                keys: Some(pb::watch_request::Keys::KeyPrefix(Vec::new())),
                from_position: 1,
            };
            let first = match api.watch(request).await {
                Ok(stream) => stream.into_inner().message().await,
                Err(status) => Err(status),
            };
            match first {
                Err(status) if status.code() == tonic::Code::OutOfRange => {
                    assert!(
                        status.message().contains("position p1 ")
                            && status.message().contains("collected"),
                        "{status:?}"
                    );
                    break;
                }
                other => {
                    // Position 1 is still kept somewhere: it must be the first write.
                    if let Ok(Some(message)) = &other {
                        assert_eq!(message.position, 1, "{other:?}");
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "position 1 never collected: {other:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
        let mut watch = client
            .watch_keys(&eg, b"", Position(1))
            .expect("a valid watch");
        assert!(matches!(
            watch.next().await,
            Err(ClientError::Collected {
                asked: Position(1),
                ..
            })
        ));
    });

    // A range watch of untyped keys sees the writes inside the range, in order, and
    // nothing else.
    runtime.block_on(range_watch(
        &client,
        &megastore_client::group(b"rows").unwrap(),
    ));

    // The CLI prints the same changes, one line per key.
    let out = megastore_e2e::run_megastore(
        &[
            "watch",
            "--config",
            cluster.config_path.to_str().unwrap(),
            "--group",
            "rows",
            "--start",
            "m",
            "--end",
            "n",
            "--from",
            "1",
            "--count",
            "2",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(
        lines[0].contains("  m1  c=v1") && lines[1].contains("  m2  c=v3"),
        "{lines:?}"
    );

    // `megastore bench --watches` times each change from its commit to the watcher,
    // every change watched once (it fails otherwise), from site A to site B.
    let out = megastore_e2e::run_megastore(
        &[
            "bench",
            "--watches",
            "--runs",
            "20",
            "--config",
            cluster.config_path.to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(
        (
            report["writer_site"].as_str(),
            report["watcher_site"].as_str()
        ),
        (Some("A"), Some("B")),
        "{report}"
    );
    let delivery = &report["kinds"][1];
    assert!(
        delivery["kind"].as_str().unwrap().starts_with("delivery"),
        "{report}"
    );
    assert_eq!(delivery["count"], 20, "every change timed once: {report}");

    // Bad requests are refused at once, naming the field.
    runtime.block_on(async {
        let mut api = api_at(&replica_address(&config, "b"));
        let range = |start: &[u8], end: &[u8]| {
            Some(pb::watch_request::Keys::Range(pb::row_query::Range {
                start: start.to_vec(),
                end: end.to_vec(),
                limit: 0,
            }))
        };
        let too_long = vec![7; 20_000];
        for (keys, field) in [
            (None, "keys"),
            (range(b"z", b"a"), "range"),
            (range(&too_long, b""), "range.start"),
            (
                Some(pb::watch_request::Keys::KeyPrefix(too_long.clone())),
                "prefix",
            ),
        ] {
            let request = pb::WatchRequest {
                eg: GROUP.to_vec(),
                keys,
                from_position: 0,
            };
            let status = api.watch(request).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(status.message().starts_with(field), "{status:?}");
        }
    });
}

async fn range_watch(client: &megastore_client::Client, eg: &EgId) {
    let write = |key: &str, value: &str| megastore_paxos::RowWrite {
        row: key.as_bytes().to_vec(),
        cells: vec![megastore_paxos::CellWrite::Set {
            column: b"c".to_vec(),
            value: value.as_bytes().to_vec(),
        }],
    };
    let range = KeyRange {
        start: b"m".to_vec(),
        end: Some(b"n".to_vec()),
    };
    let mut watch = client.watch(eg, &range, Position(1)).unwrap();
    for (i, key) in ["a", "m1", "z", "m2", "n"].iter().enumerate() {
        let value = format!("v{i}").into_bytes();
        client
            .transaction(eg, async |txn| txn.set(key.as_bytes(), b"c", &value))
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("a change within 10 s")
            .unwrap();
        for change in event.changes {
            got.extend(change.writes);
        }
    }
    assert_eq!(got, vec![write("m1", "v1"), write("m2", "v3")]);
    // The next change it reports is the next one in the range: the write of `n` (just
    // past the range) was skipped.
    client
        .transaction(eg, async |txn| txn.set(b"m3", b"c", b"v5"))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("a change within 10 s")
        .unwrap();
    assert_eq!(next.position, Position(6), "{next:?}");
    let writes: Vec<_> = next.changes.into_iter().flat_map(|c| c.writes).collect();
    assert_eq!(writes, vec![write("m3", "v5")]);
}
