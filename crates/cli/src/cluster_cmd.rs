//! `megastore cluster up|down|plan`: a whole cluster as local processes, for users without
//! Docker and for the end-to-end tests.
//!
//! `up` starts every process of the config (lockd nodes first, then replicas and
//! coordinators) as a `megastore` child in its own process group, logging to
//! `<config dir>/logs/<process>.log`, waits until each listens, records their pids in
//! `<config>.pids`, and returns (the processes keep running). `down` stops them:
//! SIGTERM, then SIGKILL for any still running after a grace period.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Subcommand;
use megastore_config::{ClusterConfig, resolve_address};
use megastore_types::ReplicaKind;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// How long `up` waits for one process to listen.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How long `down` lets processes stop cleanly before killing them.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Start or stop a cluster as local processes.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Start every process of the config in the background.
    Up {
        /// The cluster description.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Stop the processes `up` started.
    Down {
        /// The cluster description given to `up`.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Print the processes `up` would start (what a deployment must run), without
    /// starting anything.
    Plan {
        /// The cluster description.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// One process of a cluster, as `plan` prints it.
#[derive(Debug, Serialize)]
struct Planned {
    name: String,
    /// It runs as `megastore <subcommand> --config FILE --id <id>`.
    subcommand: &'static str,
    id: String,
    address: String,
    /// Where it keeps its data (`None`: a coordinator keeps none).
    data_dir: Option<PathBuf>,
    /// Where it serves `GET /metrics`, if the config gives it one.
    metrics_address: Option<String>,
}

/// One started process, as recorded for `down`.
#[derive(Debug, Serialize, Deserialize)]
struct Started {
    name: String,
    pid: i32,
}

fn pid_file(config: &Path) -> PathBuf {
    let mut name = config.as_os_str().to_owned();
    name.push(".pids");
    PathBuf::from(name)
}

/// Every process of the config: (name, subcommand, --id, address to wait for).
fn processes(config: &ClusterConfig) -> Vec<(String, &'static str, String, String)> {
    let mut all = Vec::new();
    for l in &config.lockd {
        all.push((l.name.clone(), "lockd", l.name.clone(), l.address.clone()));
    }
    // Each replica's first server, then its other `[[servers]]`.
    let servers: Vec<_> = config
        .server_processes()
        .into_iter()
        .map(|p| p.process)
        .collect();
    for r in &servers {
        all.push((
            format!("replica-{}", r.name),
            "replica",
            r.name.clone(),
            r.address.clone(),
        ));
    }
    for r in servers.iter().filter(|r| r.kind == ReplicaKind::Full) {
        if let Some(address) = &r.coordinator_address {
            all.push((
                format!("coordinator-{}", r.name),
                "coordinator",
                r.name.clone(),
                address.clone(),
            ));
        }
    }
    all
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

fn listening(address: &str) -> bool {
    resolve_address(address).ok().is_some_and(|a| {
        std::net::TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok()
    })
}

pub(crate) fn run(command: ClusterCommand) -> anyhow::Result<ExitCode> {
    match command {
        ClusterCommand::Up { config } => up(&config),
        ClusterCommand::Down { config } => down(&config),
        ClusterCommand::Plan { config, json } => plan(&config, json),
    }
}

fn plan(config_path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let config = ClusterConfig::load(config_path)?;
    for (name, subcommand, id, address) in processes(&config) {
        let data_dir = match subcommand {
            "lockd" => config.lockd_node(&id).map(|l| l.data_dir.clone()),
            "replica" => config.server_process(&id).map(|p| p.process.data_dir),
            _ => None,
        };
        let metrics_address = match subcommand {
            "lockd" => config
                .lockd_node(&id)
                .and_then(|l| l.metrics_address.clone()),
            "replica" => config
                .server_process(&id)
                .and_then(|p| p.process.metrics_address),
            _ => config
                .server_process(&id)
                .and_then(|p| p.process.coordinator_metrics_address),
        };
        let planned = Planned {
            name,
            subcommand,
            id,
            address,
            data_dir,
            metrics_address,
        };
        if json {
            println!("{}", serde_json::to_string(&planned)?);
        } else {
            println!(
                "{:<16} megastore {:<12} --config {} --id {:<8} listens on {}{}{}",
                planned.name,
                planned.subcommand,
                config_path.display(),
                planned.id,
                planned.address,
                planned
                    .metrics_address
                    .as_ref()
                    .map(|m| format!(", metrics on {m}"))
                    .unwrap_or_default(),
                planned
                    .data_dir
                    .as_ref()
                    .map(|d| format!(", data in {}", d.display()))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn up(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = ClusterConfig::load(config_path)?;
    let pids = pid_file(config_path);
    if let Ok(text) = std::fs::read_to_string(&pids) {
        let started: Vec<Started> = serde_json::from_str(&text).unwrap_or_default();
        if started.iter().any(|s| alive(s.pid)) {
            bail!(
                "a cluster from {} is already running (pids in {}); run `megastore cluster down --config {}` first",
                config_path.display(),
                pids.display(),
                config_path.display()
            );
        }
    }
    let config_arg = std::fs::canonicalize(config_path)
        .with_context(|| format!("resolving {}", config_path.display()))?;
    let base = config_arg.parent().unwrap_or(Path::new(".")).to_path_buf();
    let logs = base.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let exe = std::env::current_exe().context("finding the megastore binary")?;
    let mut started = Vec::new();
    let all = processes(&config);
    for (i, (name, subcommand, id, address)) in all.iter().enumerate() {
        if listening(address) {
            stop_all(&started);
            bail!("{name}: {address} is already in use by another program");
        }
        let log_path = logs.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let child = {
            use std::os::unix::process::CommandExt;
            Command::new(&exe)
                .args([*subcommand, "--config"])
                .arg(&config_arg)
                .args(["--id", id])
                .current_dir(&base)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                // Its own process group: a Ctrl-C at this terminal does not reach it.
                .process_group(0)
                .spawn()
                .with_context(|| format!("starting {name}"))?
        };
        let pid = i32::try_from(child.id()).context("pid out of range")?;
        started.push(Started {
            name: name.clone(),
            pid,
        });
        std::fs::write(&pids, serde_json::to_vec_pretty(&started)?)?;
        let since = Instant::now();
        while !listening(address) {
            if !alive(pid) || since.elapsed() > START_LIMIT {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                stop_all(&started);
                let _ = std::fs::remove_file(&pids);
                bail!("{name} did not start (log {}):\n{log}", log_path.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        println!(
            "[{}/{}] {name:<16} {subcommand:<12} {address}  (pid {pid})",
            i + 1,
            all.len()
        );
    }
    println!(
        "cluster {:?} is up; logs in {}; stop it with `megastore cluster down --config {}`",
        config.cluster.name,
        logs.display(),
        config_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn stop_all(started: &[Started]) -> Vec<String> {
    for s in started.iter().rev() {
        let _ = kill(Pid::from_raw(s.pid), Signal::SIGTERM);
    }
    let since = Instant::now();
    while started.iter().any(|s| alive(s.pid)) && since.elapsed() < STOP_GRACE {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut killed = Vec::new();
    for s in started.iter().filter(|s| alive(s.pid)) {
        let _ = kill(Pid::from_raw(s.pid), Signal::SIGKILL);
        killed.push(s.name.clone());
    }
    killed
}

fn down(config_path: &Path) -> anyhow::Result<ExitCode> {
    let pids = pid_file(config_path);
    let text = match std::fs::read_to_string(&pids) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!(
                "no cluster started from {} is recorded ({} is absent)",
                config_path.display(),
                pids.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", pids.display())),
    };
    let started: Vec<Started> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a pid list", pids.display()))?;
    let running = started.iter().filter(|s| alive(s.pid)).count();
    let killed = stop_all(&started);
    std::fs::remove_file(&pids).with_context(|| format!("removing {}", pids.display()))?;
    if killed.is_empty() {
        println!("stopped {running} process(es)");
    } else {
        println!(
            "stopped {running} process(es); {} did not stop within {STOP_GRACE:?} and were killed: {}",
            killed.len(),
            killed.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_replica_and_coordinator_are_started_after_the_replicas() {
        let text = format!(
            "{}\n[[servers]]\nname = \"a2\"\nid = 11\nreplica = \"a\"\naddress = \"127.0.0.1:7111\"\ncoordinator_address = \"127.0.0.1:7211\"\ndata_dir = \"data/a2\"\n\n[[servers]]\nname = \"c2\"\nid = 13\nreplica = \"c\"\naddress = \"127.0.0.1:7113\"\ndata_dir = \"data/c2\"\n",
            crate::cluster_arg::DEV_TOPOLOGY
        );
        let config = ClusterConfig::parse(&text, "t.toml").unwrap();
        let started: Vec<(String, String)> = processes(&config)
            .into_iter()
            .map(|(name, _, _, address)| (name, address))
            .collect();
        let names: Vec<&str> = started.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "lock-a",
                "lock-b",
                "lock-c",
                "replica-a",
                "replica-b",
                "replica-c",
                "replica-d",
                "replica-a2",
                "replica-c2",
                "coordinator-a",
                "coordinator-b",
                "coordinator-a2"
            ]
        );
        assert!(started.contains(&("coordinator-a2".into(), "127.0.0.1:7211".into())));
        assert!(started.contains(&("replica-c2".into(), "127.0.0.1:7113".into())));
    }
}
