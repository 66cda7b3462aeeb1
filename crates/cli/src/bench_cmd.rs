//! `megastore bench`: a closed-loop workload against any cluster, with a progress bar,
//! then throughput and latency percentiles per operation kind, and one JSON line.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use comfy_table::Table;
use indicatif::{ProgressBar, ProgressStyle};
use megastore_bench::{Report, Spec};
use megastore_paxos::ReadMode;

use crate::cluster_arg::ClusterArg;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    Current,
    Snapshot,
    Inconsistent,
}

/// Run a closed-loop workload and report latency percentiles.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// Entity groups the operations spread over.
    #[arg(long, default_value_t = 100)]
    groups: u32,
    /// Concurrent clients, each with one operation outstanding.
    #[arg(long, default_value_t = 8)]
    clients: u32,
    /// Share of operations that are reads (0 to 1).
    #[arg(long, default_value_t = 0.5)]
    reads: f64,
    /// How reads are served.
    #[arg(long, value_enum, default_value_t = Mode::Current)]
    read_mode: Mode,
    /// Bytes per written value.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Stop after this many seconds (default 10; with --fill, a day).
    #[arg(long)]
    duration: Option<f64>,
    /// Run this many seconds first without measuring (default 0): a fresh group's first
    /// writes find no position leader yet.
    #[arg(long, value_name = "SECONDS", conflicts_with = "fill")]
    warmup: Option<f64>,
    /// Stop after this many operations (whichever comes first).
    #[arg(long)]
    operations: Option<u64>,
    /// A site the clients act from (repeat for several; default: every full replica's).
    #[arg(long = "site", value_name = "SITE")]
    sites: Vec<String>,
    /// Prefix of the groups' keys.
    #[arg(long, default_value = "bench")]
    group_prefix: String,
    /// Each client acts from every --site in turn, per group, so no write comes from
    /// the site of the group's position leader (the site of its last writer).
    #[arg(long)]
    rotate_sites: bool,
    /// Client connections per site that the clients share (default: one per client),
    /// as an application server's request handlers share one client: commits to one
    /// group through one connection are combined into shared log entries.
    #[arg(long, value_name = "N")]
    connections: Option<u32>,
    /// Time the photo schema's cross-group queries instead (a global index scan of 100
    /// hits as applied and verified, a merge-join of two tags, a lookup of 1,000
    /// photos from 1,000 groups), each `--runs` times, from the first --site; needs
    /// `megastore schema apply schema/photos.msdl`.
    #[arg(long)]
    queries: bool,
    /// Time queue messages instead: sent one at a time from the first --site, consumed
    /// at the second (default: the first two full replicas' sites), delivered by the
    /// replicas; `--runs` messages.
    #[arg(long, conflicts_with = "queries")]
    queues: bool,
    /// Time a transaction across two groups (two-phase commit) next to the same
    /// transaction in one group instead: `--runs` of each, interleaved, from the first
    /// --site.
    #[arg(long, conflicts_with_all = ["queries", "queues"])]
    two_phase: bool,
    /// With --two-phase: N more clients at that site write blindly, in closed loops, to
    /// the cross-group transaction's coordinator group while the runs last (a hot
    /// coordinator group); their rate, latencies and give-ups are reported too.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "two_phase")]
    hot_writers: u32,
    /// Make N groups quickly instead: write one row in each of N groups (`--group-prefix`
    /// and a number), each once, --clients at a time, with a progress bar; no reads.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["queries", "queues", "two_phase", "etcd", "groups", "reads", "operations"]
    )]
    fill: Option<u32>,
    /// Time a committed change's way to a watcher instead: `--runs` versioned keys
    /// written one at a time at the first --site, watched at the second (default: the
    /// first two full replicas' sites); with --etcd, puts and a watch of etcd.
    #[arg(long, conflicts_with_all = ["queries", "queues", "two_phase"])]
    watches: bool,
    /// Time the task board instead (`crates/recipes`): --clients workers claim and
    /// complete `--runs` tasks of one board (one entity group), from the first --site;
    /// with --etcd, the same board code on etcd's transactions.
    #[arg(long, conflicts_with_all = ["queries", "queues", "two_phase", "watches"])]
    board: bool,
    /// Time leases instead: `--runs` leases granted, each kept alive once, then revoked,
    /// 16 at a time, from the first --site; with --etcd, etcd's leases.
    #[arg(long, conflicts_with_all = ["queries", "queues", "two_phase", "watches", "board"])]
    leases: bool,
    /// Run the same closed loop against an etcd cluster instead (comma-separated
    /// endpoints, e.g. `127.0.0.1:2379`): each client puts one of --groups keys (gets,
    /// for the --reads share), one operation outstanding; no cluster.toml is read.
    #[arg(
        long,
        value_name = "ENDPOINTS",
        value_delimiter = ',',
        conflicts_with_all = ["queries", "queues", "two_phase", "rotate_sites"]
    )]
    etcd: Vec<String>,
    /// Drive the cluster through its public gRPC API instead of the client library, as
    /// a client in another language does: each client talks to the full replica at its
    /// --site (Begin, Write, Commit for a write; Read for a read).
    #[arg(
        long,
        conflicts_with_all = ["queries", "queues", "two_phase", "watches", "board", "leases", "etcd", "rotate_sites", "fill"]
    )]
    grpc: bool,
    /// With --grpc, begin each write blind (`BeginRequest.blind`): it only writes, and
    /// Begin takes the position of the replica's commit in flight instead of reading.
    #[arg(long, requires = "grpc")]
    blind: bool,
    /// Runs of each query with --queries (messages with --queues, transactions of each
    /// kind with --two-phase, changes with --watches).
    #[arg(long, default_value_t = 50)]
    runs: u32,
    /// Also draw each operation kind's latency distribution (a percentile plot) into
    /// this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
    /// Also count the operations completed in each interval of this many milliseconds
    /// (in the JSON line's `timeline`, drawn as a sparkline): to see a stall, such as a
    /// range move's, over time.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    timeline: Option<u64>,
}

