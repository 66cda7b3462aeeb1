//! Users and roles on the public API (`[auth] require_users`), against real processes
//! through gRPC and the `megastore user|role` commands:
//! - a user from Python (grpcio) reaches its group, and another's is refused;
//! - two users write their own prefixes concurrently while a full replica is killed
//!   (SIGKILL); every acknowledged write is there exactly once;
//! - one user cannot read or write the other's rows by any path (untyped, typed,
//!   versioned primitives, index scans, watches, queues, two-phase commit, locks and
//!   leased keys, another's transaction handle), and the other's data is unchanged;
//! - a revoked grant stops the user's calls within the stated bound, and a transaction
//!   staged before the revocation cannot commit;
//! - a user's open transactions are bounded; denials are in the audit file;
//! - with mutual TLS, a client certificate names a user, or the operator
//!   (`users_tls`).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_e2e::{LocalCluster, run_megastore};
use megastore_rpc::pb::client as pb;
use tonic::{Code, Request};

use crate::support::api_at;

pub(crate) const OPERATOR: &str = "operator-token-for-users-0123456789";

/// `message` carrying `token` as `authorization: Bearer <token>`.
pub(crate) fn bearer<T>(message: T, token: &str) -> Request<T> {
    megastore_rpc::with_operator_token(message, Some(token))
}

/// `megastore ARGS --config CONFIG`, which must succeed; its output.
pub(crate) fn cli(dir: &Path, config: &str, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--config", config]);
    let done = run_megastore(&all, dir, Duration::from_secs(60));
    assert!(done.status.success(), "megastore {all:?}: {done:?}");
    done.stdout
}

/// The token `megastore user add` printed.
pub(crate) fn token_in(out: &str) -> String {
    out.lines()
        .find(|l| l.starts_with("mst_"))
        .unwrap_or_else(|| panic!("no token in {out}"))
        .to_string()
}

pub(crate) fn int64(v: i64) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Int64(v)),
    }
}

pub(crate) fn string(v: &str) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::String(v.into())),
    }
}

pub(crate) fn user_root(id: i64) -> pb::GroupRoot {
    pb::GroupRoot {
        table: "User".into(),
        key: vec![int64(id)],
    }
}

pub(crate) type Api = pb::megastore_client::MegastoreClient<tonic::transport::Channel>;

/// Stages `key`'s column `v` = `value` in transaction `txn`.
pub(crate) fn write_request(txn: u64, key: &str, value: &str) -> pb::WriteRequest {
    pb::WriteRequest {
        txn,
        rows: vec![pb::RowWrite {
            key: key.into(),
            cells: vec![pb::CellWrite {
                column: b"v".to_vec(),
                change: Some(pb::cell_write::Change::Set(value.into())),
            }],
        }],
    }
}

/// Commits `key` = `value` in untyped group `group` as `token`: the committed position.
pub(crate) async fn put(
    api: &mut Api,
    token: &str,
    group: &str,
    key: &str,
    value: &str,
) -> Result<u64, tonic::Status> {
    let txn = api
        .begin(bearer(
            pb::BeginRequest {
                eg: group.into(),
                root: None,
                ..Default::default()
            },
            token,
        ))
        .await?
        .into_inner()
        .txn;
    api.write(bearer(write_request(txn, key, value), token))
        .await?;
    let answer = api
        .commit(bearer(pb::CommitRequest { txn }, token))
        .await?
        .into_inner();
    match answer.outcome {
        Some(pb::commit_response::Outcome::Committed(c)) => Ok(c.position),
        other => Err(tonic::Status::aborted(format!("{other:?}"))),
    }
}

/// The rows of untyped group `group`, read current as `token`: key → value.
pub(crate) async fn rows(
    api: &mut Api,
    token: &str,
    group: &str,
) -> Result<Vec<(String, String)>, tonic::Status> {
    let read = api
        .read(bearer(
            pb::ReadRequest {
                eg: group.into(),
                mode: pb::ReadMode::Current as i32,
                query: Some(pb::RowQuery {
                    query: Some(pb::row_query::Query::Range(pb::row_query::Range::default())),
                }),
            },
            token,
        ))
        .await?
        .into_inner();
    Ok(read
        .rows
        .into_iter()
        .map(|r| {
            let value = r
                .cells
                .iter()
                .find(|c| c.column == b"v")
                .map(|c| String::from_utf8_lossy(&c.value).into_owned())
                .unwrap_or_default();
            (String::from_utf8_lossy(&r.key).into_owned(), value)
        })
        .collect())
}

