//! Fault drills at the `megastore dev` prompt: stop and start one site's replica or
//! coordinator while the rest of the cluster serves, and watch writes and reads go on
//! (`megastore status` shows it) — like `cockroach demo`'s `\demo shutdown N`.

use std::collections::BTreeMap;

use anyhow::Context;
use megastore_config::ClusterConfig;
use megastore_replica::{CoordinatorProcess, ReplicaProcess};
use tokio::io::AsyncBufReadExt;

/// What the prompt accepts.
pub(crate) const DRILLS_HELP: &str = "fault drills: `stop replica NAME`, `start replica NAME`, \
     `stop coordinator NAME`, `start coordinator NAME`, `help` (Ctrl-C stops the cluster)";

/// The servers a drill can stop and start, by name; `None`: stopped.
pub(crate) struct Servers {
    pub(crate) replicas: BTreeMap<String, Option<ReplicaProcess>>,
    pub(crate) coordinators: BTreeMap<String, Option<CoordinatorProcess>>,
}

impl Servers {
    /// Stops what still runs, coordinators first.
    pub(crate) async fn shutdown(self) {
        for c in self.coordinators.into_values().flatten() {
            c.shutdown().await;
        }
        for r in self.replicas.into_values().flatten() {
            r.shutdown().await;
        }
    }

    /// Runs one drill command; what to print.
    async fn run(&mut self, config: &ClusterConfig, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => String::new(),
            ["help"] => DRILLS_HELP.to_string(),
            [
                verb @ ("stop" | "start"),
                kind @ ("replica" | "coordinator"),
                name,
            ] => match self.drill(config, verb, kind, name).await {
                Ok(said) => said,
                Err(e) => format!("error: {e:#}"),
            },
            _ => format!("error: unknown command {line:?}; {DRILLS_HELP}"),
        }
    }

    async fn drill(
        &mut self,
        config: &ClusterConfig,
        verb: &str,
        kind: &str,
        name: &str,
    ) -> anyhow::Result<String> {
        let known = |names: Vec<&String>| {
            names
                .into_iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        if kind == "replica" {
            let names = known(self.replicas.keys().collect());
            let slot = self
                .replicas
                .get_mut(name)
                .with_context(|| format!("no replica {name} (replicas: {names})"))?;
            return Ok(match (verb, slot.take()) {
                ("stop", Some(running)) => {
                    running.shutdown().await;
                    format!(
                        "replica {name} stopped: writes go on with the other voters, and reads at \
                         its site ask another replica (`megastore status` shows it UNREACHABLE)"
                    )
                }
                ("start", None) => {
                    *slot = Some(
                        ReplicaProcess::start(config, name)
                            .await
                            .with_context(|| format!("starting replica {name}"))?,
                    );
                    format!("replica {name} started: it catches up on what it missed")
                }
                (verb, running) => {
                    let already = running.is_some();
                    *slot = running;
                    anyhow::bail!(
                        "replica {name} is {} already; `{verb}` does nothing",
                        if already { "running" } else { "stopped" }
                    )
                }
            });
        }
        let names = known(self.coordinators.keys().collect());
        let slot = self
            .coordinators
            .get_mut(name)
            .with_context(|| format!("no coordinator {name} (coordinators: {names})"))?;
        Ok(match (verb, slot.take()) {
            ("stop", Some(running)) => {
                running.shutdown().await;
                format!(
                    "coordinator {name} stopped (its lock given back): current reads at its site \
                     ask a majority until it is back"
                )
            }
            ("start", None) => {
                *slot = Some(
                    CoordinatorProcess::start(config, name)
                        .await
                        .with_context(|| format!("starting coordinator {name}"))?,
                );
                format!("coordinator {name} started: it vouches again once it holds its lock")
            }
            (verb, running) => {
                let already = running.is_some();
                *slot = running;
                anyhow::bail!(
                    "coordinator {name} is {} already; `{verb}` does nothing",
                    if already { "running" } else { "stopped" }
                )
            }
        })
    }
}

/// Reads drill commands from stdin until it ends (then just serves) or the process is
/// interrupted.
pub(crate) async fn serve_with_drills(
    config: &ClusterConfig,
    servers: &mut Servers,
    interrupts: &mut crate::signals::Interrupts,
) -> anyhow::Result<()> {
    crate::say!("{DRILLS_HELP}");
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut reading = true;
    let interrupted = interrupts.until();
    tokio::pin!(interrupted);
    loop {
        tokio::select! {
            () = &mut interrupted => return Ok(()),
            line = lines.next_line(), if reading => match line.context("reading the prompt")? {
                Some(line) => {
                    let said = servers.run(config, &line).await;
                    if !said.is_empty() {
                        crate::say!("{said}");
                    }
                }
                None => reading = false,
            },
        }
    }
}