/// The site of the cluster's first full replica: where a benchmark acts from unless
/// told.
pub(crate) fn first_full_site(config: &megastore_config::ClusterConfig) -> anyhow::Result<String> {
    config
        .replicas
        .iter()
        .find(|r| r.kind == megastore_types::ReplicaKind::Full)
        .map(|r| r.site.clone())
        .context("the cluster has no full replica to act from")
}

/// `site` if given, else the site of the cluster's first full replica.
pub(crate) fn site_or_first_full(
    config: &megastore_config::ClusterConfig,
    site: Option<&str>,
) -> anyhow::Result<String> {
    match site {
        Some(site) => Ok(site.to_string()),
        None => first_full_site(config),
    }
}

/// One row per measure: its name (under `first`), runs and percentiles.
fn kinds_table(first: &str, kinds: &[megastore_bench::QueryKind]) -> Table {
    let mut table = Table::new();
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_header([first, "COUNT", "P50 ms", "P99 ms", "MAX ms"]);
    for k in kinds {
        table.add_row([
            k.kind.clone(),
            k.count.to_string(),
            millis(k.p50_us),
            millis(k.p99_us),
            millis(k.max_us),
        ]);
    }
    table
}

fn render_queries(report: &megastore_bench::QueryReport) -> String {
    let mut table = Table::new();
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_header(["QUERY", "HITS", "RUNS", "P50 ms", "P99 ms", "MAX ms"]);
    for k in &report.kinds {
        table.add_row([
            k.kind.clone(),
            k.hits.to_string(),
            k.count.to_string(),
            millis(k.p50_us),
            millis(k.p99_us),
            millis(k.max_us),
        ]);
    }
    format!(
        "queries from site {}, one at a time\n{table}\n",
        report.site
    )
}

