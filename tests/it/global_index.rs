//! A global index across entity groups on a real cluster: the paper's `PhotosByTag`
//! (repeated, `STORING (thumbnail_url)`), written by concurrent clients at two sites
//! while a full replica is killed (SIGKILL) and restarted; every replica with data must end up
//! holding exactly the entries the acknowledged writes imply — each once, none stale —
//! and serve them to a scan (docs/protocol.md, "Global indexes").

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use megastore_client::{Client, ClientError, IndexQuery, IndexRead, entity_group};
use megastore_config::ClusterConfig;
use megastore_e2e::{LocalCluster, repo_root};
use megastore_schema::{Catalog, Entity, FieldValue, Value};

use crate::support::connect;

const USERS_PER_SITE: i64 = 4;
const PHOTOS: i32 = 3;
const TAGS: [&str; 3] = ["beach", "city", "sunset"];

fn photo(user: i64, id: i32, tags: &[&str]) -> Entity {
    Entity::new("Photo")
        .set("user_id", user)
        .set("photo_id", id)
        .set("time", i64::from(id) * 100)
        .set(
            "full_url",
            format!("https://photos.example/{user}/{id}.jpg"),
        )
        .set(
            "thumbnail_url",
            format!("https://photos.example/{user}/{id}.thumb"),
        )
        .set_repeated("tag", tags.iter().copied())
}

/// Tag → (user, photo) → thumbnail: what the index must hold.
type Expected = BTreeMap<String, BTreeMap<(i64, i32), String>>;

/// Commits `write` in `user`'s group, retrying conflicts and unavailability (a
/// replica is down for part of the run) for up to 60 s; an unknown outcome is
/// resolved by the library's transaction loop or reported, and fails the test.
pub(crate) async fn commit_in(
    client: &Client,
    catalog: &Catalog,
    user: i64,
    write: impl Fn() -> Vec<Entity> + Clone,
    delete: Option<i32>,
) {
    let eg = entity_group(catalog, "User", &[Value::from(user)]).unwrap();
    let started = Instant::now();
    loop {
        let entities = write.clone();
        let result = client
            .transaction(&eg, async |txn| {
                for entity in entities() {
                    txn.put_entity(catalog, &entity).await?;
                }
                if let Some(id) = delete {
                    txn.delete_entity(catalog, "Photo", &[user.into(), id.into()])
                        .await?;
                }
                Ok(())
            })
            .await;
        match result {
            Ok(_) => return,
            Err(ClientError::Unavailable(_) | ClientError::TooManyConflicts { .. })
                if started.elapsed() < Duration::from_secs(60) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("user {user}: {e}"),
        }
    }
}

/// Round 1: every user of one site and a first version of each photo.
async fn first_versions(client: &Client, catalog: &Catalog, users: &[i64]) {
    for &user in users {
        commit_in(
            client,
            catalog,
            user,
            move || {
                let mut all = vec![Entity::new("User").set("user_id", user).set("name", "u")];
                for id in 1..=PHOTOS {
                    let first = TAGS[(user as usize + id as usize) % TAGS.len()];
                    all.push(photo(user, id, &[first, "all"]));
                }
                all
            },
            None,
        )
        .await;
    }
}

/// Round 2: photo 1 retagged to `sunset` alone, photo 2 deleted.
async fn retag_and_delete(client: &Client, catalog: &Catalog, users: &[i64]) {
    for &user in users {
        commit_in(
            client,
            catalog,
            user,
            move || vec![photo(user, 1, &["sunset"])],
            Some(2),
        )
        .await;
    }
}

/// Round 3: photo 3 gains the tag `night`.
async fn add_a_tag(client: &Client, catalog: &Catalog, users: &[i64]) {
    for &user in users {
        let first = TAGS[(user as usize + 3) % TAGS.len()];
        commit_in(
            client,
            catalog,
            user,
            move || vec![photo(user, 3, &[first, "all", "night"])],
            None,
        )
        .await;
    }
}

