//! Index queries through the public gRPC API, on real processes: ranges on a local
//! index inside a transaction (bounds, reverse, pages), a streamed global index scan,
//! a merge-join of two tags and a parallel lookup of its hits — while clients at two
//! sites write concurrently and a full replica is killed (SIGKILL) and restarted. Each
//! answer must equal what the acknowledged writes imply: no entry missing, none stale,
//! none twice, in index order.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_e2e::LocalCluster;
use megastore_rpc::pb::client as pb;
use megastore_schema::{Catalog, Entity};
use tonic::Code;

use crate::global_index::commit_in;
use crate::support::{api_at, apply_schema, connect};

pub(crate) type Api = pb::megastore_client::MegastoreClient<tonic::transport::Channel>;

const PHOTOS: i32 = 8;

/// Photo `id`'s tags in round `round`: every photo is `all` in round 1, and loses it in
/// round 2 if its id is odd; `even` and `three` by divisibility throughout.
fn tags(id: i32, round: u32) -> Vec<&'static str> {
    let mut tags = Vec::new();
    if round == 1 || id % 2 == 0 {
        tags.push("all");
    }
    if id % 2 == 0 {
        tags.push("even");
    }
    if id % 3 == 0 {
        tags.push("three");
    }
    tags
}

fn photo(user: i64, id: i32, round: u32) -> Entity {
    Entity::new("Photo")
        .set("user_id", user)
        .set("photo_id", id)
        .set("time", i64::from(id) * 100)
        .set("full_url", format!("u/{user}/{id}"))
        .set("thumbnail_url", format!("t/{user}/{id}/{round}"))
        .set_repeated("tag", tags(id, round))
}

/// Round 1 writes every photo; round 2 rewrites each (new thumbnail, maybe fewer tags)
/// and deletes photo 5.
pub(crate) async fn write_round(
    client: &megastore_client::Client,
    catalog: &Catalog,
    users: &[i64],
    round: u32,
) {
    for &user in users {
        for id in 1..=PHOTOS {
            let delete = (round == 2 && id == 5).then_some(5);
            let write = move || {
                let mut all = vec![Entity::new("User").set("user_id", user).set("name", "u")];
                if delete.is_none() {
                    all.push(photo(user, id, round));
                }
                all
            };
            commit_in(client, catalog, user, write, delete).await;
        }
    }
}

/// (user, photo) of the photos the acknowledged writes leave, with their tags.
pub(crate) fn expected(users: &[i64]) -> BTreeMap<(i64, i32), Vec<&'static str>> {
    users
        .iter()
        .flat_map(|&u| {
            (1..=PHOTOS)
                .filter(|id| *id != 5)
                .map(move |id| ((u, id), tags(id, 2)))
        })
        .collect()
}

fn int64(v: i64) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Int64(v)),
    }
}

fn string(v: &str) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::String(v.into())),
    }
}

fn key_of(values: &[pb::Value]) -> (i64, i32) {
    match (&values[0].kind, &values[1].kind) {
        (Some(pb::value::Kind::Int64(u)), Some(pb::value::Kind::Int32(id))) => (*u, *id),
        other => panic!("a photo key: {other:?}"),
    }
}

