//! Every index kind of the paper's photo schema with an inline index
//! (`schema/photos-inline.msdl`) on real processes: a repeated global index with a
//! stored property (`PhotosByTag`: one entry per distinct tag, as tags are added,
//! removed one at a time and cleared; the thumbnail comes with the entry), and an
//! inline index (`PhotosByTime`, newest first, under each User) read back as the
//! User's virtual repeated property in every read mode and over gRPC — written by
//! clients at two sites while a full replica is killed (SIGKILL) and restarted.

use std::time::{Duration, Instant};

use megastore_client::{Client, IndexQuery, IndexRead, entity_group};
use megastore_config::ClusterConfig;
use megastore_e2e::LocalCluster;
use megastore_paxos::ReadMode;
use megastore_rpc::pb::client as pb;
use megastore_schema::{Catalog, Entity, FieldValue, IndexEntry, Value};

use crate::global_index::commit_in;
use crate::support::{api_at, apply_schema, connect};

fn photo(user: i64, id: i32, tags: &[&str], version: u32) -> Entity {
    Entity::new("Photo")
        .set("user_id", user)
        .set("photo_id", id)
        .set("time", i64::from(id) * 100)
        .set("full_url", format!("u/{user}/{id}"))
        .set("thumbnail_url", format!("t/{user}/{id}/v{version}"))
        .set_repeated("tag", tags.iter().copied())
}

/// Round 1: photo 1 tagged sea, sun and sea again; photo 2 city.
/// Round 2: photo 1 loses sun (and gets a new thumbnail); photo 2's tags are cleared.
async fn rounds(client: &Client, catalog: &Catalog, users: &[i64], round: u32) {
    for &user in users {
        let write = move || match round {
            1 => vec![
                Entity::new("User").set("user_id", user).set("name", "u"),
                photo(user, 1, &["sea", "sun", "sea"], 1),
                photo(user, 2, &["city"], 1),
            ],
            _ => vec![photo(user, 1, &["sea"], 2), photo(user, 2, &[], 2)],
        };
        commit_in(client, catalog, user, write, None).await;
    }
}

fn key(e: &IndexEntry) -> (i64, i32) {
    match (&e.primary_key[0], &e.primary_key[1]) {
        (Value::Int64(u), Value::Int32(id)) => (*u, *id),
        other => panic!("a photo key: {other:?}"),
    }
}

fn thumbnail(e: &IndexEntry) -> String {
    match e.stored.get("thumbnail_url") {
        Some(FieldValue::Single(Value::String(t))) => t.clone(),
        other => panic!("no stored thumbnail in {e:?}: {other:?}"),
    }
}

/// (user, photo, stored thumbnail) under `tag`.
async fn tagged(
    client: &Client,
    catalog: &Catalog,
    tag: &str,
) -> Result<Vec<(i64, i32, String)>, String> {
    let query = IndexQuery::new("PhotosByTag").equal([tag]);
    let scan = client
        .scan_global_index(catalog, &query, IndexRead::AsApplied)
        .await
        .map_err(|e| e.to_string())?;
    Ok(scan
        .entries
        .iter()
        .map(|e| {
            let (u, id) = key(e);
            (u, id, thumbnail(e))
        })
        .collect())
}

/// A User's virtual PhotosByTime: (photo, stored thumbnail), newest first.
fn by_time(user: &Entity) -> Vec<(i32, String)> {
    user.inline
        .get("PhotosByTime")
        .unwrap_or_else(|| panic!("no virtual PhotosByTime in {user:?}"))
        .iter()
        .map(|e| (key(e).1, thumbnail(e)))
        .collect()
}

