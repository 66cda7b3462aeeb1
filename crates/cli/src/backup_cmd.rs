//! `megastore backup`: a consistent copy of a stopped replica's store; restoring it
//! makes the replica rejoin (docs/operations.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use megastore_config::ClusterConfig;

/// Back up a stopped replica's store (restored, it rejoins as a non-voter until caught up).
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    /// The cluster description.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The replica (its `name`).
    #[arg(long, value_name = "NAME")]
    id: String,
    /// A new directory for the backup.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub(crate) fn run(args: BackupArgs) -> anyhow::Result<ExitCode> {
    let config = ClusterConfig::load(&args.config)?;
    let data_dir = megastore_replica::backup_replica(&config, &args.id, &args.out)?;
    println!(
        "backed up replica {} ({}) to {}\nto restore: stop the replica, replace {} with a copy of {}, start it — it rejoins as a non-voter per group until caught up",
        args.id,
        data_dir.display(),
        args.out.display(),
        data_dir.display(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