/// The first two --site values, each defaulting to the next full replica's site (or
/// the first's, in a cluster with one).
fn two_sites(
    sites: &[String],
    config: &megastore_config::ClusterConfig,
) -> anyhow::Result<(String, String)> {
    let full: Vec<String> = config
        .replicas
        .iter()
        .filter(|r| r.kind == megastore_types::ReplicaKind::Full)
        .map(|r| r.site.clone())
        .collect();
    let pick = |i: usize| {
        sites
            .get(i)
            .or_else(|| full.get(i))
            .or_else(|| full.first())
            .cloned()
    };
    Ok((
        pick(0).context("the cluster has no full replica to act from")?,
        pick(1).context("the cluster has no full replica to act from")?,
    ))
}

/// `--queues`: a queue message's way from its sender's commit to its consumption.
fn run_queues(
    sites: &[String],
    messages: u32,
    config: &megastore_config::ClusterConfig,
) -> anyhow::Result<ExitCode> {
    let (from, to) = two_sites(sites, config)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let _entered = runtime.enter();
    let bar = ProgressBar::new_spinner();
    bar.set_message(format!(
        "sending {messages} messages from site {from}, consuming them at site {to}"
    ));
    bar.enable_steady_tick(Duration::from_millis(200));
    let report = runtime.block_on(megastore_bench::run_queues(config, &from, &to, messages));
    bar.finish_and_clear();
    let report = report?;
    let table = kinds_table("MEASURE", &report.kinds);
    print!("queue messages from site {from} to site {to}, delivered by the replicas\n{table}\n");
    println!("{}", report.json_line());
    Ok(ExitCode::SUCCESS)
}

/// `--watches`: a committed change's way to a watcher at another site (or, with
/// `--etcd`, etcd's put to its watch).
fn run_watches(
    sites: &[String],
    changes: u32,
    config: Option<&megastore_config::ClusterConfig>,
    etcd: &[String],
) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let _entered = runtime.enter();
    let bar = ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(200));
    let report = match config {
        Some(config) => {
            let (writer, watcher) = two_sites(sites, config)?;
            bar.set_message(format!(
                "writing {changes} keys at site {writer}, watching them at site {watcher}"
            ));
            runtime.block_on(megastore_bench::run_watches(
                config, &writer, &watcher, changes,
            ))
        }
        None => {
            bar.set_message(format!("putting {changes} keys to etcd, watching them"));
            runtime.block_on(megastore_bench::run_etcd_watches(etcd, changes))
        }
    };
    bar.finish_and_clear();
    let report = report?;
    let table = kinds_table("MEASURE", &report.kinds);
    match config {
        Some(_) => print!(
            "changes written at site {} and watched at site {}\n{table}\n",
            report.writer_site, report.watcher_site
        ),
        None => print!("etcd: changes put and watched\n{table}\n"),
    }
    println!("{}", report.json_line());
    Ok(ExitCode::SUCCESS)
}

