//! `megastore watch`: every committed change to one untyped group's keys, printed as it
//! is committed, one line per key changed (the client library's watch).

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use megastore_client::{Client, KeyWatch, Watch};
use megastore_paxos::{CellWrite, DataQuery, ReadMode};
use megastore_rowstore::KeyRange;
use megastore_types::{Position, TxnId};

use crate::cluster_arg::ClusterArg;

/// Print every committed change to a group's keys as it happens.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The untyped group's name.
    #[arg(long)]
    group: String,
    /// Watch the versioned keys that start with this (the default, with an empty
    /// prefix: all of them).
    #[arg(long, default_value = "", conflicts_with_all = ["start", "end"])]
    prefix: String,
    /// Watch the untyped keys from this one on (with --end: up to it) instead.
    #[arg(long)]
    start: Option<String>,
    /// Watch the untyped keys before this one (with --start, or from the first).
    #[arg(long)]
    end: Option<String>,
    /// The first log position to show (default: the next one committed).
    #[arg(long)]
    from: Option<u64>,
    /// Stop after this many changed keys (default: run until interrupted).
    #[arg(long)]
    count: Option<u64>,
    /// The site to act from (default: the first full replica's).
    #[arg(long)]
    site: Option<String>,
}

/// A watch of either kind.
enum Watching {
    Keys(KeyWatch),
    Rows(Watch),
}

impl Watching {
    /// The next position's lines: one per key changed.
    async fn next_lines(&mut self) -> Result<Vec<String>, megastore_client::ClientError> {
        Ok(match self {
            Watching::Keys(watch) => {
                let event = watch.next().await?;
                event
                    .changes
                    .iter()
                    .map(|(txn, entry)| {
                        let value = entry
                            .value
                            .as_deref()
                            .map_or("(deleted)".to_string(), shown);
                        format!(
                            "{}  {}  {}  v{}  {value}",
                            event.position,
                            txn_name(*txn),
                            shown(&entry.key),
                            entry.version
                        )
                    })
                    .collect()
            }
            Watching::Rows(watch) => {
                let event = watch.next().await?;
                let mut lines = Vec::new();
                for change in &event.changes {
                    for write in &change.writes {
                        let cells: Vec<String> = write
                            .cells
                            .iter()
                            .map(|c| match c {
                                CellWrite::Set { column, value } => {
                                    format!("{}={}", shown(column), shown(value))
                                }
                                CellWrite::Delete { column } => {
                                    format!("{} deleted", shown(column))
                                }
                            })
                            .collect();
                        lines.push(format!(
                            "{}  {}  {}  {}",
                            event.position,
                            txn_name(change.txn),
                            shown(&write.row),
                            cells.join(" ")
                        ));
                    }
                }
                lines
            }
        })
    }
}

/// Bytes as text, cut to a line's worth.
fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut shown: String = text
        .chars()
        .take(60)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if text.chars().count() > 60 {
        shown.push('…');
    }
    shown
}

fn txn_name(txn: TxnId) -> String {
    format!("txn {}.{}", txn.client.0, txn.seq)
}

pub(crate) fn run(args: WatchArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let site = crate::bench_cmd::site_or_first_full(&config, args.site.as_deref())?;
    crate::logging::init_quiet();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let client = Client::connect(&config, &site)
            .await
            .with_context(|| format!("connecting at site {site}"))?;
        let eg = megastore_client::group(args.group.as_bytes())?;
        let from = match args.from {
            Some(p) => Position(p),
            None => {
                let read = client
                    .read(&eg, ReadMode::Current, DataQuery::Rows(Vec::new()))
                    .await?;
                read.position.unwrap_or(Position::NONE).next()
            }
        };
        let mut watching = if args.start.is_some() || args.end.is_some() {
            let range = KeyRange {
                start: args.start.unwrap_or_default().into_bytes(),
                end: args.end.map(String::into_bytes),
            };
            Watching::Rows(client.watch(&eg, &range, from)?)
        } else {
            Watching::Keys(client.watch_keys(&eg, args.prefix.as_bytes(), from)?)
        };
        eprintln!(
            "watching group {} from position {from} (Ctrl-C to stop)",
            args.group
        );
        let mut shown_so_far = 0;
        loop {
            for line in watching.next_lines().await? {
                println!("{line}");
                shown_so_far += 1;
                if args.count.is_some_and(|count| shown_so_far >= count) {
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
    })
}
