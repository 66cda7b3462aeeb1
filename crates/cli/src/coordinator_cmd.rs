//! `megastore coordinator`: run the coordinator of one full replica, or disable one.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use megastore_config::ClusterConfig;
use megastore_replica::{CoordinatorProcess, DisableOutcome, disable_coordinator};

use crate::cluster_arg::ClusterArg;

/// Run the coordinator of a full replica (`--config FILE --id NAME`), or `disable` one.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct CoordinatorArgs {
    #[command(subcommand)]
    action: Option<CoordinatorAction>,
    /// The cluster description.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Which full replica's coordinator this is (the replica's `name`).
    #[arg(long, value_name = "NAME")]
    id: Option<String>,
}

#[derive(Debug, Subcommand)]
enum CoordinatorAction {
    /// Revoke a coordinator's lock session (for an asymmetric partition): it stops
    /// vouching and gives its lock back when it next hears from lockd (a quarter lease),
    /// or its lock lapses at the end of its lease. Waits until the lock is free.
    Disable {
        /// The full replica whose coordinator to disable.
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

pub(crate) fn run(args: CoordinatorArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match args.action {
        Some(CoordinatorAction::Disable { name, cluster }) => {
            let config = cluster.load()?;
            let lease = config.timeouts.lock_lease();
            // Its lease, plus a lockd election that would restart it.
            let wait = lease + config.timeouts.rpc() * 4;
            println!(
                "coordinator of {name}: revoking its session, then waiting for its lock to be free (at most {:.1} s)",
                wait.as_secs_f64()
            );
            match runtime.block_on(disable_coordinator(&config, &name, wait))? {
                DisableOutcome::NotHeld => {
                    println!("coordinator of {name}: holds no lock (nothing to revoke)");
                }
                DisableOutcome::Free { waited } => println!(
                    "coordinator of {name}: session revoked; it stopped vouching and its lock was free after {:.2} s: writers go on without it",
                    waited.as_secs_f64()
                ),
                DisableOutcome::StillHeld { waited } => println!(
                    "coordinator of {name}: session revoked, but its lock is still held after {:.1} s (a lockd leader change restarts leases): writers go on once it lapses",
                    waited.as_secs_f64()
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let config_path = args.config.context("--config FILE is required")?;
            let name = args.id.context("--id NAME is required")?;
            let config = ClusterConfig::load(&config_path)?;
            crate::logging::init();
            runtime.block_on(async {
                let mut interrupts = crate::signals::Interrupts::listen()?;
                let process = CoordinatorProcess::start(&config, &name)
                    .await
                    .with_context(|| format!("starting the coordinator of {name:?}"))?;
                tracing::info!(replica = %name, "coordinator serving");
                interrupts.until().await;
                tracing::info!(replica = %name, "coordinator shutting down");
                process.shutdown().await;
                Ok(ExitCode::SUCCESS)
            })
        }
    }
}
