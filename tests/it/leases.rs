//! Leases, locks with fencing tokens and leased keys, from outside.
//!
//! The fencing test runs three lease holders as Python processes over the public gRPC
//! API. Holder `a` takes the lock and writes a ledger under its token. Then it is
//! paused (SIGSTOP) past its lease. Holders `b` (site B) and `c` (site A) race for the
//! lock: exactly one wins, with a higher token. Then `a` resumes and keeps writing as if
//! it still held the lock. The store must refuse every write `a` makes after the new
//! holder's first one. The group's log, read back through a watch, must show tokens that
//! never go down, and every acknowledged write exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use megastore_client::{KeyEvent, LeaseId};
use megastore_e2e::{Process, python_with_grpc, repo_root};
use megastore_rpc::pb::client as pb;
use megastore_types::Position;
use tonic::Code;

use crate::support::{api_at, connect, replica_address, start_cluster, start_cluster_with};

const LEDGER_GROUP: &[u8] = b"fenced-ledger";
/// Long enough that a test process stalled by a loaded machine keeps its lease (holders
/// renew at a quarter of it).
const TTL_MS: u64 = 2_000;

/// One line a worker printed.
#[derive(Debug, Clone)]
struct Event {
    kind: String,
    token: Option<u64>,
    key: Option<String>,
    result: Option<String>,
    code: Option<String>,
}

fn events(worker: &Process) -> Vec<Event> {
    worker
        .finished_lines()
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            let text = |k: &str| v[k].as_str().map(str::to_string);
            Event {
                kind: text("event").unwrap_or_default(),
                token: v["token"].as_u64(),
                key: text("key"),
                result: text("result"),
                code: text("code"),
            }
        })
        .collect()
}