/// `--two-phase`: a transaction across two groups next to one in a single group.
fn run_two_phase(
    site: Option<String>,
    runs: u32,
    hot_writers: u32,
    config: &megastore_config::ClusterConfig,
) -> anyhow::Result<ExitCode> {
    let site = match site {
        Some(site) => site,
        None => first_full_site(config)?,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let _entered = runtime.enter();
    let bar = ProgressBar::new_spinner();
    bar.set_message(format!(
        "{runs} transactions of each kind from site {site}, one at a time, {hot_writers} hot writers"
    ));
    bar.enable_steady_tick(Duration::from_millis(200));
    let report = runtime.block_on(megastore_bench::run_two_phase(
        config,
        &site,
        runs,
        hot_writers,
    ));
    bar.finish_and_clear();
    let report = report?;
    let table = kinds_table("TRANSACTION", &report.kinds);
    print!("read-modify-write transactions from site {site}, first read to commit\n{table}\n");
    if report.two_phase_retries > 0 {
        println!(
            "{} cross-group attempt(s) aborted (a conflict, or unknown and then aborted) and ran again",
            report.two_phase_retries
        );
    }
    if report.two_phase_give_ups > 0 {
        println!(
            "{} cross-group transaction(s) gave up: every attempt conflicted",
            report.two_phase_give_ups
        );
    }
    if hot_writers > 0 {
        println!(
            "{hot_writers} hot writers: {:.1} blind writes/s to the coordinator group, {} gave up after {} attempts, {} failed",
            report.hot_writes_per_s,
            report.hot_give_ups,
            megastore_bench::HOT_WRITE_ATTEMPTS,
            report.hot_errors
        );
    }
    if report.hot_writers_cold > 0 {
        println!(
            "{} hot writer(s) had not committed once after {} s: the runs began without them",
            report.hot_writers_cold,
            megastore_bench::HOT_WARM_UP_MAX.as_secs()
        );
    }
    if let Some(error) = &report.hot_error {
        println!("a hot writer's first error: {error}");
    }
    println!("{}", report.json_line());
    Ok(ExitCode::SUCCESS)
}

/// `--queries`: the cross-group query benchmark.
fn run_queries(
    site: Option<String>,
    runs: u32,
    config: &megastore_config::ClusterConfig,
) -> anyhow::Result<ExitCode> {
    let site = match site {
        Some(site) => site,
        None => first_full_site(config)?,
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let _entered = runtime.enter();
    let bar = ProgressBar::new_spinner();
    bar.set_message("writing 1,000 photos, then timing each query");
    bar.enable_steady_tick(Duration::from_millis(200));
    let report = runtime.block_on(megastore_bench::run_queries(config, &site, runs));
    bar.finish_and_clear();
    let report = report?;
    print!("{}", render_queries(&report));
    println!("{}", report.json_line());
    Ok(ExitCode::SUCCESS)
}

fn millis(micros: u64) -> String {
    format!("{:.2}", micros as f64 / 1000.0)
}

/// Columns of the timeline's sparkline at most.
const SPARKLINE_COLUMNS: usize = 72;

/// The timeline as a sparkline of operations per interval (each column the emptiest of
/// the intervals it covers, so a stall shows), the emptiest interval and the slowest
/// write's.
fn render_timeline(timeline: &megastore_bench::Timeline) -> String {
    let intervals = &timeline.intervals;
    let done = |i: &megastore_bench::Interval| i.reads + i.writes;
    let per_column = intervals.len().div_ceil(SPARKLINE_COLUMNS).max(1);
    let columns: Vec<u64> = intervals
        .chunks(per_column)
        .map(|chunk| chunk.iter().map(done).min().unwrap_or(0))
        .collect();
    let most = columns.iter().copied().max().unwrap_or(0).max(1);
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let line: String = columns
        .iter()
        .map(|&n| {
            let step = usize::try_from(n * 7 / most).unwrap_or(7);
            if n == 0 { ' ' } else { BARS[step.min(7)] }
        })
        .collect();
    let seconds = |at_ms: u64| at_ms as f64 / 1000.0;
    let mut text = format!(
        "operations per {} ms interval ({} interval(s) a column, the emptiest shown):\n  |{line}|\n",
        timeline.width_ms, per_column
    );
    if let Some(emptiest) = intervals.iter().min_by_key(|i| done(i)) {
        text.push_str(&format!(
            "  emptiest interval: {} operation(s) at {:.1} s",
            done(emptiest),
            seconds(emptiest.at_ms)
        ));
    }
    if let Some(slowest) = intervals.iter().max_by_key(|i| i.write_max_us) {
        text.push_str(&format!(
            "; slowest write: {} ms, completed at {:.1} s",
            millis(slowest.write_max_us),
            seconds(slowest.at_ms)
        ));
    }
    text.push('\n');
    text
}

fn render(report: &Report) -> String {
    let mut table = Table::new();
    table.load_style(comfy_table::presets::NOTHING).set_header([
        "OP", "COUNT", "OPS/S", "P50 ms", "P90 ms", "P99 ms", "P99.9 ms", "MAX ms", "ERRORS",
    ]);
    for k in report.kinds.iter().filter(|k| k.count + k.errors > 0) {
        table.add_row([
            k.kind.clone(),
            k.count.to_string(),
            format!("{:.1}", k.per_second),
            millis(k.p50_us),
            millis(k.p90_us),
            millis(k.p99_us),
            millis(k.p999_us),
            millis(k.max_us),
            k.errors.to_string(),
        ]);
    }
    let mut text = format!(
        "{} operations in {:.1} s ({:.1}/s); {} clients{} at {}{}, {} groups, {:.0}% {} reads, {}-byte values\n{table}\n",
        report.operations(),
        report.elapsed_s,
        report.operations() as f64 / report.elapsed_s.max(1e-9),
        report.clients,
        report.connections.map_or(String::new(), |c| format!(
            " over {c} connection(s) per site"
        )),
        report.sites.join(","),
        if report.rotate_sites {
            " (rotating: no write from the leader's site)"
        } else {
            ""
        },
        report.groups,
        report.read_fraction * 100.0,
        report.read_mode,
        report.value_size,
    );
    if let Some(timeline) = &report.timeline {
        text.push_str(&render_timeline(timeline));
    }
    if report.conflicts > 0 {
        text.push_str(&format!(
            "{} write(s) gave up after repeated conflicts\n",
            report.conflicts
        ));
    }
    for m in &report.error_messages {
        text.push_str(&format!("error: {m}\n"));
    }
    text
}

/// What a debug build's bench says first: its client and (usually) its servers are
/// unoptimized, so its numbers say little about megastore.
const DEBUG_BUILD_WARNING: &str = "warning: this megastore is a debug build: its numbers are \
     not what megastore does (build with `cargo build --release -p megastore-cli` and run \
     the cluster from that binary to measure)";

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let config = if args.etcd.is_empty() {
        Some(args.cluster.load()?)
    } else {
        None
    };
    let duration = args
        .duration
        .unwrap_or(if args.fill.is_some() { 86_400.0 } else { 10.0 });
    anyhow::ensure!(
        duration.is_finite() && duration > 0.0 && duration <= 86_400.0,
        "--duration must be between 0 and 86400 seconds, not {duration}"
    );
    anyhow::ensure!(args.fill != Some(0), "--fill: give at least 1 group");
    let warmup = args.warmup.unwrap_or(0.0);
    anyhow::ensure!(
        warmup.is_finite() && (0.0..=3_600.0).contains(&warmup),
        "--warmup must be between 0 and 3600 seconds, not {warmup}"
    );
    let queries = args
        .queries
        .then(|| (args.sites.first().cloned(), args.runs));
    let plot = args.plot.clone();
    let spec = Spec {
        groups: args.fill.unwrap_or(args.groups),
        clients: args.clients,
        read_fraction: if args.fill.is_some() { 0.0 } else { args.reads },
        read_mode: match args.read_mode {
            Mode::Current => ReadMode::Current,
            Mode::Snapshot => ReadMode::Snapshot,
            Mode::Inconsistent => ReadMode::Inconsistent,
        },
        value_size: args.value_size,
        duration: Duration::from_secs_f64(duration),
        warmup: Duration::from_secs_f64(warmup),
        operations: args.fill.map(u64::from).or(args.operations),
        sites: args.sites,
        group_prefix: args.group_prefix,
        rotate_sites: args.rotate_sites,
        connections: args.connections,
        fill: args.fill.is_some(),
        timeline: args.timeline.map(Duration::from_millis),
        ..Spec::default()
    };
    crate::logging::init_quiet();
    if cfg!(debug_assertions) {
        // On stderr, so the report (and its JSON line) stay what they are.
        eprintln!("{DEBUG_BUILD_WARNING}");
    }
    if args.watches {
        return run_watches(&spec.sites, args.runs, config.as_ref(), &args.etcd);
    }
    if args.board || args.leases {
        let workload = if args.board { "board" } else { "leases" };
        let site = match &config {
            Some(config) => site_or_first_full(config, spec.sites.first().map(String::as_str))?,
            None => String::new(),
        };
        let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(200));
        bar.set_message(format!("{workload}: {} items", args.runs));
        let report = runtime.block_on(async {
            match (&config, args.board) {
                (Some(config), true) => {
                    megastore_bench::run_board(config, &site, args.runs, args.clients).await
                }
                (Some(config), false) => {
                    megastore_bench::run_leases(config, &site, args.runs).await
                }
                (None, true) => {
                    megastore_bench::run_etcd_board(&args.etcd, args.runs, args.clients).await
                }
                (None, false) => megastore_bench::run_etcd_leases(&args.etcd, args.runs).await,
            }
        });
        bar.finish_and_clear();
        let report = report?;
        let table = kinds_table("STEP", &report.kinds);
        print!(
            "{}: {} {} with {} workers, {:.1} per second\n{table}\n",
            report.system,
            report.items,
            if args.board {
                "tasks claimed and completed"
            } else {
                "leases kept alive"
            },
            report.workers,
            report.per_second
        );
        println!("{}", report.json_line());
        return Ok(ExitCode::SUCCESS);
    }
    let Some(config) = config else {
        return run_closed_loop(&spec, plot.as_deref(), |runtime, progress| {
            runtime.block_on(megastore_bench::run_etcd(&args.etcd, &spec, progress))
        });
    };
    if let Some((site, runs)) = queries {
        return run_queries(site, runs, &config);
    }
    if args.queues {
        return run_queues(&spec.sites, args.runs, &config);
    }
    if args.two_phase {
        return run_two_phase(
            spec.sites.first().cloned(),
            args.runs,
            args.hot_writers,
            &config,
        );
    }
    if args.grpc {
        return run_closed_loop(&spec, plot.as_deref(), |runtime, progress| {
            runtime.block_on(megastore_bench::run_grpc(
                &config, &spec, args.blind, progress,
            ))
        });
    }
    run_closed_loop(&spec, plot.as_deref(), |runtime, progress| {
        runtime.block_on(megastore_bench::run(&config, &spec, progress))
    })
}

