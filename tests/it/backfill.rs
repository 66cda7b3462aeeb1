//! Adding indexes to a populated schema on a real cluster: `schema apply` of a version
//! with a new global (`PhotosByTag`) and local (`PhotosByTime`) index leaves them
//! building (scans refused, `status` says so), and the backfill — stopped after one
//! step, resumed by `megastore schema backfill`, that process killed (SIGKILL) and run
//! again — fills them while clients at two sites keep writing and a full replica is
//! down. Once ready, each index equals the index built from scratch from the
//! acknowledged writes: every entry once, none stale.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use megastore_client::schema_store::load_catalog;
use megastore_client::{Client, IndexQuery, IndexRead};
use megastore_config::ClusterConfig;
use megastore_e2e::{LocalCluster, Process, repo_root, run_megastore};
use megastore_schema::{Catalog, Entity, Value};

use crate::global_index::commit_in;
use crate::support::connect;

const TAGS: [&str; 3] = ["beach", "city", "sunset"];

fn photo(user: i64, id: i32, tags: &[&str]) -> Entity {
    Entity::new("Photo")
        .set("user_id", user)
        .set("photo_id", id)
        .set("time", i64::from(id) * 100)
        .set("full_url", format!("u/{user}/{id}"))
        .set("thumbnail_url", format!("t/{user}/{id}"))
        .set_repeated("tag", tags.iter().copied())
}

fn first_tags(user: i64, id: i32) -> Vec<&'static str> {
    vec![TAGS[(user as usize + id as usize) % TAGS.len()], "all"]
}

/// Every fifth of the first 200 users' photo 1 is retagged `sunset` alone and photo 2
/// deleted in round 2.
fn changed(user: i64) -> bool {
    user % 5 == 0 && user <= 200
}

async fn first_round(client: &Client, catalog: &Catalog, users: impl Iterator<Item = i64>) {
    for user in users {
        let write = move || {
            let mut all = vec![Entity::new("User").set("user_id", user).set("name", "u")];
            all.extend((1..=3).map(|id| photo(user, id, &first_tags(user, id))));
            all
        };
        commit_in(client, catalog, user, write, None).await;
    }
}

async fn second_round(client: &Client, catalog: &Catalog, users: impl Iterator<Item = i64>) {
    for user in users.filter(|u| changed(*u)) {
        let write = move || vec![photo(user, 1, &["sunset"])];
        commit_in(client, catalog, user, write, Some(2)).await;
    }
}

/// The photos the acknowledged writes leave: (user, photo, tags).
fn photos(users: &[i64]) -> Vec<(i64, i32, Vec<&'static str>)> {
    let mut all = Vec::new();
    for &user in users {
        for id in 1..=3 {
            match (changed(user), id) {
                (true, 1) => all.push((user, id, vec!["sunset"])),
                (true, 2) => {}
                _ => all.push((user, id, first_tags(user, id))),
            }
        }
    }
    all
}

/// Every (user, photo) under `tag` at the replica `client` reaches, page by page.
async fn tagged(client: &Client, catalog: &Catalog, tag: &str) -> Result<Vec<(i64, i32)>, String> {
    let mut query = IndexQuery::new("PhotosByTag").equal([tag]).limit(100);
    let mut found = Vec::new();
    loop {
        let page = client
            .scan_global_index(catalog, &query, IndexRead::AsApplied)
            .await
            .map_err(|e| e.to_string())?;
        for e in page.entries {
            match (&e.primary_key[0], &e.primary_key[1]) {
                (Value::Int64(u), Value::Int32(id)) => found.push((*u, *id)),
                other => panic!("a photo key: {other:?}"),
            }
        }
        match page.next {
            Some(token) => query = query.after(token),
            None => return Ok(found),
        }
    }
}

