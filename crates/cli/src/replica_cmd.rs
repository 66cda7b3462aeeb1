//! `megastore replica`: run one replica (full, witness or read-only) until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use megastore_config::ClusterConfig;
use megastore_replica::ReplicaProcess;

/// Run one replica server of a cluster on its data directory.
#[derive(Debug, Args)]
pub(crate) struct ReplicaArgs {
    /// The cluster description.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Which `[[replicas]]` entry this is (its `name`).
    #[arg(long, value_name = "NAME")]
    id: String,
}

pub(crate) fn run(args: ReplicaArgs) -> anyhow::Result<ExitCode> {
    let config = ClusterConfig::load(&args.config)?;
    crate::logging::init();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let mut interrupts = crate::signals::Interrupts::listen()?;
        let replica = ReplicaProcess::start(&config, &args.id)
            .await
            .with_context(|| format!("starting replica {:?}", args.id))?;
        tracing::info!(replica = %args.id, rejoining = replica.rejoining(), "replica serving");
        interrupts.until().await;
        tracing::info!(replica = %args.id, "replica shutting down");
        replica.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}
