//! `megastore-sim`: runs seeds through the deterministic simulator.

// A command-line tool talks to its terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::hash::Hasher;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use megastore_sim::{BUG_NAMES, Bugs, SeedReport, Stats, bug, run_seed};

/// Deterministic simulation of megastore's protocol under faults.
#[derive(Debug, Parser)]
#[command(name = "megastore-sim", version, about)]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Re-introduce a known mistake (see --list-bugs).
    #[arg(long)]
    bug: Option<String>,
    /// Run one seed and print its readable trace.
    #[arg(long, value_name = "SEED")]
    reproduce: Option<u64>,
    /// Stop at the first violation.
    #[arg(long)]
    stop: bool,
    /// List the bug knobs.
    #[arg(long)]
    list_bugs: bool,
    /// Print the protocol measurements (quiet three-site topology) instead.
    #[arg(long)]
    measure: bool,
}

/// Runs a seed, turning a panic (a broken assertion in a protocol core) into a
/// violation report.
fn run(seed: u64, bugs: Bugs, readable: bool) -> SeedReport {
    match std::panic::catch_unwind(AssertUnwindSafe(|| run_seed(seed, bugs, readable))) {
        Ok(report) => report,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            SeedReport {
                seed,
                trace_hash: 0,
                violations: vec![megastore_sim::Violation {
                    invariant: "assertion",
                    at: 0,
                    detail: message,
                }],
                stats: Stats::default(),
                trace: Vec::new(),
            }
        }
    }
}

fn add(total: &mut Stats, s: &Stats) {
    total.messages += s.messages;
    total.faults += s.faults;
    total.commits += s.commits;
    total.combined += s.combined;
    total.committed_unread += s.committed_unread;
    total.relayed += s.relayed;
    total.relayed_by_relays += s.relayed_by_relays;
    total.reads_woken += s.reads_woken;
    total.conflicts += s.conflicts;
    total.unknown += s.unknown;
    total.resolved_not_committed += s.resolved_not_committed;
    total.reads_local += s.reads_local;
    total.reads_majority += s.reads_majority;
    total.reads_snapshot += s.reads_snapshot;
    total.reads_inconsistent += s.reads_inconsistent;
    total.reads_at_position += s.reads_at_position;
    total.hits_verified += s.hits_verified;
    total.hits_stale += s.hits_stale;
    total.messages_delivered += s.messages_delivered;
    total.two_phase_committed += s.two_phase_committed;
    total.two_phase_aborted += s.two_phase_aborted;
    total.two_phase_unknown += s.two_phase_unknown;
    total.prepared_settled += s.prepared_settled;
    total.decisions_collected += s.decisions_collected;
    total.failed += s.failed;
    total.wipes += s.wipes;
    total.installs += s.installs;
    total.failed_installs += s.failed_installs;
    total.collections += s.collections;
    total.evictions += s.evictions;
    total.splits += s.splits;
    total.removals += s.removals;
    total.full_removals += s.full_removals;
    total.catch_ups += s.catch_ups;
    total.spares += s.spares;
    total.moves_finished += s.moves_finished;
    total.moves_aborted += s.moves_aborted;
    total.copy_pages += s.copy_pages;
    total.short_final_copies += s.short_final_copies;
    total.clients_behind += s.clients_behind;
    total.final_scans += s.final_scans;
}