/// A user's photos with `200 <= time < 700`, newest first, two per page, inside one
/// transaction: (photo id, time).
async fn newest_in_range(api: &mut Api, user: i64) -> Result<Vec<(i32, i64)>, tonic::Status> {
    let root = pb::GroupRoot {
        table: "User".into(),
        key: vec![int64(user)],
    };
    let txn = api
        .begin(pb::BeginRequest {
            root: Some(root),
            ..Default::default()
        })
        .await?
        .into_inner()
        .txn;
    let mut found = Vec::new();
    let mut token = Vec::new();
    loop {
        let page = api
            .scan_index(pb::ScanIndexRequest {
                txn,
                index: "PhotosByTime".into(),
                leading: vec![int64(user)],
                limit: 2,
                lower: Some(pb::IndexBound {
                    value: Some(int64(200)),
                    inclusive: true,
                }),
                upper: Some(pb::IndexBound {
                    value: Some(int64(700)),
                    inclusive: false,
                }),
                reverse: true,
                page_token: token,
            })
            .await?
            .into_inner();
        assert!(page.entries.len() <= 2, "a page holds at most its limit");
        for e in page.entries {
            let time = match e.values[1].kind {
                Some(pb::value::Kind::Int64(t)) => t,
                ref other => panic!("a time: {other:?}"),
            };
            found.push((key_of(&e.primary_key).1, time));
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    api.abort(pb::AbortRequest { txn }).await?;
    Ok(found)
}

/// Every entry of `tag`, streamed three per message: (user, photo) in index order.
pub(crate) async fn streamed(
    api: &mut Api,
    tag: &str,
    verify: bool,
) -> Result<Vec<(i64, i32)>, tonic::Status> {
    let mut stream = api
        .stream_global_index(pb::ScanGlobalIndexRequest {
            index: "PhotosByTag".into(),
            leading: vec![string(tag)],
            limit: 3,
            verify,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut found = Vec::new();
    let mut last_token = None;
    while let Some(page) = stream.message().await? {
        assert!(page.entries.len() <= 3, "a message holds at most one page");
        found.extend(page.entries.iter().map(|e| key_of(&e.primary_key)));
        last_token = Some(page.next_page_token);
    }
    assert_eq!(
        last_token,
        Some(Vec::new()),
        "the last message says it is the last"
    );
    Ok(found)
}

/// Retries `f` until it returns `want` (60 s at most); the last answer otherwise.
pub(crate) async fn until_equal<
    T: PartialEq + std::fmt::Debug,
    F: AsyncFnMut() -> Result<T, tonic::Status>,
>(
    what: &str,
    want: &T,
    mut f: F,
) {
    let started = Instant::now();
    loop {
        let got = f().await;
        if got.as_ref().ok() == Some(want) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: got {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn index_queries_over_grpc_answer_exactly_the_acknowledged_writes_through_a_replica_crash() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path());
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let catalog = apply_schema(&config_arg, "schema/photos.msdl", dir.path());
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (at_a, at_b) =
        runtime.block_on(async { (connect(&config, "A").await, connect(&config, "B").await) });
    let users_a: Vec<i64> = (1..=3).collect();
    let users_b: Vec<i64> = (101..=103).collect();

    // Both sites write concurrently; replica b is killed between the rounds and
    // restarted once they are done.
    runtime.block_on(async {
        tokio::join!(
            write_round(&at_a, &catalog, &users_a, 1),
            write_round(&at_b, &catalog, &users_b, 1),
        );
    });
    cluster.process("replica-b").kill();
    runtime.block_on(async {
        tokio::join!(
            write_round(&at_a, &catalog, &users_a, 2),
            write_round(&at_b, &catalog, &users_b, 2),
        );
    });
    cluster.start_process("replica-b");

    let users: Vec<i64> = users_a.iter().chain(&users_b).copied().collect();
    let want = expected(&users);
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    runtime.block_on(async {
        let mut api = api_at(&config.replica("a").unwrap().address);
        // A range of a local index, newest first, page by page: photos 6, 4, 3, 2 (5 is
        // deleted, 1 and 7+ are outside the range) — as of each transaction, current.
        for &user in &users {
            let want: Vec<(i32, i64)> = [6, 4, 3, 2]
                .iter()
                .map(|&id| (id, i64::from(id) * 100))
                .collect();
            until_equal(
                &format!("user {user}'s photos by time"),
                &want,
                async || newest_in_range(&mut api, user).await,
            )
            .await;
        }

        // A streamed global scan: every photo still tagged `all`, each once, in
        // primary key order; verified, and as applied once the replica caught up.
        let all: Vec<(i64, i32)> = want
            .iter()
            .filter(|(_, tags)| tags.contains(&"all"))
            .map(|(k, _)| *k)
            .collect();
        for verify in [true, false] {
            until_equal(
                &format!("photos tagged all (verify {verify})"),
                &all,
                async || streamed(&mut api, "all", verify).await,
            )
            .await;
        }

        // A merge-join of two tags, and a parallel lookup of its hits.
        let even_and_three: Vec<(i64, i32)> = want
            .iter()
            .filter(|(_, tags)| tags.contains(&"even") && tags.contains(&"three"))
            .map(|(k, _)| *k)
            .collect();
        assert!(!even_and_three.is_empty());
        let join = |verify| pb::MergeJoinRequest {
            queries: ["even", "three"]
                .iter()
                .map(|t| pb::JoinQuery {
                    index: "PhotosByTag".into(),
                    equal: vec![string(t)],
                })
                .collect(),
            verify,
            ..Default::default()
        };
        until_equal(
            "photos tagged even and three",
            &even_and_three,
            async || {
                let hits = api.merge_join(join(true)).await?.into_inner().hits;
                Ok(hits
                    .iter()
                    .map(|h| key_of(&h.primary_key))
                    .collect::<Vec<_>>())
            },
        )
        .await;
        let hits = api.merge_join(join(false)).await.unwrap().into_inner().hits;
        let keys: Vec<pb::EntityKey> = hits
            .iter()
            .map(|h| pb::EntityKey {
                key: h.primary_key.clone(),
            })
            .collect();
        let looked_up = api
            .read_entities(pb::ReadEntitiesRequest {
                table: "Photo".into(),
                keys,
                mode: pb::ReadMode::Current as i32,
                in_flight: 4,
            })
            .await
            .unwrap()
            .into_inner()
            .entities;
        let thumbnails: BTreeSet<String> = looked_up
            .iter()
            .map(|read| {
                let entity = read.entity.as_ref().expect("every hit's photo exists");
                match &entity.fields["thumbnail_url"].value {
                    Some(pb::field_value::Value::Single(pb::Value {
                        kind: Some(pb::value::Kind::String(t)),
                    })) => t.clone(),
                    other => panic!("a thumbnail: {other:?}"),
                }
            })
            .collect();
        let want_thumbnails: BTreeSet<String> = even_and_three
            .iter()
            .map(|(u, id)| format!("t/{u}/{id}/2"))
            .collect();
        assert_eq!(
            thumbnails, want_thumbnails,
            "the lookup reads each hit's round-2 photo"
        );

        // Bad queries are refused, naming what is wrong.
        let refused = |r: Result<tonic::Response<pb::ScanGlobalIndexResponse>, tonic::Status>| {
            let status = r.expect_err("refused");
            assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
            status.message().to_string()
        };
        let wrong_type = api
            .scan_global_index(pb::ScanGlobalIndexRequest {
                index: "PhotosByTag".into(),
                lower: Some(pb::IndexBound {
                    value: Some(int64(1)),
                    inclusive: true,
                }),
                ..Default::default()
            })
            .await;
        assert!(refused(wrong_type).contains("the range on `tag` needs string values"));
        let foreign_token = api
            .scan_global_index(pb::ScanGlobalIndexRequest {
                index: "PhotosByTag".into(),
                leading: vec![string("even")],
                page_token: b"\xfd\x00elsewhere".to_vec(),
                ..Default::default()
            })
            .await;
        assert!(refused(foreign_token).contains("page token belongs to another query"));
        let too_many = api
            .read_entities(pb::ReadEntitiesRequest {
                table: "Photo".into(),
                in_flight: 5_000,
                mode: pb::ReadMode::Current as i32,
                ..Default::default()
            })
            .await
            .expect_err("refused");
        assert!(too_many.message().contains("in_flight"), "{too_many:?}");
        let unjoinable = api
            .merge_join(pb::MergeJoinRequest {
                queries: vec![pb::JoinQuery {
                    index: "PhotosByTime".into(),
                    equal: vec![int64(1)],
                }],
                ..Default::default()
            })
            .await
            .expect_err("refused");
        assert!(
            unjoinable.message().contains("PhotosByTime"),
            "{unjoinable:?}"
        );
    });
}

/// `megastore bench --queries` writes its photos, then times each cross-group query and
/// reports what each found: 100 hits per scan and join, 1,000 photos looked up.
#[test]
fn the_query_benchmark_times_each_query_and_finds_what_it_names() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(dir.path());
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let without_schema = megastore_e2e::run_megastore(
        &["bench", "--queries", "--runs", "2", "--config", &config_arg],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(
        !without_schema.status.success()
            && without_schema
                .stderr
                .contains("megastore schema apply schema/photos.msdl"),
        "{without_schema:?}"
    );
    apply_schema(&config_arg, "schema/photos.msdl", dir.path());
    let out = megastore_e2e::run_megastore(
        &["bench", "--queries", "--runs", "2", "--config", &config_arg],
        dir.path(),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{out:?}");
    let json = out.stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let hits: Vec<(String, u64, u64)> = report["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kind"].as_str().unwrap().to_string(),
                k["hits"].as_u64().unwrap(),
                k["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        hits,
        vec![
            ("scan 100 hits".to_string(), 100, 2),
            ("scan 100 hits, verified".to_string(), 100, 2),
            ("merge-join of two tags".to_string(), 100, 2),
            (
                "lookup of 1,000 photos in 1,000 groups".to_string(),
                1000,
                2
            ),
        ],
        "{out:?}"
    );
}