fn count(events: &[Event], kind: &str, result: Option<&str>) -> usize {
    events
        .iter()
        .filter(|e| e.kind == kind && (result.is_none() || e.result.as_deref() == result))
        .count()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_worker(dir: &std::path::Path, address: &str, name: &str, seconds: u32) -> Process {
    let python = python_with_grpc();
    let script = repo_root().join("tests/python/fenced_worker.py");
    Process::start_program(
        name,
        &python,
        &[
            script.to_str().unwrap(),
            repo_root().to_str().unwrap(),
            address,
            name,
            &TTL_MS.to_string(),
            &seconds.to_string(),
        ],
        dir,
    )
}

/// Checks a ledger as the group's log has it — `(position, key, token)` in log order —
/// against what the workers reported. Returns a description of the first violation.
fn check_ledger(log: &[(u64, String, u64)], reported: &[Event]) -> Result<(), String> {
    let mut highest = 0;
    for (position, key, token) in log {
        if *token < highest {
            return Err(format!(
                "{key} with token {token} applied at position {position}, after token {highest}"
            ));
        }
        highest = *token;
    }
    let mut present = BTreeMap::new();
    for (_, key, token) in log {
        if present.insert(key.clone(), *token).is_some() {
            return Err(format!("{key} applied twice"));
        }
    }
    for event in reported.iter().filter(|e| e.kind == "write") {
        let key = event.key.clone().unwrap_or_default();
        match (event.result.as_deref(), present.get(&key)) {
            (Some("applied"), None) => return Err(format!("acknowledged write {key} is missing")),
            (Some("applied"), Some(token)) if Some(*token) != event.token => {
                return Err(format!("{key} has token {token}, not {:?}", event.token));
            }
            (Some("refused"), Some(_)) => return Err(format!("refused write {key} was applied")),
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn the_ledger_check_catches_a_stale_token_a_repeat_and_a_lost_write() {
    let write = |key: &str, token: u64, result: &str| Event {
        kind: "write".into(),
        token: Some(token),
        key: Some(key.into()),
        result: Some(result.into()),
        code: None,
    };
    let log = vec![(1, "a1".to_string(), 5), (2, "b1".to_string(), 9)];
    let reported = vec![write("a1", 5, "applied"), write("b1", 9, "applied")];
    assert_eq!(check_ledger(&log, &reported), Ok(()));
    let mut stale = log.clone();
    stale.push((3, "a2".into(), 5));
    assert!(
        check_ledger(&stale, &reported)
            .unwrap_err()
            .contains("after token 9")
    );
    let mut repeated = log.clone();
    repeated.push((3, "b1".into(), 9));
    assert!(
        check_ledger(&repeated, &reported)
            .unwrap_err()
            .contains("twice")
    );
    let mut lost = reported.clone();
    lost.push(write("b2", 9, "applied"));
    assert!(check_ledger(&log, &lost).unwrap_err().contains("missing"));
    let refused = vec![write("a1", 5, "refused")];
    assert!(
        check_ledger(&log, &refused)
            .unwrap_err()
            .contains("was applied")
    );
}

#[test]
fn a_paused_lease_holder_cannot_write_with_its_old_token() {
    // The ledger is read back from position 1: keep the whole log.
    let (_alone, dir, _cluster, config, runtime) =
        start_cluster_with("\n[history]\nlog_positions = 100000\n");
    let (at_a, at_b) = (replica_address(&config, "a"), replica_address(&config, "b"));

    let first = start_worker(dir.path(), &at_a, "a", 20);
    wait_until("holder a to write", Duration::from_secs(60), || {
        count(&events(&first), "write", Some("applied")) >= 5
    });
    first.signal("STOP");
    std::thread::sleep(Duration::from_millis(TTL_MS * 5 / 2));

    let b = start_worker(dir.path(), &at_b, "b", 6);
    let c = start_worker(dir.path(), &at_a, "c", 6);
    wait_until("a new holder to write", Duration::from_secs(60), || {
        [&b, &c]
            .iter()
            .any(|w| count(&events(w), "write", Some("applied")) >= 5)
    });
    first.signal("CONT");
    wait_until("holder a to be refused", Duration::from_secs(30), || {
        count(&events(&first), "write", Some("refused")) >= 3
    });
    for worker in [&b, &c] {
        wait_until("the racers to finish", Duration::from_secs(30), || {
            count(&events(worker), "done", None) + count(&events(worker), "no_lock", None) > 0
        });
    }
    let (b, c, a) = (events(&b), events(&c), events(&first));
    drop(first);

    // Exactly one racer won, with a higher token; the other was told who held it.
    let (winner, loser) = if count(&b, "locked", None) > 0 {
        (&b, &c)
    } else {
        (&c, &b)
    };
    assert_eq!(count(winner, "locked", None), 1, "{winner:?}");
    assert_eq!(count(loser, "locked", None), 0, "{loser:?}");
    let refused = loser
        .iter()
        .find(|e| e.kind == "no_lock")
        .expect("the loser gave up");
    assert_eq!(refused.code.as_deref(), Some("FAILED_PRECONDITION"));
    let token_of = |events: &[Event]| {
        events
            .iter()
            .find(|e| e.kind == "locked")
            .and_then(|e| e.token)
    };
    let (old, new) = (token_of(&a).unwrap(), token_of(winner).unwrap());
    assert!(
        new > old,
        "the new holder's token {new} is above the old {old}"
    );
    assert_eq!(
        count(&a, "lease_lost", None),
        1,
        "a learned its lease ended: {a:?}"
    );

    // The store's view: read the ledger's history back through a watch.
    let ledger = runtime.block_on(async {
        let client = connect(&config, "A").await;
        let eg = megastore_client::group(LEDGER_GROUP).unwrap();
        let keys = client.keys(&eg, b"ledger/").await.unwrap();
        let mut watch = client.watch_keys(&eg, b"ledger/", Position(1)).unwrap();
        let mut ledger = Vec::new();
        while ledger.len() < keys.len() {
            let KeyEvent { position, changes } =
                tokio::time::timeout(Duration::from_secs(30), watch.next())
                    .await
                    .expect("the history arrives")
                    .expect("a watch event");
            for (_, entry) in changes {
                let token = String::from_utf8(entry.value.unwrap()).unwrap();
                ledger.push((
                    position.0,
                    String::from_utf8(entry.key).unwrap(),
                    token.parse::<u64>().unwrap(),
                ));
            }
        }
        ledger
    });
    let reported: Vec<Event> = a.iter().chain(winner).cloned().collect();
    check_ledger(&ledger, &reported).unwrap_or_else(|e| panic!("{e}\nledger: {ledger:?}"));
    let holders: BTreeSet<u64> = ledger.iter().map(|(_, _, token)| *token).collect();
    assert_eq!(
        holders,
        BTreeSet::from([old, new]),
        "only the two holders wrote"
    );
}

type Api = pb::megastore_client::MegastoreClient<tonic::transport::Channel>;

/// The names of the leased keys under `members/`.
async fn members(api: &mut Api) -> Vec<String> {
    api.leased_keys(pb::LeasedKeysRequest {
        prefix: "members/".into(),
    })
    .await
    .unwrap()
    .into_inner()
    .keys
    .into_iter()
    .map(|k| k.name)
    .collect()
}

/// The lease API through gRPC: bad input named, keys that vanish with their lease (by
/// revocation and by expiry), a lock's holder and the codes of refusals.
#[test]
fn leases_keys_and_locks_through_the_public_api() {
    let (_alone, _dir, _cluster, config, runtime) = start_cluster();
    let address = replica_address(&config, "a");
    runtime.block_on(async {
        let mut api = api_at(&address);
        let grant = |ttl_ms| pb::LeaseGrantRequest {
            owner: "worker".into(),
            ttl_ms,
        };
        let started = Instant::now();
        let lease = loop {
            match api.lease_grant(grant(TTL_MS)).await {
                Ok(granted) => break granted.into_inner(),
                Err(_) if started.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no lease: {e}"),
            }
        };
        assert_eq!(lease.ttl_ms, TTL_MS);
        // A session of the cluster's own kind (a coordinator's): the public API cannot
        // end or renew it, given its id.
        let lockd = megastore_rpc::LockdClient::new(&config).unwrap();
        let Ok(megastore_lock::LockReply::Session { session, .. }) = lockd
            .execute(megastore_lock::LockCommand::OpenSession {
                owner: "coordinator-like".into(),
            })
            .await
        else {
            panic!("a session");
        };
        let refused = api
            .lease_revoke(pb::LeaseRevokeRequest { lease: session.0 })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::NotFound, "{refused}");
        let refused = api
            .lease_keep_alive(pb::LeaseKeepAliveRequest { lease: session.0 })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::NotFound, "{refused}");
        let alive = lockd
            .execute(megastore_lock::LockCommand::KeepAlive { session })
            .await;
        assert!(
            matches!(alive, Ok(megastore_lock::LockReply::Renewed { .. })),
            "{alive:?}"
        );
        let short = api.lease_grant(grant(10)).await.unwrap_err();
        assert_eq!(short.code(), Code::InvalidArgument, "{short}");
        assert!(short.message().contains("between"), "{short}");

        let other = api.lease_grant(grant(60_000)).await.unwrap().into_inner();
        let put = |lease, name: &str, value: &[u8]| pb::PutLeasedRequest {
            lease,
            name: name.into(),
            value: value.to_vec(),
        };
        api.put_leased(put(lease.lease, "members/a", b"10.0.0.1"))
            .await
            .unwrap();
        api.put_leased(put(other.lease, "members/b", b"10.0.0.2"))
            .await
            .unwrap();
        let too_big = api
            .put_leased(put(other.lease, "members/c", &[0; 5_000]))
            .await
            .unwrap_err();
        assert_eq!(too_big.code(), Code::InvalidArgument, "{too_big}");
        assert_eq!(members(&mut api).await, ["members/a", "members/b"]);

        // A lock: its holder, a refusal naming the holder, release on revocation.
        let lock = |lease| pb::LockRequest {
            lease,
            name: "leader".into(),
        };
        let token = api
            .lock(lock(other.lease))
            .await
            .unwrap()
            .into_inner()
            .fencing_token;
        let held = api.lock(lock(lease.lease)).await.unwrap_err();
        assert_eq!(held.code(), Code::FailedPrecondition, "{held}");
        assert!(
            held.message()
                .contains(&format!("held by lease {}", other.lease)),
            "{held}"
        );
        let not_holder = api
            .unlock(pb::UnlockRequest {
                lease: lease.lease,
                name: "leader".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(not_holder.code(), Code::FailedPrecondition, "{not_holder}");
        assert!(
            not_holder
                .message()
                .contains("does not hold lock \"leader\""),
            "{not_holder}"
        );
        let holder = api
            .lock_holder(pb::LockHolderRequest {
                name: "leader".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .holder
            .unwrap();
        assert_eq!((holder.lease, holder.fencing_token), (other.lease, token));
        api.lease_revoke(pb::LeaseRevokeRequest { lease: other.lease })
            .await
            .unwrap();
        assert_eq!(
            members(&mut api).await,
            ["members/a"],
            "revoked with its lease"
        );
        let next = api
            .lock(lock(lease.lease))
            .await
            .unwrap()
            .into_inner()
            .fencing_token;
        assert!(next > token, "{next} > {token}");

        // Kept alive past its ttl, the lease lives; left alone, it expires with its key.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(TTL_MS / 4)).await;
            let kept = api
                .lease_keep_alive(pb::LeaseKeepAliveRequest { lease: lease.lease })
                .await
                .unwrap();
            assert_eq!(kept.into_inner().ttl_ms, TTL_MS);
        }
        assert_eq!(members(&mut api).await, ["members/a"]);
        tokio::time::sleep(Duration::from_millis(TTL_MS * 2)).await;
        assert_eq!(
            members(&mut api).await,
            Vec::<String>::new(),
            "expired with its lease"
        );
        let ended = api
            .lease_keep_alive(pb::LeaseKeepAliveRequest { lease: lease.lease })
            .await
            .unwrap_err();
        assert_eq!(ended.code(), Code::NotFound, "{ended}");
        assert!(
            ended
                .message()
                .contains(&format!("lease {}", LeaseId(lease.lease))),
            "{ended}"
        );

        // A fence refuses a lower token and raises itself to a higher one.
        let fenced = |token, key: &[u8]| pb::VersionedTxnRequest {
            eg: b"fence-check".to_vec(),
            asserts: vec![pb::Assert {
                key: b"fence".to_vec(),
                condition: Some(pb::assert::Condition::FenceToken(token)),
            }],
            mutations: vec![pb::Mutation {
                key: key.to_vec(),
                change: Some(pb::mutation::Change::Put(b"x".to_vec())),
            }],
        };
        let outcome = |r: pb::VersionedTxnResponse| match r.outcome.unwrap() {
            pb::versioned_txn_response::Outcome::Applied(_) => "applied",
            pb::versioned_txn_response::Outcome::AssertFailed(_) => "refused",
        };
        for (token, expected) in [
            (7, "applied"),
            (7, "applied"),
            (9, "applied"),
            (8, "refused"),
        ] {
            let answer = api
                .versioned_txn(fenced(token, b"k"))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(outcome(answer), expected, "token {token}");
        }
    });
}

/// `megastore lock`: a second holder waits for the first, then runs its command with a
/// higher token; the command's exit code is the tool's; a holder paused past its lease
/// learns it lost the lock, stops its command and fails.
#[test]
fn the_lock_tool_runs_a_command_under_the_lock_and_stops_it_when_the_lock_is_lost() {
    let (_alone, dir, cluster, _config, _runtime) = start_cluster();
    let config = cluster.config_path.to_str().unwrap().to_string();
    let token_of = |text: &str| -> u64 {
        let at = text
            .find("fencing token ")
            .unwrap_or_else(|| panic!("no token in {text}"));
        text[at + 14..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let first = Process::start(
        "first",
        &[
            "lock", "job", "--config", &config, "--ttl-ms", "1000", "--", "sleep", "3",
        ],
        dir.path(),
    );
    wait_until("the first holder", Duration::from_secs(60), || {
        first.finished_lines().iter().any(|l| l.contains("held"))
    });
    let first_token = token_of(&first.finished_lines().join("\n"));
    let second = megastore_e2e::run_megastore(
        &[
            "lock",
            "job",
            "--config",
            &config,
            "--wait-secs",
            "30",
            "--",
            "sh",
            "-c",
            "echo token=$MEGASTORE_FENCING_TOKEN lease=$MEGASTORE_LEASE; exit 3",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    assert_eq!(second.status.code(), Some(3), "{second:?}");
    let second_token = token_of(&second.stdout);
    assert!(
        second
            .stdout
            .contains(&format!("token={second_token} lease=")),
        "{second:?}"
    );
    assert!(second_token > first_token, "{second_token} > {first_token}");
    let bad = megastore_e2e::run_megastore(
        &["lock", "job", "--config", &config, "--ttl-ms", "10"],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(
        !bad.status.success() && bad.stderr.contains("between"),
        "{bad:?}"
    );

    // Paused past its lease, a holder loses the lock to another; resumed, it finds out
    // at its next renewal, stops its command and fails.
    let mut paused = Process::start(
        "paused",
        &[
            "lock", "job", "--config", &config, "--ttl-ms", "1000", "--", "sleep", "60",
        ],
        dir.path(),
    );
    wait_until("the paused holder", Duration::from_secs(60), || {
        paused.log().contains("held")
    });
    paused.signal("STOP");
    let taker = megastore_e2e::run_megastore(
        &[
            "lock",
            "job",
            "--config",
            &config,
            "--wait-secs",
            "30",
            "--",
            "true",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(taker.status.success(), "{taker:?}");
    paused.signal("CONT");
    wait_until(
        "the paused holder to give up",
        Duration::from_secs(30),
        || !paused.running(),
    );
    assert!(paused.log().contains("lost lock job"), "{}", paused.log());
}