fn expected(users: impl Iterator<Item = i64>) -> Expected {
    let mut index = Expected::new();
    for user in users {
        for id in 1..=PHOTOS {
            let tags: Vec<&str> = match id {
                1 => vec!["sunset"],
                2 => continue,
                _ => vec![
                    TAGS[(user as usize + id as usize) % TAGS.len()],
                    "all",
                    "night",
                ],
            };
            for tag in tags {
                index.entry(tag.to_string()).or_default().insert(
                    (user, id),
                    format!("https://photos.example/{user}/{id}.thumb"),
                );
            }
        }
    }
    index
}

/// What the replica `client` reaches first holds, by tag; panics on an entry seen
/// twice or without its stored thumbnail.
async fn scanned(
    client: &Client,
    catalog: &Catalog,
    read: IndexRead,
) -> Result<Expected, ClientError> {
    let mut index = Expected::new();
    for tag in TAGS.iter().chain(&["all", "night"]) {
        // Page by page (a few entries each), as an application lists a large result.
        let mut query = IndexQuery::new("PhotosByTag").equal([*tag]).limit(4);
        let mut found = Vec::new();
        loop {
            let scan = client.scan_global_index(catalog, &query, read).await?;
            found.extend(scan.entries);
            match scan.next {
                Some(token) => query = query.after(token),
                None => break,
            }
        }
        let entries = index.entry(tag.to_string()).or_default();
        for entry in found {
            assert_eq!(entry.values, vec![Value::from(*tag)]);
            let (Value::Int64(user), Value::Int32(id)) =
                (&entry.primary_key[0], &entry.primary_key[1])
            else {
                panic!("primary key {:?}", entry.primary_key);
            };
            let Some(FieldValue::Single(Value::String(thumbnail))) =
                entry.stored.get("thumbnail_url").cloned()
            else {
                panic!("no stored thumbnail in {entry:?}");
            };
            assert!(
                entries.insert((*user, *id), thumbnail).is_none(),
                "{tag}: photo {user}/{id} listed twice"
            );
        }
    }
    index.retain(|_, entries| !entries.is_empty());
    Ok(index)
}

/// The photos listed under `tag`, as (user, photo).
async fn photos_tagged(
    client: &Client,
    catalog: &Catalog,
    tag: &str,
    read: IndexRead,
) -> std::collections::BTreeSet<(i64, i32)> {
    let scan = client
        .scan_global_index(catalog, &IndexQuery::new("PhotosByTag").equal([tag]), read)
        .await
        .unwrap();
    scan.entries
        .iter()
        .map(|e| match (&e.primary_key[0], &e.primary_key[1]) {
            (Value::Int64(user), Value::Int32(id)) => (*user, *id),
            other => panic!("primary key {other:?}"),
        })
        .collect()
}