#[test]
fn repeated_stored_and_inline_indexes_hold_exactly_what_the_writes_imply() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path());
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let catalog = apply_schema(&config_arg, "schema/photos-inline.msdl", dir.path());
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (at_a, at_b, at_d) = runtime.block_on(async {
        (
            connect(&config, "A").await,
            connect(&config, "B").await,
            connect(&config, "D").await,
        )
    });
    let (users_a, users_b) = ([1i64, 2, 3], [101i64, 102, 103]);
    runtime.block_on(async {
        tokio::join!(
            rounds(&at_a, &catalog, &users_a, 1),
            rounds(&at_b, &catalog, &users_b, 1)
        );
    });
    // After round 1: one entry per distinct tag, the first thumbnail stored with it.
    runtime.block_on(async {
        let started = Instant::now();
        loop {
            let sun = tagged(&at_a, &catalog, "sun").await;
            if sun.as_ref().is_ok_and(|s| s.len() == 6) {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "sun: {sun:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sea = tagged(&at_a, &catalog, "sea").await.unwrap();
        let want: Vec<(i64, i32, String)> = users_a
            .iter()
            .chain(&users_b)
            .map(|&u| (u, 1, format!("t/{u}/1/v1")))
            .collect();
        assert_eq!(sea, want, "sea listed once per photo, though tagged twice");
    });

    cluster.process("replica-b").kill();
    runtime.block_on(async {
        tokio::join!(
            rounds(&at_a, &catalog, &users_a, 2),
            rounds(&at_b, &catalog, &users_b, 2)
        );
    });
    cluster.start_process("replica-b");

    let users: Vec<i64> = users_a.iter().chain(&users_b).copied().collect();
    runtime.block_on(async {
        // The removed element's entries and the cleared photo's are gone; the kept one
        // stores the new thumbnail.
        let want_sea: Vec<(i64, i32, String)> = users
            .iter()
            .map(|&u| (u, 1, format!("t/{u}/1/v2")))
            .collect();
        for (client, site) in [(&at_a, "A"), (&at_b, "B"), (&at_d, "D")] {
            let started = Instant::now();
            loop {
                let (sea, sun, city) = (
                    tagged(client, &catalog, "sea").await,
                    tagged(client, &catalog, "sun").await,
                    tagged(client, &catalog, "city").await,
                );
                if sea.as_ref() == Ok(&want_sea)
                    && sun.as_ref().is_ok_and(Vec::is_empty)
                    && city.as_ref().is_ok_and(Vec::is_empty)
                {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "site {site}: sea {sea:?}, sun {sun:?}, city {city:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }

        // Each User reads back its photos by time, newest first, as a virtual repeated
        // property: in a transaction, and outside one in every mode.
        for &user in &users {
            let want = vec![(2, format!("t/{user}/2/v2")), (1, format!("t/{user}/1/v2"))];
            let eg = entity_group(&catalog, "User", &[Value::from(user)]).unwrap();
            let (in_txn, _) = at_b
                .transaction(&eg, async |txn| {
                    txn.get_entity(&catalog, "User", &[Value::from(user)]).await
                })
                .await
                .unwrap();
            assert_eq!(
                by_time(&in_txn.unwrap()),
                want,
                "user {user} in a transaction"
            );
            let (scanned, _) = at_a
                .transaction(&eg, async |txn| {
                    txn.scan_table(&catalog, "User", &[Value::from(user)], None)
                        .await
                })
                .await
                .unwrap();
            assert_eq!(by_time(&scanned[0]), want, "user {user} in a table scan");
            for (client, mode) in [
                (&at_a, ReadMode::Current),
                (&at_d, ReadMode::Snapshot),
                (&at_b, ReadMode::Inconsistent),
            ] {
                let started = Instant::now();
                loop {
                    let read = client
                        .read_entity(&catalog, mode, "User", &[Value::from(user)])
                        .await;
                    let got = read
                        .as_ref()
                        .ok()
                        .and_then(|r| r.entity.as_ref())
                        .map(by_time);
                    if got.as_ref() == Some(&want) {
                        break;
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "user {user}, {mode:?}: {read:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }

        // Over gRPC too.
        let mut api = api_at(&config.replica("a").unwrap().address);
        let read = api
            .read_entity(pb::ReadEntityRequest {
                table: "User".into(),
                key: vec![pb::Value {
                    kind: Some(pb::value::Kind::Int64(1)),
                }],
                mode: pb::ReadMode::Current as i32,
            })
            .await
            .unwrap()
            .into_inner();
        let inline = &read.entity.expect("User 1").inline["PhotosByTime"];
        let ids: Vec<i32> = inline
            .entries
            .iter()
            .map(|e| match e.primary_key[1].kind {
                Some(pb::value::Kind::Int32(id)) => id,
                ref other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ids, vec![2, 1]);
    });
}