#[test]
fn a_new_index_is_backfilled_while_writes_go_on_and_equals_the_index_built_from_scratch() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path());
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let full = std::fs::read_to_string(repo_root().join("schema/photos.msdl")).unwrap();
    let without = full
        .split("CREATE LOCAL INDEX PhotosByTime")
        .next()
        .unwrap()
        .to_string();
    let v1_path = dir.path().join("photos-v1.msdl");
    let v2_path = dir.path().join("photos-v2.msdl");
    std::fs::write(&v1_path, &without).unwrap();
    std::fs::write(&v2_path, &full).unwrap();
    let apply = |path: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "schema",
            "apply",
            path.to_str().unwrap(),
            "--config",
            &config_arg,
        ];
        args.extend(extra);
        run_megastore(&args, dir.path(), Duration::from_secs(120))
    };
    let applied = apply(&v1_path, &[]);
    assert!(applied.status.success(), "{applied:?}");

    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let lockd = megastore_rpc::LockdClient::new(&config).unwrap();
    let (at_a, at_b) =
        runtime.block_on(async { (connect(&config, "A").await, connect(&config, "B").await) });
    let v1 = runtime.block_on(load_catalog(&lockd)).unwrap().unwrap().0;
    // Round 1, under the schema without the indexes: 200 users, at two sites.
    runtime.block_on(async {
        tokio::join!(
            first_round(&at_a, &v1, 1..=100),
            first_round(&at_b, &v1, 101..=200),
        );
    });

    // The indexes are added, and stay building until backfilled.
    let applied = apply(&v2_path, &["--no-backfill"]);
    assert!(
        applied.status.success()
            && applied
                .stdout
                .contains("building (scans refused until `megastore schema backfill`): PhotosByTime, PhotosByTag"),
        "{applied:?}"
    );
    let v2 = runtime.block_on(load_catalog(&lockd)).unwrap().unwrap().0;
    let refused = runtime
        .block_on(at_a.scan_global_index(
            &v2,
            &IndexQuery::new("PhotosByTag"),
            IndexRead::AsApplied,
        ))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("being backfilled"), "{refused}");
    let status = run_megastore(
        &["status", "--config", &config_arg],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(
        status.stdout.contains("PhotosByTag")
            && status.stdout.contains("BUILDING: not backfilled yet"),
        "{status:?}"
    );

    // Round 2 (retags, deletes, 20 new users) runs under the new catalog while replica
    // b is down and the backfill goes on.
    cluster.process("replica-b").kill();
    let writers = {
        let (config, v2) = (config.clone(), v2.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let (at_a, at_b) = (connect(&config, "A").await, connect(&config, "B").await);
                tokio::join!(
                    async {
                        second_round(&at_a, &v2, 1..=100).await;
                        first_round(&at_a, &v2, 201..=210).await;
                    },
                    async {
                        second_round(&at_b, &v2, 101..=200).await;
                        first_round(&at_b, &v2, 211..=220).await;
                    },
                );
            });
        })
    };
    // One step through the library, stopped there.
    let first = runtime
        .block_on(at_a.backfill_index(&config, &lockd, "PhotosByTime", |_| ControlFlow::Break(())))
        .unwrap();
    assert_eq!(first.groups, 64, "one step: {first:?}");
    // The command resumes it; killed in the middle, it is run again to the end.
    let mut backfill = Process::start(
        "backfill",
        &["schema", "backfill", "--config", &config_arg],
        dir.path(),
    );
    let started = Instant::now();
    while !backfill.log().contains("backfill PhotosByTime: 128 groups") {
        assert!(backfill.running(), "{}", backfill.log());
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{}",
            backfill.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    backfill.kill();
    assert!(
        backfill
            .log()
            .contains("backfill PhotosByTime: resuming after 64 groups"),
        "{}",
        backfill.log()
    );
    writers.join().unwrap();
    cluster.start_process("replica-b");
    let finished = run_megastore(
        &["schema", "backfill", "--config", &config_arg],
        dir.path(),
        Duration::from_secs(300),
    );
    assert!(
        finished.status.success() && finished.stdout.contains("index PhotosByTag is ready"),
        "{finished:?}"
    );
    assert!(finished.stderr.contains("resuming after"), "{finished:?}");
    let status = run_megastore(
        &["status", "--config", &config_arg],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(!status.stdout.contains("BUILDING"), "{status:?}");

    // Each index equals the one the acknowledged writes imply.
    let users: Vec<i64> = (1..=220).collect();
    let want = photos(&users);
    let ready = runtime.block_on(load_catalog(&lockd)).unwrap().unwrap().0;
    runtime.block_on(async {
        for tag in TAGS.iter().chain(&["all"]) {
            let mut expected: Vec<(i64, i32)> = want
                .iter()
                .filter(|(_, _, tags)| tags.contains(tag))
                .map(|(u, id, _)| (*u, *id))
                .collect();
            expected.sort();
            let started = Instant::now();
            loop {
                let found = tagged(&at_a, &ready, tag).await;
                if found.as_ref() == Ok(&expected) {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{tag}: {found:?}, want {expected:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let once: BTreeSet<_> = expected.iter().collect();
            assert_eq!(once.len(), expected.len());
        }
        for user in [1i64, 5, 100, 150, 205, 215] {
            let eg = megastore_client::entity_group(&ready, "User", &[Value::from(user)]).unwrap();
            let query = IndexQuery::new("PhotosByTime").equal([user]);
            let (page, _) = at_b
                .transaction(&eg, async |txn| txn.scan_index(&ready, &query).await)
                .await
                .unwrap();
            let ids: Vec<i32> = page
                .entries
                .iter()
                .map(|e| match e.primary_key[1] {
                    Value::Int32(id) => id,
                    ref other => panic!("{other:?}"),
                })
                .collect();
            let expected: Vec<i32> = want
                .iter()
                .filter(|(u, _, _)| *u == user)
                .map(|(_, id, _)| *id)
                .collect();
            assert_eq!(ids, expected, "user {user}'s photos by time");
        }
    });
}
