//! `megastore demo`: a short tour of a running cluster — a transaction, reads in every
//! mode from different sites (with who served them and why), and the versioned
//! primitives racing.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use megastore_client::{Assert, Client, Mutation, Outcome, TxnResult};
use megastore_config::ClusterConfig;
use megastore_paxos::{DataQuery, ReadMode, ReadPath, ReadResult};
use megastore_types::ReplicaKind;

use crate::cluster_arg::ClusterArg;

/// Run a short demonstration workload against a running cluster.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[command(flatten)]
    cluster: ClusterArg,
}

/// How long the demo waits for a site's current reads to become local.
const LOCAL_READ_PATIENCE: Duration = Duration::from_secs(5);

fn why(read: &ReadResult) -> &'static str {
    match read.path {
        ReadPath::LocalVouched => "local replica; its coordinator vouched it is current",
        ReadPath::Majority => {
            "no vouching coordinator here: a majority said how far the log goes, then a replica caught up"
        }
        ReadPath::Snapshot => "the replica's last applied position, without asking anyone",
        ReadPath::Inconsistent => "whatever the replica has now, no position promised",
        ReadPath::AtPosition => "the state at a position a current read fixed before",
    }
}

fn show(config: &ClusterConfig, site: &str, mode: &str, read: &ReadResult, column: &[u8]) {
    let replica = config.replica_by_id(read.replica).map_or_else(
        || format!("#{}", read.replica.0),
        |r| format!("{} ({})", r.name, r.kind),
    );
    let value = read.rows.first().and_then(|r| r.value(column)).map_or_else(
        || "(absent)".to_string(),
        |v| String::from_utf8_lossy(v).into_owned(),
    );
    let position = read
        .position
        .map_or_else(|| "-".to_string(), |p| p.0.to_string());
    crate::say!(
        "  {mode:<12} at site {site}: {value:<10} position {position:<3} from replica {replica}"
    );
    crate::say!("               why: {}", why(read));
}

async fn connect(config: &ClusterConfig, site: &str) -> anyhow::Result<Client> {
    let started = Instant::now();
    loop {
        match Client::connect(config, site).await {
            Ok(client) => return Ok(client),
            Err(e) if started.elapsed() > Duration::from_secs(30) => {
                return Err(e).context("connecting (is the cluster up?)");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

pub(crate) fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(demo(&config, Some(&args.cluster.flag())))?;
    Ok(ExitCode::SUCCESS)
}

/// The demonstration itself, against the cluster of `config`; with `flag` (how other
/// commands reach it, e.g. ` --config FILE`), it ends by saying what to try next.
pub(crate) async fn demo(config: &ClusterConfig, flag: Option<&str>) -> anyhow::Result<()> {
    let full_sites: Vec<String> = config
        .replicas
        .iter()
        .filter(|r| r.kind == ReplicaKind::Full)
        .map(|r| r.site.clone())
        .collect();
    let Some(home) = full_sites.first().cloned() else {
        bail!("the config has no full replica");
    };
    let away = full_sites.get(1).cloned().unwrap_or_else(|| home.clone());
    let far = config
        .replicas
        .iter()
        .find(|r| r.kind == ReplicaKind::ReadOnly)
        .map(|r| r.site.clone());
    {
        let at_home = connect(config, &home).await?;
        let at_away = connect(config, &away).await?;
        let name = "demo-user-alice";
        let group = megastore_client::group(name.as_bytes())?;
        let profile = b"profile".to_vec();

        crate::say!("1. A transaction at site {home} on entity group {name}: set alice's name.");
        let started = Instant::now();
        let (_, outcome) = loop {
            let attempt = at_home
                .transaction(&group, async |txn| {
                    let before = txn.get(&profile).await?;
                    let visits = before
                        .as_ref()
                        .and_then(|r| r.value(b"visits"))
                        .and_then(|v| String::from_utf8_lossy(v).parse::<u64>().ok())
                        .unwrap_or(0);
                    txn.set(&profile, b"name", b"Alice")?;
                    txn.set(&profile, b"visits", (visits + 1).to_string().as_bytes())
                })
                .await;
            match attempt {
                Ok(done) => break done,
                // Coordinators may still be taking their locks right after `up`.
                Err(_) if started.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e).context("the first transaction"),
            }
        };
        if let Outcome::Committed { position, txn, .. } = outcome {
            crate::say!(
                "   committed at log position {} (transaction {}:{})",
                position.0,
                txn.client.0,
                txn.seq
            );
        }

        crate::say!("\n2. Reads of it in every mode:");
        // The first current read at a site may need a majority (its coordinator has
        // not vouched for a group it never saw, or a write elsewhere invalidated it); it
        // validates the local replica, and once the coordinator has taken that in, the
        // site's current reads are served locally: show the first, then the first local.
        for (site, client) in [(&home, &at_home), (&away, &at_away)] {
            let current = || {
                client.read(
                    &group,
                    ReadMode::Current,
                    DataQuery::Rows(vec![profile.clone()]),
                )
            };
            let first = current().await?;
            show(config, site, "current", &first, b"name");
            if first.path == ReadPath::LocalVouched {
                continue;
            }
            let started = Instant::now();
            loop {
                let read = current().await?;
                if read.path == ReadPath::LocalVouched {
                    show(config, site, "current", &read, b"name");
                    break;
                }
                if started.elapsed() > LOCAL_READ_PATIENCE {
                    crate::say!(
                        "               (site {site}'s coordinator did not vouch for {name} within {} s: \
                         `megastore status --group {name}` shows whether it holds its lock)",
                        LOCAL_READ_PATIENCE.as_secs()
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let read = at_away
            .read(
                &group,
                ReadMode::Inconsistent,
                DataQuery::Rows(vec![profile.clone()]),
            )
            .await?;
        show(config, &away, "inconsistent", &read, b"name");
        if let Some(far) = far {
            let at_far = connect(config, &far).await?;
            let read = at_far
                .read(
                    &group,
                    ReadMode::Snapshot,
                    DataQuery::Rows(vec![profile.clone()]),
                )
                .await?;
            show(config, &far, "snapshot", &read, b"name");
        }

        crate::say!("\n3. Versioned keys: two sites race to claim task/1 (assert: absent).");
        let key = b"task/1".to_vec();
        let claim = |who: &str| {
            (
                vec![Assert::Absent { key: key.clone() }],
                vec![Mutation::Put {
                    key: key.clone(),
                    value: who.as_bytes().to_vec(),
                }],
            )
        };
        let (home_claim, away_claim) = (claim(&home), claim(&away));
        let (a, b) = tokio::join!(
            at_home.versioned_txn(&group, &home_claim.0, &home_claim.1),
            at_away.versioned_txn(&group, &away_claim.0, &away_claim.1),
        );
        for (site, result) in [(&home, a?), (&away, b?)] {
            match result {
                TxnResult::Applied { versions } => {
                    crate::say!("   site {site}: claimed it (version {})", versions[&key])
                }
                TxnResult::AssertFailed { .. } => {
                    crate::say!("   site {site}: lost (the key was no longer absent)")
                }
            }
        }
        let entry = at_home.snapshot(&group, std::slice::from_ref(&key)).await?;
        let owner = entry[0]
            .value
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        crate::say!("   task/1 = {owner:?} at version {}", entry[0].version);

        if let Some(flag) = flag {
            crate::say!(
                "\nLook around with `megastore shell{flag}` and `megastore status{flag}`; \
                 measure with `megastore bench{flag}`."
            );
        }
        Ok(())
    }
}
