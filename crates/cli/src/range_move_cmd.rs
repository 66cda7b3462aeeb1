//! `megastore range move RANGE --replica R --to SERVER`: moves a range's slot to another
//! server of its site, with a progress bar (docs/operations.md, "Moving a range").
//! The steps are the client library's `range_moves`; this is their display.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use megastore_client::placement_store::load_placement;
use megastore_client::range_moves::{MoveOptions, MoveUpdate, carry_out_move};
use megastore_config::ClusterConfig;
use megastore_placement::{MoveEnd, MoveRequest, ServerId};
use megastore_types::ReplicaId;

use crate::cluster_arg::ClusterArg;

#[derive(Debug, Args)]
pub(crate) struct MoveArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The range: its number as `range list` shows it (`3` or `range-3`).
    range: String,
    /// The replica whose slot of the range moves (its name in the config).
    #[arg(long, value_name = "REPLICA")]
    replica: String,
    /// The server that takes the slot over: a server of the replica's site (a
    /// `[[servers]]` name, or a replica's name for its first server).
    #[arg(long, value_name = "SERVER")]
    to: String,
    /// Give the move up instead: the source keeps the slot and serves it again (for a
    /// move an interrupted `range move` left under way).
    #[arg(long)]
    give_up: bool,
    /// How long a step may keep failing (a server down) before the move is given up.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    patience: u64,
}

/// The move `args` names, checked against the config.
fn request(config: &ClusterConfig, args: &MoveArgs) -> anyhow::Result<MoveRequest> {
    let range = crate::range_cmd::parse_range(&args.range)?;
    let replica = config.replica(&args.replica).with_context(|| {
        format!(
            "--replica: no replica is called {:?} (replicas: {})",
            args.replica,
            ClusterConfig::names(config.replicas.iter().map(|r| r.name.as_str()))
        )
    })?;
    let to = config
        .named_server_process(&args.to)
        .map_err(|e| anyhow::anyhow!("--to: {e}"))?;
    anyhow::ensure!(
        to.process.id == replica.id,
        "--to: server {} runs for replica {:?}, not {:?}: a slot moves only between servers of its replica",
        args.to,
        config
            .replica_by_id(ReplicaId(to.process.id))
            .map_or("?", |r| r.name.as_str()),
        args.replica
    );
    Ok(MoveRequest {
        range,
        replica: ReplicaId(replica.id),
        to: ServerId(to.server),
    })
}

pub(crate) fn run(args: MoveArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let request = request(&config, &args)?;
    let options = MoveOptions {
        give_up: args.give_up,
        patience: Duration::from_secs(args.patience),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let what = format!(
        "{} of replica {} to server {}",
        request.range, args.replica, args.to
    );
    if args.give_up {
        // Only a move under way can be given up: say what there is instead.
        let _entered = runtime.enter();
        let lockd = megastore_rpc::LockdClient::new(&config).map_err(anyhow::Error::msg)?;
        let topology = config.topology().map_err(anyhow::Error::msg)?;
        let stored = runtime.block_on(load_placement(&lockd, &topology))?;
        let range = stored
            .placement
            .range(request.range)
            .with_context(|| format!("{} does not exist", request.range))?;
        let ours = range
            .moving
            .as_ref()
            .is_some_and(|m| m.replica == request.replica && m.to == request.to);
        if !ours {
            let holder = range.slot(request.replica).map(|s| s.server);
            println!(
                "no move {what} is under way (the slot is on server {})",
                holder.map_or_else(|| "-".into(), |s| s.0.to_string())
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    let end = runtime
        .block_on(shown_move(&config, &request, &options))
        .with_context(|| format!("moving {what}"))?;
    match end {
        MoveEnd::Finished { epoch } => {
            println!("moved {what}: it serves the slot from epoch {epoch}");
            Ok(ExitCode::SUCCESS)
        }
        MoveEnd::Aborted => {
            println!("gave up moving {what}: the source keeps the slot");
            Ok(if args.give_up {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        MoveEnd::Refused(why) => anyhow::bail!("moving {what}: {why}"),
    }
}

/// Carries out one move with a spinner on a terminal, or a line per step without one.
pub(crate) async fn shown_move(
    config: &ClusterConfig,
    request: &MoveRequest,
    options: &MoveOptions,
) -> Result<MoveEnd, megastore_client::ClientError> {
    let bar = ProgressBar::new_spinner();
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let end = carry_out_move(config, request, options, |update| {
        // Without a terminal, one line per step, and a copy's first, every 100th and
        // last page.
        let logged = match &update {
            MoveUpdate::Copying { pages, done, .. } => *done || *pages == 1 || pages % 100 == 0,
            _ => true,
        };
        let message = match update {
            MoveUpdate::Stored(version) => format!("stored placement v{version}"),
            MoveUpdate::Copying {
                last,
                pages,
                rows,
                done,
                changed_groups,
            } => format!(
                "{}{}: {pages} pages, {rows} rows",
                match (last, changed_groups) {
                    (false, _) => "bulk copy".to_string(),
                    (true, None) => "final copy (whole range)".to_string(),
                    (true, Some(n)) => format!("final copy ({n} changed groups)"),
                },
                if done { " done" } else { "" }
            ),
            MoveUpdate::Frozen => "the source froze the range".into(),
            MoveUpdate::Fenced => "the source's coordinator read the move".into(),
            MoveUpdate::Retrying(why) => format!("retrying: {why}"),
        };
        if bar.is_hidden() && logged {
            eprintln!("{message}");
        }
        bar.set_message(message);
    })
    .await;
    bar.finish_and_clear();
    end
}