/// Runs a closed loop (`start` runs it on the runtime, reporting progress), with a
/// progress bar; then the report as a table, a plot if asked, and one JSON line.
fn run_closed_loop(
    spec: &Spec,
    plot: Option<&std::path::Path>,
    start: impl FnOnce(
        &tokio::runtime::Runtime,
        Box<dyn Fn(u64) + Send + Sync>,
    ) -> Result<Report, megastore_bench::SpecError>,
) -> anyhow::Result<ExitCode> {
    let bar = match spec.operations {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos} ops ({per_sec})",
        )
        .context("the progress bar template")?,
    );
    let ticker = bar.clone();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let report = start(&runtime, Box::new(move |done| ticker.set_position(done)))?;
    bar.finish_and_clear();
    print!("{}", render(&report));
    if let Some(path) = plot {
        crate::bench_plot::write_plot(path, &report)?;
        eprintln!("latency plot: {}", path.display());
    }
    println!("{}", report.json_line());
    Ok(if report.operations() == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use megastore_bench::{Interval, Timeline};

    use super::*;

    fn interval(at_ms: u64, writes: u64, write_max_us: u64) -> Interval {
        Interval {
            at_ms,
            writes,
            write_max_us,
            ..Interval::default()
        }
    }

    #[test]
    fn the_sparkline_shows_each_columns_emptiest_interval() {
        let timeline = Timeline {
            from_unix_ms: 0,
            width_ms: 100,
            intervals: vec![
                interval(0, 10, 1_000),
                interval(100, 0, 0),
                interval(200, 5, 250_000),
            ],
        };
        let text = render_timeline(&timeline);
        assert!(text.contains("|█ ▄|"), "{text}");
        assert!(
            text.contains("emptiest interval: 0 operation(s) at 0.1 s"),
            "{text}"
        );
        assert!(
            text.contains("slowest write: 250.00 ms, completed at 0.2 s"),
            "{text}"
        );
        // Past the columns there are, a column is the emptiest of the intervals it
        // covers: a stall of one interval still shows.
        let mut intervals: Vec<Interval> = (0..200).map(|n| interval(n * 100, 8, 1)).collect();
        intervals[101].writes = 0;
        let long = Timeline {
            intervals,
            ..timeline
        };
        let line = render_timeline(&long);
        let bars = line.lines().nth(1).expect("the sparkline").trim();
        assert_eq!(bars.chars().count(), 2 + 200usize.div_ceil(3), "{line}");
        assert_eq!(bars.chars().filter(|&c| c == ' ').count(), 1, "{line}");
    }
}
