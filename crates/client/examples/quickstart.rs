//! The client library's first steps against a running cluster: a transaction on an
//! untyped entity group, the same row read back in every mode, and a versioned claim.
//!
//! ```sh
//! megastore dev --data-dir /tmp/ms &   # a local cluster (or any cluster's config)
//! cargo run -p megastore-client --example quickstart -- /tmp/ms/cluster.toml A
//! ```
//!
//! Arguments: the cluster's `cluster.toml` (default: `$MEGASTORE_CONFIG`) and the site
//! to act from (default `A`).

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use anyhow::Context;
use megastore_client::{Assert, Client, Mutation, Outcome, TxnResult};
use megastore_config::ClusterConfig;
use megastore_paxos::{DataQuery, ReadMode};

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
    let alice = megastore_client::group(b"quickstart-user-0001")?;
    let profile = b"profile".to_vec();

    // A transaction: its reads come from one position; it is retried on conflict.
    let (visits, outcome) = client
        .transaction(&alice, async |txn| {
            let row = txn.get(&profile).await?;
            let visits = row
                .and_then(|r| r.value(b"visits").and_then(|v| v.first().copied()))
                .unwrap_or(0)
                .wrapping_add(1);
            txn.set(&profile, b"visits", &[visits])?;
            Ok(visits)
        })
        .await?;
    match outcome {
        Outcome::Committed { position, .. } => {
            println!("visit {visits} committed at log position {}", position.0);
        }
        Outcome::ReadOnly => println!("nothing to commit"),
    }

    // The row read back outside a transaction, in each mode, saying how it was served.
    for mode in [
        ReadMode::Current,
        ReadMode::Snapshot,
        ReadMode::Inconsistent,
    ] {
        let read = client
            .read(&alice, mode, DataQuery::Rows(vec![profile.clone()]))
            .await?;
        let seen = read
            .rows
            .first()
            .and_then(|r| r.value(b"visits").and_then(|v| v.first().copied()));
        println!(
            "{mode:?} read: visits {seen:?} at {:?} from replica {} ({:?})",
            read.position.map(|p| p.0),
            read.replica.0,
            read.path
        );
    }

    // A versioned claim (seed 000's primitive): only the first claimer wins.
    let claim = client
        .versioned_txn(
            &alice,
            &[Assert::Absent {
                key: b"job/1".to_vec(),
            }],
            &[Mutation::Put {
                key: b"job/1".to_vec(),
                value: b"quickstart".to_vec(),
            }],
        )
        .await?;
    match claim {
        TxnResult::Applied { .. } => println!("claimed job/1"),
        TxnResult::AssertFailed { .. } => println!("job/1 was claimed already"),
    }
    Ok(())
}
