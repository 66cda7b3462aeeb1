//! The `megastore` command-line tool.
//!
//! Responsibility: parse the command line and run one subcommand; every subcommand's
//! logic lives in a library crate, this binary only wires it to files and the terminal.

// A command-line tool talks to its terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

/// mimalloc instead of glibc's allocator, for every process this binary runs (servers
/// and the benchmark client alike): a write's many small allocations (messages,
/// entries, session frames) cost less, and no arena needs consolidating. Measured in
/// docs/performance.md ("The allocator"). The client library leaves the choice to the
/// application that links it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process. mimalloc asks the kernel for them
/// on its segments (`madvise`), and the kernel then zeroes two megabytes at a page
/// fault, on whichever thread touched the page, request paths included: under write
/// load that zeroing took a tenth of a server process's samples. Without them a write's
/// p99 falls by a quarter to a half, and the throughput a cluster sustains does not fall
/// (docs/performance.md, "Transparent huge pages"). The flag holds for the whole process
/// (RocksDB's allocations too, as databases commonly advise) and for its children. A
/// kernel older than 3.15 refuses the call, which leaves the process as it was.
#[cfg(target_os = "linux")]
fn disable_transparent_huge_pages() {
    let _refused_by_an_old_kernel = nix::sys::prctl::set_thp_disable(true);
}

/// Prints a line to stdout, going on if stdout has closed (`megastore dev | tee`, the
/// `tee` interrupted first): what runs after — stopping the servers, removing a
/// temporary data directory — must still run, where `println!` would panic.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod access_cmd;
mod backup_cmd;
mod bench_cmd;
mod bench_plot;
mod bytes_arg;
mod certs_cmd;
mod cluster_arg;
mod cluster_cmd;
mod coordinator_cmd;
mod demo_cmd;
mod dev_cmd;
mod dev_drills;
mod lock_cmd;
mod lockd_cmd;
mod logging;
mod range_catch_up_cmd;
mod range_cmd;
mod range_move_cmd;
mod range_rebalance_cmd;
mod replica_cmd;
mod schema_cmd;
mod shell_cmd;
mod shell_entities;
mod shell_input;
mod shell_parse;
mod signals;
mod status_cmd;
mod top_cmd;
mod top_view;
mod watch_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Megastore: geo-replicated entity groups with serializable transactions.
#[derive(Debug, Parser)]
#[command(name = "megastore", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with schema files (*.msdl).
    #[command(subcommand)]
    Schema(schema_cmd::SchemaCommand),
    /// Start or stop a whole cluster as local processes.
    #[command(subcommand)]
    Cluster(cluster_cmd::ClusterCommand),
    /// Run a short demonstration against a running cluster.
    Demo(demo_cmd::DemoArgs),
    /// Run the default topology in one process, with a demo, until interrupted.
    Dev(dev_cmd::DevArgs),
    /// Run one node of the lock service.
    Lockd(lockd_cmd::LockdArgs),
    /// Run one replica server.
    Replica(replica_cmd::ReplicaArgs),
    /// Run (or disable) the coordinator of a full replica.
    Coordinator(coordinator_cmd::CoordinatorArgs),
    /// Show or change where entity groups live: ranges of groups and their servers.
    #[command(subcommand)]
    Range(range_cmd::RangeCommand),
    /// Show how every process of a cluster stands (and one group's log positions).
    Status(status_cmd::StatusArgs),
    /// Watch a running cluster live: commits, conflicts and reads per site, replica
    /// lag, and the hottest entity groups.
    Top(top_cmd::TopArgs),
    /// An interactive client: choose a group, read, write, run transactions.
    Shell(shell_cmd::ShellArgs),
    /// Run a closed-loop workload and report throughput and latency percentiles.
    Bench(bench_cmd::BenchArgs),
    /// Print every committed change to a group's keys as it happens.
    Watch(watch_cmd::WatchArgs),
    /// Hold a lock under a lease kept alive, running a command while it is held (it
    /// gets the fencing token in MEGASTORE_FENCING_TOKEN).
    Lock(lock_cmd::LockArgs),
    /// Make a CA and a certificate for every host of a config (for mutual TLS).
    Certs(certs_cmd::CertsArgs),
    /// Manage the public API's users (with `[auth] require_users`, only they, and the
    /// operator, may call it).
    #[command(subcommand)]
    User(access_cmd::UserCommand),
    /// Manage the roles users hold: what each may read, write or administer.
    #[command(subcommand)]
    Role(access_cmd::RoleCommand),
    /// Back up a replica's store, streamed from it while it runs or copied from a stopped
    /// one's directory (restored, it rejoins until caught up).
    Backup(backup_cmd::BackupArgs),
}

fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Schema(command) => schema_cmd::run(command),
        Command::Cluster(command) => cluster_cmd::run(command),
        Command::Demo(args) => demo_cmd::run(args),
        Command::Dev(args) => dev_cmd::run(args),
        Command::Lockd(args) => lockd_cmd::run(args),
        Command::Replica(args) => replica_cmd::run(args),
        Command::Coordinator(args) => coordinator_cmd::run(args),
        Command::Range(command) => range_cmd::run(command),
        Command::Status(args) => status_cmd::run(args),
        Command::Top(args) => top_cmd::run(args),
        Command::Shell(args) => shell_cmd::run(args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::Watch(args) => watch_cmd::run(args),
        Command::Lock(args) => lock_cmd::run(args),
        Command::Certs(args) => certs_cmd::run(args),
        Command::Backup(args) => backup_cmd::run(args),
        Command::User(command) => access_cmd::run_user(command),
        Command::Role(command) => access_cmd::run_role(command),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
