//! `megastore schema …`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use megastore_schema::{Catalog, compile, summary};

use crate::cluster_arg::ClusterArg;

#[derive(Debug, Subcommand)]
pub(crate) enum SchemaCommand {
    /// Check schema files: print a summary of each, or every error with file:line:col.
    Check {
        /// Schema files, each one schema.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Print each catalog (with its ids and fingerprint) as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Store a schema as the cluster's catalog (in lockd), keeping the ids of an
    /// earlier version; an incompatible change is refused.
    Apply {
        /// The schema file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

pub(crate) fn run(command: SchemaCommand) -> anyhow::Result<ExitCode> {
    match command {
        SchemaCommand::Check { files, json } => check(&files, json),
        SchemaCommand::Apply { file, cluster } => apply(&file, &cluster),
    }
}

fn check(files: &[PathBuf], json: bool) -> anyhow::Result<ExitCode> {
    let mut failed = 0;
    for (i, path) in files.iter().enumerate() {
        match load(path) {
            Ok(catalog) if json => println!("{}", catalog.to_json()),
            Ok(catalog) => {
                if i > 0 {
                    println!();
                }
                println!("{}: ok", path.display());
                print!("{}", summary(&catalog));
            }
            Err(error) => {
                failed += 1;
                eprintln!("{error:#}");
            }
        }
    }
    if failed > 0 {
        eprintln!("{failed} of {} schema file(s) have errors", files.len());
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn apply(file: &Path, cluster: &ClusterArg) -> anyhow::Result<ExitCode> {
    // Checked locally first: errors point at the file with line and column.
    load(file)?;
    let text = std::fs::read_to_string(file)?;
    let config = cluster.load()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let (catalog, version) = runtime.block_on(async {
        let lockd = megastore_rpc::LockdClient::new(&config).map_err(anyhow::Error::msg)?;
        let name = file.display().to_string();
        megastore_client::schema_store::apply_schema(&lockd, &name, &text)
            .await
            .map_err(anyhow::Error::from)
    })?;
    println!(
        "schema {} applied as catalog version {version} (fingerprint {:016x}, {} tables, {} indexes)",
        catalog.name,
        catalog.fingerprint.0,
        catalog.tables.len(),
        catalog.indexes.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Reads and compiles one schema file.
pub(crate) fn load(path: &Path) -> anyhow::Result<Catalog> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let valid = &bytes[..e.valid_up_to()];
        let line = valid.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = valid.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
        let col = String::from_utf8_lossy(&valid[line_start..])
            .chars()
            .count()
            + 1;
        anyhow::anyhow!(
            "{}:{line}:{col}: error: the file is not UTF-8 text",
            path.display()
        )
    })?;
    compile(&path.display().to_string(), text, None).map_err(anyhow::Error::from)
}
