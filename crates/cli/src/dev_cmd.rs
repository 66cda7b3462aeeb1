//! `megastore dev`: the default topology (docs/architecture.md, "Default topology") in one process — three lockd
//! nodes, four replicas, two coordinators — with the photo schema applied and a short
//! demo; then it serves until interrupted. Its `cluster.toml` (in the data directory)
//! lets every other command and client connect.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use megastore_config::ClusterConfig;
use megastore_lockd::LockdNode;
use megastore_replica::{CoordinatorProcess, ReplicaProcess};

use crate::dev_drills::Servers;
use megastore_rpc::LockdClient;
use megastore_types::ReplicaKind;

/// The paper's photo schema.
const PHOTOS: &str = include_str!("../../../schema/photos.msdl");

/// Run the default topology in one process, with a demo, until interrupted.
#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// Keep the cluster's data here (default: a fresh temporary directory, removed on
    /// exit).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Skip the demo.
    #[arg(long)]
    no_demo: bool,
    /// Stop cleanly after the demo instead of serving until interrupted (for scripts).
    #[arg(long, conflicts_with = "no_demo")]
    exit_after_demo: bool,
    /// Read fault drills (`stop replica b`, `start coordinator a`, …) from stdin while
    /// serving, also when it is not a terminal (at a terminal they are read anyway).
    #[arg(long, conflicts_with = "exit_after_demo")]
    drills: bool,
}

/// What a `dev` whose ports are taken says first.
const ALREADY_RUNNING: &str = "its ports are taken: is another `megastore dev` running? Stop \
     it, or give this one a --data-dir holding a cluster.toml with other addresses";

pub(crate) fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let temporary;
    let dir = match args.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            dir
        }
        None => {
            temporary = tempfile::tempdir().context("creating a temporary data directory")?;
            temporary.path().to_path_buf()
        }
    };
    let config_path = dir.join("cluster.toml");
    if !config_path.exists() {
        std::fs::write(&config_path, crate::cluster_arg::DEV_TOPOLOGY)
            .with_context(|| format!("writing {}", config_path.display()))?;
    }
    let config = ClusterConfig::load(&config_path)?;
    crate::logging::init_quiet();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let served = runtime.block_on(async {
        let mut interrupts = crate::signals::Interrupts::listen()?;
        crate::say!("megastore dev: data in {}", dir.display());
        let mut lockd = Vec::new();
        for node in &config.lockd {
            let started = LockdNode::start(&config, &node.name).await;
            let started = started.map_err(|e| {
                let e = anyhow::Error::new(e).context(format!("lockd {}", node.name));
                if format!("{e:#}").contains("in use") {
                    e.context(ALREADY_RUNNING)
                } else {
                    e
                }
            })?;
            lockd.push(started);
            crate::say!(
                "  lockd       {:<8} site {}  {}",
                node.name, node.site, node.address
            );
        }
        let mut servers = Servers {
            replicas: Default::default(),
            coordinators: Default::default(),
        };
        for r in &config.replicas {
            servers.replicas.insert(
                r.name.clone(),
                Some(
                    ReplicaProcess::start(&config, &r.name)
                        .await
                        .with_context(|| format!("replica {}", r.name))?,
                ),
            );
            crate::say!(
                "  replica     {:<8} site {}  {}  ({})",
                r.name, r.site, r.address, r.kind
            );
        }
        for r in config
            .replicas
            .iter()
            .filter(|r| r.kind == ReplicaKind::Full)
        {
            servers.coordinators.insert(
                r.name.clone(),
                Some(
                    CoordinatorProcess::start(&config, &r.name)
                        .await
                        .with_context(|| format!("coordinator {}", r.name))?,
                ),
            );
            let address = r.coordinator_address.as_deref().unwrap_or_default();
            crate::say!("  coordinator {:<8} site {}  {}", r.name, r.site, address);
        }
        let lockd_client = LockdClient::new(&config).map_err(anyhow::Error::msg)?;
        let applied = megastore_client::schema_store::apply_schema(
            &lockd_client,
            "schema/photos.msdl",
            PHOTOS,
        )
        .await;
        match applied {
            Ok((catalog, version)) => {
                crate::say!("  schema      {} (catalog version {version})", catalog.name)
            }
            Err(e) => crate::say!("  schema      not applied: {e}"),
        }
        if !args.no_demo {
            crate::say!();
            crate::demo_cmd::demo(&config, None).await?;
        }
        if config.auth.is_none() {
            crate::say!();
            crate::say!(
                "  Unauthenticated: no [auth] in its config, so anyone who reaches its ports may call any API, backups included."
            );
        }
        let lifetime = if args.exit_after_demo {
            "The cluster stops now (--exit-after-demo)."
        } else {
            "The cluster runs until Ctrl-C."
        };
        let metrics = config.replicas[0]
            .metrics_address
            .as_deref()
            .map(|a| format!("\n  metrics:  http://{a}/metrics (every process has one; see cluster.toml)"))
            .unwrap_or_default();
        crate::say!(
            "\n{lifetime} How to connect (no --config needed for the default ports):\n  \
             megastore shell                          # interactive: use demo-user-alice, get profile\n  \
             megastore status --group demo-user-alice\n  \
             megastore bench --duration 10\n  \
             Rust:     megastore_client::Client::connect(&ClusterConfig::load(\"{}\")?, \"A\")\n  \
             gRPC:     proto/megastore/client/v1 at any replica, e.g. {}{metrics}",
            config_path.display(),
            config.replicas[0].address
        );
        if args.drills || (!args.exit_after_demo && std::io::stdin().is_terminal()) {
            crate::dev_drills::serve_with_drills(&config, &mut servers, &mut interrupts).await?;
        } else if !args.exit_after_demo {
            interrupts.until().await;
        }
        crate::say!("stopping");
        servers.shutdown().await;
        for l in lockd {
            l.shutdown().await;
        }
        Ok::<(), anyhow::Error>(())
    });
    // A prompt's pending read of stdin is a blocking task that never ends by itself:
    // the runtime must not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served?;
    Ok(ExitCode::SUCCESS)
}