#[test]
fn a_global_index_across_groups_converges_on_every_replica_through_a_replica_crash() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let text = std::fs::read_to_string(repo_root().join("schema/photos.msdl")).unwrap();
    let catalog: Catalog = megastore_schema::compile("photos.msdl", &text, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path());
    let config = ClusterConfig::load(&dir.path().join("cluster.toml")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (at_a, at_b, at_d) = runtime.block_on(async {
        (
            connect(&config, "A").await,
            connect(&config, "B").await,
            connect(&config, "D").await,
        )
    });
    let users_a: Vec<i64> = (1..=USERS_PER_SITE).collect();
    let users_b: Vec<i64> = (101..=100 + USERS_PER_SITE).collect();

    // Both sites write concurrently, in three rounds: replica b is killed after the
    // first, and restarted after the second (it catches up while the third runs).
    runtime.block_on(async {
        tokio::join!(
            first_versions(&at_a, &catalog, &users_a),
            first_versions(&at_b, &catalog, &users_b),
        );
    });
    cluster.process("replica-b").kill();
    runtime.block_on(async {
        tokio::join!(
            retag_and_delete(&at_a, &catalog, &users_a),
            retag_and_delete(&at_b, &catalog, &users_b),
        );
    });
    cluster.start_process("replica-b");
    runtime.block_on(async {
        tokio::join!(
            add_a_tag(&at_a, &catalog, &users_a),
            add_a_tag(&at_b, &catalog, &users_b),
        );
    });

    // Every replica with data converges on exactly the acknowledged writes' entries:
    // a's and b's from their sites, d's (read-only) from its own.
    let want = expected(users_a.iter().chain(&users_b).copied());
    runtime.block_on(async {
        for (site, client) in [("A", &at_a), ("B", &at_b), ("D", &at_d)] {
            let started = Instant::now();
            loop {
                match scanned(client, &catalog, IndexRead::AsApplied).await {
                    Ok(found) if found == want => break,
                    outcome => assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "site {site}: the global index did not converge: {outcome:?}, want {want:?}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });

    // Every replica with data says it is not behind (its lag gauges, scraped).
    for name in ["a", "b", "d"] {
        let address = config
            .replica(name)
            .and_then(|r| r.metrics_address.clone())
            .expect("a metrics address");
        let started = Instant::now();
        loop {
            let text = megastore_e2e::scrape_metrics(&address);
            let behind = megastore_e2e::metric_value(&text, "megastore_replica_positions_behind");
            assert!(behind.is_some(), "replica {name} exports no lag:\n{text}");
            if behind == Some(0.0) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "replica {name} stays {behind:?} positions behind"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // Verified scans agree once everything is applied.
    runtime.block_on(async {
        for client in [&at_a, &at_d] {
            assert_eq!(
                scanned(client, &catalog, IndexRead::Verified)
                    .await
                    .unwrap(),
                want
            );
        }
    });

    // A stale hit, and verification dropping it: a writer at A whose marks reach the
    // read-only replica d 8 s late (an emulated slow link) retags photo 1/3; d keeps
    // listing it under its old tag until then, and a verified scan at d never does.
    let mut slow_to_d = config.clone();
    slow_to_d.wan.push(megastore_config::WanLink {
        between: ["A".into(), "D".into()],
        rtt_ms: 8_000,
    });
    runtime.block_on(async {
        let writer = connect(&slow_to_d, "A").await;
        let mut old_tag = "night".to_string();
        let mut stale_seen = false;
        // Each try retags once; d's sweep could (rarely) catch up before the first
        // scan, so a few tries.
        for attempt in 0..3 {
            let new_tag = format!("moved{attempt}");
            let tag = new_tag.clone();
            commit_in(
                &writer,
                &catalog,
                1,
                move || vec![photo(1, 3, &[&tag])],
                None,
            )
            .await;
            let as_applied = photos_tagged(&at_d, &catalog, &old_tag, IndexRead::AsApplied).await;
            let verified = photos_tagged(&at_d, &catalog, &old_tag, IndexRead::Verified).await;
            assert!(
                !verified.contains(&(1, 3)),
                "a verified scan listed photo 1/3 under {old_tag}, a tag it no longer has"
            );
            if as_applied.contains(&(1, 3)) {
                stale_seen = true;
                break;
            }
            old_tag = new_tag;
        }
        assert!(
            stale_seen,
            "replica d never served a stale hit, so verification was never put to the test"
        );
    });

    // Bad input is refused, naming the index.
    runtime.block_on(async {
        let local = at_a
            .scan_global_index(
                &catalog,
                &IndexQuery::new("PhotosByTime"),
                IndexRead::AsApplied,
            )
            .await
            .unwrap_err();
        assert!(local.to_string().contains("PhotosByTime"), "{local}");
        let missing = at_a
            .scan_global_index(
                &catalog,
                &IndexQuery::new("NoSuchIndex"),
                IndexRead::AsApplied,
            )
            .await
            .unwrap_err();
        assert!(missing.to_string().contains("NoSuchIndex"), "{missing}");
        let too_many = at_a
            .scan_global_index(
                &catalog,
                &IndexQuery::new("PhotosByTag").equal(["a", "b"]),
                IndexRead::AsApplied,
            )
            .await
            .unwrap_err();
        assert!(too_many.to_string().contains("PhotosByTag"), "{too_many}");
        let limited = at_a
            .scan_global_index(
                &catalog,
                &IndexQuery::new("PhotosByTag").limit(2),
                IndexRead::AsApplied,
            )
            .await
            .unwrap();
        assert_eq!(limited.entries.len(), 2, "a limit bounds the scan");
    });
}