/// Waits (bounded) until `token` may read `group`: the replica has read the user.
pub(crate) async fn until_served(api: &mut Api, token: &str, group: &str) {
    let started = Instant::now();
    loop {
        match rows(api, token, group).await {
            Ok(_) => return,
            Err(e) => assert!(
                started.elapsed() < Duration::from_secs(30),
                "{group} never served to its user: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The cluster of these tests: the operator token, an audit file, users required, and
/// at most `per_user` open transactions per user.
pub(crate) fn start(dir: &Path, per_user: u32, extra: impl FnOnce(&Path) -> Extra) -> LocalCluster {
    LocalCluster::start_configured(dir, |path| {
        let folder = path.parent().unwrap();
        std::fs::write(folder.join("operator.token"), format!("{OPERATOR}\n")).unwrap();
        let extra = extra(path);
        let mut text = std::fs::read_to_string(path).unwrap();
        text.push_str(&extra.sections);
        text.push_str(&format!(
            "\n[auth]\noperator_token_file = \"operator.token\"\naudit_file = \"audit.jsonl\"\nrequire_users = true\n{}\n[gateway]\nopen_txns_per_user = {per_user}\n",
            extra.auth
        ));
        std::fs::write(path, text).unwrap();
    })
}

/// What a test adds to the config [`start`] writes.
#[derive(Default)]
pub(crate) struct Extra {
    /// Whole sections (`[tls]`).
    pub(crate) sections: String,
    /// Lines of `[auth]`.
    pub(crate) auth: String,
}

/// Asserts `result` was refused with `code`.
#[track_caller]
pub(crate) fn refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, tonic::Status>,
    code: Code,
) {
    match result {
        Err(status) if status.code() == code => {}
        other => panic!("{what}: expected {code:?}, got {other:?}"),
    }
}

#[test]
fn a_user_reaches_only_what_its_roles_grant_by_every_path() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), 4, |_| Extra::default());
    let config_path = cluster.config_path.to_str().unwrap().to_string();
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    let cfg = config_path.as_str();
    crate::support::apply_schema(cfg, "schema/photos.msdl", dir.path());

    // The operator makes two roles and two users.
    cli(dir.path(), cfg, &["role", "add", "alice-rw"]);
    for (access, resource) in [
        ("write", "groups:alice/"),
        ("write", "table:User"),
        ("write", "table:Photo"),
        ("write", "locks:alice/"),
    ] {
        cli(
            dir.path(),
            cfg,
            &["role", "grant", "alice-rw", access, resource],
        );
    }
    cli(dir.path(), cfg, &["role", "add", "bob-rw"]);
    cli(
        dir.path(),
        cfg,
        &["role", "grant", "bob-rw", "write", "groups:bob/"],
    );
    cli(
        dir.path(),
        cfg,
        &["role", "grant", "bob-rw", "write", "locks:bob/"],
    );
    let alice = token_in(&cli(dir.path(), cfg, &["user", "add", "alice"]));
    let bob = token_in(&cli(dir.path(), cfg, &["user", "add", "bob"]));
    cli(dir.path(), cfg, &["user", "grant", "alice", "alice-rw"]);
    cli(dir.path(), cfg, &["user", "grant", "bob", "bob-rw"]);
    let listed = cli(dir.path(), cfg, &["user", "list"]);
    assert!(
        listed.contains("alice: by token; roles: alice-rw"),
        "{listed}"
    );
    assert!(
        !listed.contains(&alice),
        "the token is never shown again: {listed}"
    );
    let roles = cli(dir.path(), cfg, &["role", "list"]);
    assert!(roles.contains("write groups:alice/"), "{roles}");
    let status = cli(dir.path(), cfg, &["status"]);
    assert!(status.contains("public API: users only"), "{status}");

    let a = config.replica("a").unwrap().address.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut api = api_at(&a);
        until_served(&mut api, &alice, "alice/1").await;
        until_served(&mut api, &bob, "bob/1").await;

        // No credential, or one that is no user's: not served at all.
        refused(
            "no token",
            api.read(pb::ReadRequest {
                eg: b"alice/1".to_vec(),
                mode: pb::ReadMode::Current as i32,
                query: None,
            })
            .await,
            Code::Unauthenticated,
        );
        refused(
            "a made-up token",
            rows(&mut api, "mst_0000", "alice/1").await,
            Code::Unauthenticated,
        );
    });

    // The same from Python's grpcio: the token in each call's metadata.
    let python = megastore_e2e::python_with_grpc();
    let root = megastore_e2e::repo_root();
    let mut child = std::process::Command::new(python)
        .arg(root.join("tests/python/users_client.py"))
        .args([root.to_str().unwrap(), &a, &alice, &bob])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let Some(exit) =
        wait_timeout::ChildExt::wait_timeout(&mut child, Duration::from_secs(120)).unwrap()
    else {
        let _ = child.kill();
        panic!("the Python user did not finish within 2 minutes");
    };
    let output = child.wait_with_output().unwrap();
    assert!(
        exit.success() && String::from_utf8_lossy(&output.stdout).trim() == "ok",
        "python: {output:?}"
    );

    // Both users write their own groups concurrently while full replica b is killed;
    // meanwhile bob keeps trying alice's group and is refused every time.
    let committed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = [("alice", alice.clone()), ("bob", bob.clone())]
        .into_iter()
        .map(|(name, token)| {
            let a = a.clone();
            let committed = std::sync::Arc::clone(&committed);
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                runtime.block_on(async {
                    let mut api = api_at(&a);
                    let mut acknowledged = BTreeSet::new();
                    let started = Instant::now();
                    for i in 0..40 {
                        if started.elapsed() > Duration::from_secs(60) {
                            break;
                        }
                        let key = format!("k{i:03}");
                        if put(&mut api, &token, &format!("{name}/w"), &key, &key)
                            .await
                            .is_ok()
                        {
                            acknowledged.insert(key);
                            committed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        if name == "bob" {
                            refused(
                                "bob writing alice's group",
                                put(&mut api, &token, "alice/w", "intruder", "x").await,
                                Code::PermissionDenied,
                            );
                        }
                    }
                    acknowledged
                })
            })
        })
        .collect();
    // Killed mid-run: once both have committed some.
    let started = Instant::now();
    while committed.load(std::sync::atomic::Ordering::Relaxed) < 10 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no writes commit"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster.process("replica-b").kill();
    let at_kill = committed.load(std::sync::atomic::Ordering::Relaxed);
    let acknowledged: Vec<BTreeSet<String>> =
        writers.into_iter().map(|w| w.join().unwrap()).collect();
    cluster.start_process("replica-b");
    let total: usize = acknowledged.iter().map(BTreeSet::len).sum();
    assert!(
        total > at_kill + 10,
        "writes stopped with replica b: {total} of which {at_kill} before"
    );

    runtime.block_on(async {
        let mut api = api_at(&a);
        for ((name, token), acked) in [("alice", &alice), ("bob", &bob)].iter().zip(&acknowledged) {
            assert!(
                acked.len() >= 20,
                "{name}: only {} writes acknowledged",
                acked.len()
            );
            let stored = rows(&mut api, token, &format!("{name}/w")).await.unwrap();
            let keys: Vec<&String> = stored.iter().map(|(k, _)| k).collect();
            let unique: BTreeSet<&String> = keys.iter().copied().collect();
            assert_eq!(keys.len(), unique.len(), "{name}: a write twice");
            for key in acked.iter() {
                assert!(unique.contains(&key), "{name}: acknowledged {key} is lost");
            }
            assert!(
                unique.iter().all(|k| k.starts_with('k')),
                "{name}: {keys:?}"
            );
        }

        crate::users_paths::every_path_is_refused(&mut api, &alice, &bob).await;
        revocation_and_bounds(&mut api, dir.path(), cfg, &alice).await;
    });

    // The denials are in the audit file, naming the user.
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let denied_bob = audit.lines().any(|l| {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        r["who"] == "user bob" && r["outcome"] == "denied"
    });
    assert!(denied_bob, "no denial of bob in the audit file");
}