fn summary(seeds: u64, s: &Stats, violations: usize) -> String {
    format!(
        "seeds {seeds}: commits {} (in combined entries: {} entries; blind without a read {}; relayed {} ({} by relays); conflicts {}, resolved not committed {}, unknown {}), reads current {} local / {} majority ({} woken by their client's commit), snapshot {}, inconsistent {}, at a position {}, verified global hits {} kept / {} stale, queue messages delivered {}, across groups {} committed / {} aborted / {} unknown ({} settled by sweeps, {} decisions collected), failed {}, faults {} (wipes {}, snapshot installs {}, not installed {}), collections {}, groups evicted {}, ranges split {}, replicas removed {} (full replicas {}; voter changes caught up {}), spare servers {}, moves {} finished / {} aborted (copy pages {}, short final copies {}), clients behind the placement at the end {}, final global scans {}, messages {}, violations {violations}",
        s.commits,
        s.combined,
        s.committed_unread,
        s.relayed,
        s.relayed_by_relays,
        s.conflicts,
        s.resolved_not_committed,
        s.unknown,
        s.reads_local,
        s.reads_majority,
        s.reads_woken,
        s.reads_snapshot,
        s.reads_inconsistent,
        s.reads_at_position,
        s.hits_verified,
        s.hits_stale,
        s.messages_delivered,
        s.two_phase_committed,
        s.two_phase_aborted,
        s.two_phase_unknown,
        s.prepared_settled,
        s.decisions_collected,
        s.failed,
        s.faults,
        s.wipes,
        s.installs,
        s.failed_installs,
        s.collections,
        s.evictions,
        s.splits,
        s.removals,
        s.full_removals,
        s.catch_ups,
        s.spares,
        s.moves_finished,
        s.moves_aborted,
        s.copy_pages,
        s.short_final_copies,
        s.clients_behind,
        s.final_scans,
        s.messages
    )
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.measure {
        print!("{}", megastore_sim::measure::report(80));
        return ExitCode::SUCCESS;
    }
    if args.list_bugs {
        BUG_NAMES.iter().for_each(|b| println!("{b}"));
        return ExitCode::SUCCESS;
    }
    let bugs = match &args.bug {
        None => Bugs::default(),
        Some(name) => match bug(name) {
            Some(bugs) => bugs,
            None => {
                eprintln!(
                    "error: unknown bug {name:?}; known: {}",
                    BUG_NAMES.join(", ")
                );
                return ExitCode::from(2);
            }
        },
    };
    if let Some(seed) = args.reproduce {
        let report = run(seed, bugs, true);
        report.trace.iter().for_each(|line| println!("{line}"));
        println!("{}", summary(1, &report.stats, report.violations.len()));
        for v in &report.violations {
            println!(
                "VIOLATION seed {seed} at {:.6}s: {}: {}",
                v.at as f64 / 1e9,
                v.invariant,
                v.detail
            );
        }
        println!("trace hash: {:016x}", report.trace_hash);
        return if report.violations.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let started = Instant::now();
    let progress = indicatif::ProgressBar::new(args.seeds);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} seeds, {elapsed} ({eta} left) {msg}",
        )
        .expect("the template is valid"),
    );
    let mut total = Stats::default();
    let mut combined = xxhash_rust::xxh3::Xxh3::new();
    let mut failures = 0;
    const BATCH: u64 = 1000;
    for seed in args.seed..args.seed + args.seeds {
        let report = run(seed, bugs, false);
        combined.write_u64(report.trace_hash);
        add(&mut total, &report.stats);
        if !report.violations.is_empty() {
            failures += 1;
            progress.suspend(|| {
                for v in report.violations.iter().take(3) {
                    println!(
                        "VIOLATION seed {seed} at {:.6}s: {}: {}",
                        v.at as f64 / 1e9,
                        v.invariant,
                        v.detail
                    );
                }
                println!(
                    "  reproduce: megastore-sim --reproduce {seed}{}",
                    args.bug
                        .as_ref()
                        .map(|b| format!(" --bug {b}"))
                        .unwrap_or_default()
                );
            });
            if args.stop {
                break;
            }
        }
        progress.inc(1);
        let done = seed - args.seed + 1;
        if done % BATCH == 0 {
            progress.suspend(|| println!("{}", summary(done, &total, failures)));
        }
    }
    progress.finish_and_clear();
    println!("{}", summary(args.seeds, &total, failures));
    println!("ran in {:.1}s", started.elapsed().as_secs_f64());
    println!("trace hash: {:016x}", combined.finish());
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
