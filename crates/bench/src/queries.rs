//! `megastore bench --queries`: the cross-group queries of the photo schema, timed one
//! at a time — a global index scan of 100 hits, as applied and verified; a merge-join
//! of two tags (100 hits of 500 and 200 entries); a parallel lookup of 1,000 photos from
//! 1,000 groups.
//!
//! It writes its own photos first (users from `BENCH_USER_FIRST` up, one photo each,
//! tagged so each query finds what it names) and waits until the index shows them all.

use std::time::{Duration, Instant};

use megastore_client::schema_store::load_catalog;
use megastore_client::{Client, ClientError, IndexQuery, IndexRead, entity_group};
use megastore_config::ClusterConfig;
use megastore_paxos::ReadMode;
use megastore_schema::{Catalog, Entity, Value};
use serde::Serialize;

use crate::SpecError;
use crate::timing::{self, QueryKind, failed, histogram, record};

/// The users the benchmark writes: far from an application's.
const BENCH_USER_FIRST: i64 = 9_000_000_000;
/// Users (each a group with one photo).
const USERS: i64 = 1_000;
/// Writes in flight while the photos are written.
const WRITERS: usize = 16;
/// Lookups in flight.
const LOOKUPS_IN_FLIGHT: usize = 32;

/// Photo `n`'s tags: `q100` on the first 100; `qa` on every 2nd, `qb` on every 5th
/// (both: every 10th, 100 of them).
fn tags(n: i64) -> Vec<&'static str> {
    let mut tags = Vec::new();
    if n < 100 {
        tags.push("q100");
    }
    if n % 2 == 0 {
        tags.push("qa");
    }
    if n % 5 == 0 {
        tags.push("qb");
    }
    tags
}

fn photo(n: i64) -> Entity {
    let user = BENCH_USER_FIRST + n;
    Entity::new("Photo")
        .set("user_id", user)
        .set("photo_id", 1i32)
        .set("time", n)
        .set("full_url", format!("https://photos.example/{user}/1.jpg"))
        .set(
            "thumbnail_url",
            format!("https://photos.example/{user}/1.thumb"),
        )
        .set_repeated("tag", tags(n))
}

/// What `--queries` measured.
#[derive(Debug, Clone, Serialize)]
pub struct QueryReport {
    /// The site the client acted from.
    pub site: String,
    /// Each query kind.
    pub kinds: Vec<QueryKind>,
}

impl QueryReport {
    /// The report as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("the report always serializes")
    }
}

/// Writes the benchmark's photos (if they are not there yet) and waits until the
/// replica the client reads has applied them all.
async fn populate(client: &Client, catalog: &Catalog) -> Result<(), SpecError> {
    use futures::StreamExt;
    let writes = (0..USERS).map(|n| async move {
        let user = BENCH_USER_FIRST + n;
        let eg = entity_group(catalog, "User", &[Value::from(user)])?;
        client
            .transaction(&eg, async |txn| {
                txn.put_entity(
                    catalog,
                    &Entity::new("User")
                        .set("user_id", user)
                        .set("name", "bench"),
                )
                .await?;
                txn.put_entity(catalog, &photo(n)).await
            })
            .await
            .map(|_| ())
    });
    let results: Vec<Result<(), ClientError>> = futures::stream::iter(writes)
        .buffer_unordered(WRITERS)
        .collect()
        .await;
    results
        .into_iter()
        .collect::<Result<(), _>>()
        .map_err(failed("writing the benchmark's photos"))?;
    let started = Instant::now();
    loop {
        let page = client
            .scan_global_index(
                catalog,
                &IndexQuery::new("PhotosByTag").equal(["qa"]),
                IndexRead::AsApplied,
            )
            .await
            .map_err(failed("scanning PhotosByTag"))?;
        if page.entries.len() as i64 >= USERS / 2 {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(SpecError::Invalid(
                "the global index did not show the benchmark's photos within 60 s".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Times `runs` runs of `query`, each returning how many entities it found.
async fn timed<F, Fut>(kind: &str, runs: u32, mut query: F) -> Result<QueryKind, SpecError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize, ClientError>>,
{
    let mut latencies = histogram();
    let mut hits = 0;
    for _ in 0..runs {
        let started = Instant::now();
        hits = query().await.map_err(failed(kind))?;
        record(&mut latencies, started.elapsed());
    }
    Ok(timing::kind(kind, hits, &latencies))
}

/// Runs the query benchmark from `site`, `runs` times per kind.
pub async fn run_queries(
    config: &ClusterConfig,
    site: &str,
    runs: u32,
) -> Result<QueryReport, SpecError> {
    if runs == 0 {
        return Err(SpecError::Invalid("--runs must be at least 1".into()));
    }
    let client = Client::connect(config, site)
        .await
        .map_err(|error| SpecError::Connect {
            site: site.to_string(),
            error,
        })?;
    let lockd = megastore_rpc::LockdClient::new(config).map_err(SpecError::Invalid)?;
    let catalog = match load_catalog(&lockd)
        .await
        .map_err(failed("loading the schema"))?
    {
        Some((catalog, _)) if catalog.index("PhotosByTag").is_some() => catalog,
        _ => {
            return Err(SpecError::Invalid(
                "the query benchmark needs the photo schema: `megastore schema apply schema/photos.msdl` first".into(),
            ));
        }
    };
    populate(&client, &catalog).await?;
    let catalog = &catalog;
    let client = &client;
    let scan = |read| async move {
        let query = IndexQuery::new("PhotosByTag").equal(["q100"]);
        Ok(client
            .scan_global_index(catalog, &query, read)
            .await?
            .entries
            .len())
    };
    let mut kinds = vec![
        timed("scan 100 hits", runs, || scan(IndexRead::AsApplied)).await?,
        timed("scan 100 hits, verified", runs, || {
            scan(IndexRead::Verified)
        })
        .await?,
    ];
    kinds.push(
        timed("merge-join of two tags", runs, || async move {
            let queries = [
                IndexQuery::new("PhotosByTag").equal(["qa"]),
                IndexQuery::new("PhotosByTag").equal(["qb"]),
            ];
            let joined = client
                .merge_join(catalog, &queries, None, None, IndexRead::AsApplied)
                .await?;
            Ok(joined.hits.len())
        })
        .await?,
    );
    let keys: Vec<Vec<Value>> = (0..USERS)
        .map(|n| vec![Value::from(BENCH_USER_FIRST + n), Value::from(1i32)])
        .collect();
    let keys = &keys;
    kinds.push(
        timed(
            "lookup of 1,000 photos in 1,000 groups",
            runs,
            || async move {
                let reads = client
                    .read_entities(catalog, ReadMode::Current, "Photo", keys, LOOKUPS_IN_FLIGHT)
                    .await?;
                Ok(reads.iter().filter(|r| r.entity.is_some()).count())
            },
        )
        .await?,
    );
    Ok(QueryReport {
        site: site.to_string(),
        kinds,
    })
}
