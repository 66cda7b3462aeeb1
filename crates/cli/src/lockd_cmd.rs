//! `megastore lockd`: run one node of the lock service until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use megastore_config::ClusterConfig;
use megastore_lockd::LockdNode;

/// Run one lock service node (openraft) of a cluster.
#[derive(Debug, Args)]
pub(crate) struct LockdArgs {
    /// The cluster description.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Which `[[lockd]]` node of the config this is (its `name`).
    #[arg(long, value_name = "NAME")]
    id: String,
}

pub(crate) fn run(args: LockdArgs) -> anyhow::Result<ExitCode> {
    let config = ClusterConfig::load(&args.config)?;
    crate::logging::init();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let mut interrupts = crate::signals::Interrupts::listen()?;
        let node = LockdNode::start(&config, &args.id)
            .await
            .with_context(|| format!("starting lockd node {:?}", args.id))?;
        let address = config
            .lockd_node(&args.id)
            .map(|l| l.address.clone())
            .unwrap_or_default();
        tracing::info!(node = %args.id, %address, "lockd serving");
        interrupts.until().await;
        tracing::info!(node = %args.id, "lockd shutting down");
        node.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}
