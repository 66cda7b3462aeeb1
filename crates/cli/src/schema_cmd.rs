//! `megastore schema …`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::io::IsTerminal;

use anyhow::Context;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
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
    /// earlier version; an incompatible change is refused. A new index on a table that
    /// already existed is then backfilled (scans of it are refused until that is done).
    Apply {
        /// The schema file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Leave new indexes building; `megastore schema backfill` fills them later.
        #[arg(long)]
        no_backfill: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Write the entries of every building index (or the named ones) for the entities
    /// written before it was added, group by group, resuming where an interrupted
    /// backfill stopped; then mark it ready.
    Backfill {
        /// Indexes (default: every building one).
        #[arg(value_name = "INDEX")]
        indexes: Vec<String>,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

pub(crate) fn run(command: SchemaCommand) -> anyhow::Result<ExitCode> {
    match command {
        SchemaCommand::Check { files, json } => check(&files, json),
        SchemaCommand::Apply {
            file,
            no_backfill,
            cluster,
        } => apply(&file, no_backfill, &cluster),
        SchemaCommand::Backfill { indexes, cluster } => {
            crate::logging::init_quiet();
            let config = cluster.load()?;
            backfill(&config, &indexes)
        }
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

fn apply(file: &Path, no_backfill: bool, cluster: &ClusterArg) -> anyhow::Result<ExitCode> {
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
    let building: Vec<&str> = catalog
        .indexes
        .iter()
        .filter(|i| !i.state.is_ready())
        .map(|i| i.name.as_str())
        .collect();
    if building.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    if no_backfill {
        println!(
            "building (scans refused until `megastore schema backfill`): {}",
            building.join(", ")
        );
        return Ok(ExitCode::SUCCESS);
    }
    crate::logging::init_quiet();
    backfill(&config, &[])
}

/// Backfills `indexes` (none: every building one) with progress on stderr.
fn backfill(
    config: &megastore_config::ClusterConfig,
    indexes: &[String],
) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    // The clients' channels are made in the runtime they will run on.
    let _entered = runtime.enter();
    let lockd = megastore_rpc::LockdClient::new(config).map_err(anyhow::Error::msg)?;
    let (catalog, _) = runtime
        .block_on(megastore_client::schema_store::load_catalog(&lockd))?
        .context("no schema applied: `megastore schema apply FILE` first")?;
    let names: Vec<String> = if indexes.is_empty() {
        catalog
            .indexes
            .iter()
            .filter(|i| !i.state.is_ready())
            .map(|i| i.name.clone())
            .collect()
    } else {
        for name in indexes {
            let index = catalog.require_index(name)?;
            anyhow::ensure!(
                !index.state.is_ready(),
                "index {name} is ready: nothing to backfill"
            );
        }
        indexes.to_vec()
    };
    if names.is_empty() {
        println!("every index is ready: nothing to backfill");
        return Ok(ExitCode::SUCCESS);
    }
    // Every gateway's writes use the new catalog once its cache expired; a program
    // holding its own catalog must reload it (docs/schema-language.md, "Adding an index").
    let settle = megastore_replica::CATALOG_FRESH * 2;
    eprintln!(
        "waiting {} ms for every gateway to load the new catalog",
        settle.as_millis()
    );
    std::thread::sleep(settle);
    let site = config
        .replicas
        .iter()
        .find(|r| r.kind == megastore_types::ReplicaKind::Full)
        .map(|r| r.site.clone())
        .context("the config has no full replica")?;
    let client = runtime.block_on(megastore_client::Client::connect(config, &site))?;
    let terminal = std::io::stderr().is_terminal();
    for name in &names {
        let id = catalog.require_index(name)?.id;
        let (before, _) =
            runtime.block_on(megastore_client::backfill::load_progress(&lockd, id))?;
        if before.groups > 0 {
            eprintln!(
                "backfill {name}: resuming after {} groups ({} entries)",
                before.groups, before.entries
            );
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .context("the progress bar template")?,
        );
        let ticker = bar.clone();
        let done = runtime.block_on(client.backfill_index(config, &lockd, name, |p| {
            let line = format!(
                "backfill {name}: {} groups, {} entries",
                p.groups, p.entries
            );
            if terminal {
                ticker.set_message(line);
                ticker.tick();
            } else {
                eprintln!("{line}");
            }
            std::ops::ControlFlow::Continue(())
        }));
        bar.finish_and_clear();
        let done = done.with_context(|| {
            format!("backfilling {name} (run `megastore schema backfill {name}` to resume)")
        })?;
        println!(
            "index {name} is ready: {} groups, {} entries written",
            done.groups, done.entries
        );
    }
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
