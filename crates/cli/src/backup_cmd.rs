//! `megastore backup`: a consistent copy of a replica's store — streamed from the
//! running replica, or taken from a stopped replica's directory on this machine;
//! restoring it makes the replica rejoin (docs/operations.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use megastore_replica::{BackupError, backup_replica, backup_running_replica};

use crate::cluster_arg::ClusterArg;

/// Back up a replica's store (restored, the replica rejoins as a non-voter per group
/// until caught up). A running replica streams a copy taken while it serves; a stopped
/// one is copied from its data directory on this machine.
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The replica (its `name`).
    #[arg(long, value_name = "NAME")]
    id: String,
    /// A new directory for the backup.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub(crate) fn run(args: BackupArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    crate::logging::init_quiet();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .context("the progress bar template")?,
    );
    let ticker = bar.clone();
    let online = runtime.block_on(backup_running_replica(
        &config,
        &args.id,
        &args.out,
        move |copy| {
            ticker.set_message(format!(
                "{} files, {} received",
                copy.files,
                indicatif::HumanBytes(copy.bytes)
            ));
            ticker.tick();
        },
    ));
    bar.finish_and_clear();
    let how = match online {
        Ok(copy) => format!(
            "streamed from the running replica: {} files, {}",
            copy.files,
            indicatif::HumanBytes(copy.bytes)
        ),
        Err(unreachable @ BackupError::Unreachable { .. }) => {
            // Not running (or not reachable from here): its directory, if it is here.
            let data_dir = backup_replica(&config, &args.id, &args.out).with_context(|| {
                format!("{unreachable}; and backing up its directory on this machine failed")
            })?;
            format!(
                "copied from the stopped replica's directory {}",
                data_dir.display()
            )
        }
        Err(failed) => return Err(failed.into()),
    };
    let data_dir = config
        .server_process(&args.id)
        .map(|p| p.process.data_dir.display().to_string())
        .unwrap_or_default();
    println!(
        "backed up replica {} to {} ({how})\nto restore: stop the replica, replace its data directory ({data_dir} in the config) with a copy of {}, start it — it rejoins as a non-voter per group until caught up",
        args.id,
        args.out.display(),
        args.out.display(),
    );
    Ok(ExitCode::SUCCESS)
}
