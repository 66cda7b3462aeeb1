//! Typed entities of the paper's photo schema, and a query across entity groups: three
//! users' photos written in their own groups, then found by tag through the global
//! index `PhotosByTag` (verified), merge-joined on two tags, and looked up in parallel.
//!
//! ```sh
//! megastore dev --data-dir /tmp/ms &   # applies schema/photos.msdl
//! cargo run -p megastore-client --example photos -- /tmp/ms/cluster.toml A
//! ```
//!
//! Arguments: the cluster's `cluster.toml` (default: `$MEGASTORE_CONFIG`) and the site
//! to act from (default `A`). The cluster must have the photo schema applied
//! (`megastore schema apply schema/photos.msdl`).

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use anyhow::Context;
use megastore_client::schema_store::load_catalog;
use megastore_client::{Client, IndexQuery, IndexRead, entity_group};
use megastore_config::ClusterConfig;
use megastore_paxos::ReadMode;
use megastore_schema::{Entity, Value};

/// Far from other programs' users.
const FIRST_USER: i64 = 8_800_000_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = match args.next() {
        Some(path) => path,
        None => std::env::var("MEGASTORE_CONFIG")
            .context("give the cluster's cluster.toml (or set MEGASTORE_CONFIG)")?,
    };
    let site = args.next().unwrap_or_else(|| "A".into());
    let config = ClusterConfig::load(path.as_ref())?;
    let client = Client::connect(&config, &site).await?;
    let lockd = megastore_rpc::LockdClient::new(&config).map_err(anyhow::Error::msg)?;
    let (catalog, version) = load_catalog(&lockd)
        .await?
        .filter(|(c, _)| c.index("PhotosByTag").is_some())
        .context("apply the photo schema first: megastore schema apply schema/photos.msdl")?;
    println!("schema {} (catalog version {version})", catalog.name);

    // Each user's photos in one transaction of that user's entity group.
    for n in 0..3 {
        let user = FIRST_USER + n;
        let eg = entity_group(&catalog, "User", &[Value::from(user)])?;
        client
            .transaction(&eg, async |txn| {
                let name = format!("user {n}");
                txn.put_entity(
                    &catalog,
                    &Entity::new("User").set("user_id", user).set("name", name),
                )
                .await?;
                for id in 1..=2i32 {
                    let tags: &[&str] = if id == 1 {
                        &["beach", "sunset"]
                    } else {
                        &["beach"]
                    };
                    let photo = Entity::new("Photo")
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
                        .set_repeated("tag", tags.iter().copied());
                    txn.put_entity(&catalog, &photo).await?;
                }
                Ok(())
            })
            .await?;
    }

    // Across groups: every photo tagged beach, each hit checked against its photo.
    let ours = |key: &[Value]| matches!(key.first(), Some(Value::Int64(u)) if (FIRST_USER..FIRST_USER + 3).contains(u));
    // A scan shows what the replica it reads has applied of each group: a write just
    // acknowledged may take a moment to show there, so look again briefly.
    let query = IndexQuery::new("PhotosByTag").equal(["beach"]);
    let mut tries = 0;
    let (beach, found) = loop {
        let beach = client
            .scan_global_index(&catalog, &query, IndexRead::Verified)
            .await?;
        let found: Vec<_> = beach
            .entries
            .iter()
            .filter(|e| ours(&e.primary_key))
            .cloned()
            .collect();
        tries += 1;
        if found.len() == 6 || tries == 50 {
            break (beach, found);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    println!(
        "beach: {} photos (verified, from replica {})",
        found.len(),
        beach.replica.0
    );
    for entry in &found {
        let key: Vec<String> = entry.primary_key.iter().map(ToString::to_string).collect();
        let thumbnail = match entry.stored.get("thumbnail_url") {
            Some(megastore_schema::FieldValue::Single(v)) => v.to_string(),
            _ => "(none)".into(),
        };
        println!("  photo ({}) thumbnail {thumbnail}", key.join(", "));
    }

    // Photos tagged beach and sunset: a merge-join of two scans.
    let both = client
        .merge_join(
            &catalog,
            &[
                IndexQuery::new("PhotosByTag").equal(["beach"]),
                IndexQuery::new("PhotosByTag").equal(["sunset"]),
            ],
            None,
            None,
            IndexRead::Verified,
        )
        .await?;
    let keys: Vec<Vec<Value>> = both
        .hits
        .into_iter()
        .map(|h| h.primary_key)
        .filter(|k| ours(k))
        .collect();
    println!("beach and sunset: {} photos", keys.len());

    // And the photos themselves, read in parallel from their groups.
    let photos = client
        .read_entities(&catalog, ReadMode::Current, "Photo", &keys, 32)
        .await?;
    for read in &photos {
        if let Some(photo) = &read.entity {
            let url = photo.value("full_url").map(ToString::to_string);
            println!("  {} ({:?})", url.unwrap_or_default(), read.path);
        }
    }
    Ok(())
}
