//! A unique blog name, claimed atomically with the blog it names (the blogs schema):
//! the name's `BlogName` entity and the `Blog` entity live in groups of their own, and
//! one transaction across both writes them together — two-phase commit — or not at all.
//!
//! ```sh
//! megastore dev --data-dir /tmp/ms &
//! megastore schema apply schema/blogs.msdl --config /tmp/ms/cluster.toml
//! cargo run -p megastore-client --example blog_names -- /tmp/ms/cluster.toml A rust-notes 7
//! ```
//!
//! Arguments: the cluster's `cluster.toml`, the site to act from, the name, the new
//! blog's id, and optionally its title.

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use anyhow::Context;
use megastore_client::schema_store::load_catalog;
use megastore_client::{Client, entity_group};
use megastore_config::ClusterConfig;
use megastore_schema::{Entity, FieldValue, Value};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, site, name, blog, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: blog_names CLUSTER_TOML SITE NAME BLOG_ID [TITLE]");
    };
    let blog: i64 = blog.parse().context("BLOG_ID: a whole number")?;
    let title = rest
        .first()
        .cloned()
        .unwrap_or_else(|| format!("blog {blog}"));
    let config = ClusterConfig::load(path.as_ref())?;
    let client = Client::connect(&config, site).await?;
    let lockd = megastore_rpc::LockdClient::new(&config).map_err(anyhow::Error::msg)?;
    let (catalog, _) = load_catalog(&lockd)
        .await?
        .context("no schema applied: megastore schema apply schema/blogs.msdl")?;
    let name_group = entity_group(&catalog, "BlogName", &[Value::from(name.as_str())])?;
    let blog_group = entity_group(&catalog, "Blog", &[Value::from(blog)])?;
    // The name's group first: its log records the decision.
    let groups = [name_group.clone(), blog_group.clone()];
    let (owner, outcome) = client
        .transaction_multi(&groups, async |txn| {
            // Its id: what `resolve_multi` takes, if the outcome is ever unknown.
            println!(
                "claiming {name} for blog {blog} as transaction {}",
                txn.id()
            );
            let taken = txn
                .on(&name_group)?
                .get_entity(&catalog, "BlogName", &[Value::from(name.as_str())])
                .await?;
            if let Some(taken) = taken {
                return Ok(taken.fields.get("blog_id").cloned());
            }
            let claim = Entity::new("BlogName")
                .set("name", name.as_str())
                .set("blog_id", blog);
            txn.on(&name_group)?.put_entity(&catalog, &claim).await?;
            let made = Entity::new("Blog")
                .set("blog_id", blog)
                .set("owner_id", 1i64)
                .set("title", title.as_str())
                .set("name", name.as_str());
            txn.on(&blog_group)?.put_entity(&catalog, &made).await?;
            Ok(None)
        })
        .await?;
    match owner {
        None => println!("claimed {name} for blog {blog}: {outcome:?}"),
        Some(FieldValue::Single(Value::Int64(other))) => {
            println!("{name} is taken by blog {other}")
        }
        Some(other) => println!("{name} is taken ({other:?})"),
    }
    Ok(())
}