/// A revoked grant stops alice within the bound, and her transaction staged before it
/// cannot commit; a user's open transactions are bounded.
async fn revocation_and_bounds(api: &mut Api, dir: &Path, cfg: &str, alice: &str) {
    let staged = api
        .begin(bearer(
            pb::BeginRequest {
                eg: b"alice/2".to_vec(),
                root: None,
                ..Default::default()
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner()
        .txn;
    api.write(bearer(write_request(staged, "late", "x"), alice))
        .await
        .unwrap();
    // A watch open before the revocation: it delivers alice's change now, and is cut
    // off at the first change after.
    let mut watch = api
        .watch(bearer(
            pb::WatchRequest {
                eg: b"alice/3".to_vec(),
                keys: Some(pb::watch_request::Keys::Range(
                    pb::row_query::Range::default(),
                )),
                from_position: 0,
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner();
    put(api, alice, "alice/3", "k", "before").await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
    assert!(
        matches!(seen, Ok(Ok(Some(_)))),
        "the watch saw no change: {seen:?}"
    );
    cli(
        dir,
        cfg,
        &["role", "revoke", "alice-rw", "write", "groups:alice/"],
    );
    let revoked = Instant::now();
    loop {
        match rows(api, alice, "alice/1").await {
            Err(e) if e.code() == Code::PermissionDenied => break,
            other => {
                // The stated bound is one refresh (1 s) after the edit lands; allow
                // for a loaded machine.
                assert!(
                    revoked.elapsed() < Duration::from_secs(3),
                    "still served {:?} after the revocation: {other:?}",
                    revoked.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    put(api, OPERATOR, "alice/3", "k", "after").await.unwrap();
    let cut = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
    match cut {
        Ok(Err(e)) if e.code() == Code::PermissionDenied => {}
        other => panic!("a revoked user's watch went on: {other:?}"),
    }
    refused(
        "Commit staged before the revocation",
        api.commit(bearer(pb::CommitRequest { txn: staged }, alice))
            .await,
        Code::PermissionDenied,
    );
    let stored = rows(api, OPERATOR, "alice/2").await.unwrap();
    assert!(
        stored.is_empty(),
        "a write of a revoked user landed: {stored:?}"
    );
    // Her table grants still hold.
    let typed = api
        .begin(bearer(
            pb::BeginRequest {
                eg: vec![],
                root: Some(user_root(1)),
                ..Default::default()
            },
            alice,
        ))
        .await;
    assert!(typed.is_ok(), "{typed:?}");

    // At most 4 open transactions per user ([gateway] open_txns_per_user): a new user
    // (bob's may be open still, from writes cut short by the kill), with bob's role.
    let carol = token_in(&cli(dir, cfg, &["user", "add", "carol"]));
    cli(dir, cfg, &["user", "grant", "carol", "bob-rw"]);
    until_served(api, &carol, "bob/1").await;
    for _ in 0..4 {
        api.begin(bearer(
            pb::BeginRequest {
                eg: b"bob/1".to_vec(),
                root: None,
                ..Default::default()
            },
            &carol,
        ))
        .await
        .unwrap();
    }
    let fifth = api
        .begin(bearer(
            pb::BeginRequest {
                eg: b"bob/1".to_vec(),
                root: None,
                ..Default::default()
            },
            &carol,
        ))
        .await;
    match fifth {
        Err(e)
            if e.code() == Code::ResourceExhausted
                && e.message().contains("open_txns_per_user") => {}
        other => panic!("a fifth open transaction: {other:?}"),
    }
    // Others are not held to carol's bound.
    let operator = api
        .begin(bearer(
            pb::BeginRequest {
                eg: b"bob/1".to_vec(),
                root: None,
                ..Default::default()
            },
            OPERATOR,
        ))
        .await;
    assert!(operator.is_ok(), "{operator:?}");

    // Read access reads, and writes nothing, not even a fence.
    cli(dir, cfg, &["role", "add", "alice-ro"]);
    cli(
        dir,
        cfg,
        &["role", "grant", "alice-ro", "read", "groups:alice/"],
    );
    let dave = token_in(&cli(dir, cfg, &["user", "add", "dave"]));
    cli(dir, cfg, &["user", "grant", "dave", "alice-ro"]);
    until_served(api, &dave, "alice/1").await;
    refused(
        "a reader's write",
        put(api, &dave, "alice/1", "k", "dave's").await,
        Code::PermissionDenied,
    );
    let assert = |condition| pb::VersionedTxnRequest {
        eg: b"alice/1".to_vec(),
        asserts: vec![pb::Assert {
            key: b"vk".to_vec(),
            condition: Some(condition),
        }],
        mutations: vec![],
    };
    let checked = api
        .versioned_txn(bearer(assert(pb::assert::Condition::Version(1)), &dave))
        .await;
    assert!(checked.is_ok(), "a reader's version check: {checked:?}");
    refused(
        "a reader's fence, which would raise it",
        api.versioned_txn(bearer(assert(pb::assert::Condition::FenceToken(7)), &dave))
            .await,
        Code::PermissionDenied,
    );
}
