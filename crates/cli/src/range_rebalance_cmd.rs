//! `megastore range rebalance`: evens out what each replica's servers carry, by the
//! ranges' groups or writes per second (docs/operations.md, "Rebalancing"). The plan is
//! the placement core's `plan_rebalance`; each move is carried out as `range move`
//! does, one after another. With `--every`, it runs as a background rebalancer: a new
//! measurement and plan each round, until a signal. Any number may run: the one
//! holding the operator lock `operator/rebalancer` in lockd plans and moves, the
//! others stand by and take the lead when its lease lapses (a one-off rebalance takes
//! the lock too, and refuses while a background one holds it).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use megastore_client::operator_lock::{OPERATOR_LOCKS, OperatorLock, REBALANCER_LOCK, Taken};
use megastore_client::placement_store::{count_groups, load_placement};
use megastore_client::range_moves::MoveOptions;
use megastore_config::ClusterConfig;
use megastore_placement::{MoveEnd, Placement, RangeId, ServerId, plan_rebalance};
use megastore_types::ReplicaId;

use crate::cluster_arg::ClusterArg;
use crate::range_cmd::server_name;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Weight {
    /// Each range weighs the groups it holds (`range list --groups`).
    Groups,
    /// Each range weighs its writes per second over the last ten seconds (`status`).
    Writes,
    /// Each range weighs the bytes its groups take at the server that measured most
    /// (`status`; measured every 30 s, a range not measured yet weighs nothing).
    Bytes,
}

#[derive(Debug, Args)]
pub(crate) struct RebalanceArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// What a range weighs.
    #[arg(long, value_enum, default_value_t = Weight::Groups)]
    by: Weight,
    /// Moves made at most.
    #[arg(long, value_name = "N", default_value_t = 8)]
    moves: usize,
    /// Print the plan without moving anything.
    #[arg(long)]
    dry_run: bool,
    /// How long a move's step may keep failing before that move is given up.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    patience: u64,
    /// Keep rebalancing in the background: measure, plan and move again every this
    /// many seconds, until SIGINT or SIGTERM (a move under way finishes first). A round
    /// whose move fails is reported and the next round plans afresh.
    #[arg(long, value_name = "SECONDS", conflicts_with = "dry_run")]
    every: Option<u64>,
    /// With `--every`: stop after this many rounds.
    #[arg(long, value_name = "N", requires = "every")]
    rounds: Option<u64>,
}

/// The servers each replica's slots may be held by: its first server and its
/// `[[servers]]`.
fn candidates(config: &ClusterConfig) -> BTreeMap<ReplicaId, Vec<ServerId>> {
    let mut candidates: BTreeMap<ReplicaId, Vec<ServerId>> = BTreeMap::new();
    for p in config.server_processes() {
        candidates
            .entry(ReplicaId(p.process.id))
            .or_default()
            .push(ServerId(p.server));
    }
    candidates
}

/// Each range's weight now.
async fn weights(
    config: &ClusterConfig,
    placement: &Placement,
    by: Weight,
) -> anyhow::Result<BTreeMap<RangeId, u64>> {
    Ok(match by {
        Weight::Groups => count_groups(config, placement, |_, _| {}).await?,
        Weight::Writes | Weight::Bytes => {
            let peers = megastore_rpc::Peers::new(config).map_err(anyhow::Error::msg)?;
            let status = megastore_client::status::cluster_status(config, &peers, None).await;
            status
                .range_writes()
                .into_iter()
                .map(|(range, w)| {
                    let weight = match by {
                        // Thousandths of a write per second, so slow ranges still
                        // weigh something.
                        Weight::Writes => (w.per_second * 1000.0).round() as u64,
                        _ => w.bytes.unwrap_or(0),
                    };
                    (range, weight)
                })
                .collect()
        }
    })
}

/// How often a background rebalancer standing by tries to take the lead, and a leading
/// one checks it still holds it.
const STANDBY_POLL: Duration = Duration::from_secs(1);

/// Who this rebalancer is, as lockd names the lock's holder.
fn owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    format!("rebalancer@{host} pid {}", std::process::id())
}

pub(crate) fn run(args: RebalanceArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let topology = config.topology().map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let _entered = runtime.enter();
    let lockd = Arc::new(megastore_rpc::LockdClient::new(&config).map_err(anyhow::Error::msg)?);
    let take = || {
        runtime.block_on(OperatorLock::take(
            lockd.clone(),
            REBALANCER_LOCK,
            &owner(),
            config.timeouts.max_clock_drift_ppm,
        ))
    };
    if args.dry_run {
        rebalance_once(&config, &topology, &runtime, &lockd, &args, None)?;
        return Ok(ExitCode::SUCCESS);
    }
    let Some(every) = args.every else {
        // A one-off rebalance takes the lock too, so that it never plans against a
        // background rebalancer's moves.
        let lock = match take()? {
            Taken::Held(lock) => lock,
            Taken::HeldBy(holder) => anyhow::bail!(
                "another rebalancer ({}) holds {OPERATOR_LOCKS}{REBALANCER_LOCK}: let it \
                 rebalance, or stop it first",
                holder.owner
            ),
        };
        let rebalanced = rebalance_once(&config, &topology, &runtime, &lockd, &args, Some(&lock));
        let _ = runtime.block_on(lock.release());
        rebalanced?;
        return Ok(ExitCode::SUCCESS);
    };
    // Caught from here on: a signal during a move ends the loop once the move is over.
    let mut interrupts = crate::signals::Interrupts::listen()?;
    let every = Duration::from_secs(every);
    let mut lock: Option<OperatorLock> = None;
    // The last state line printed (leading, standing by, unreachable), printed again
    // only when it changes.
    let mut said = String::new();
    let mut say = |line: String| {
        if line != said {
            println!("{line}");
            said = line;
        }
    };
    let mut round = 0;
    let mut next_round = Instant::now();
    loop {
        if lock.as_ref().is_some_and(|held| !held.is_held()) {
            lock = None;
            say("lost the lead (its lease ran out before a renewal came back)".into());
        }
        if lock.is_none() {
            match take() {
                Ok(Taken::Held(held)) => {
                    say(format!("leading: holds {}", held.name()));
                    lock = Some(held);
                    next_round = Instant::now();
                }
                Ok(Taken::HeldBy(holder)) => say(format!("standing by: {} leads", holder.owner)),
                Err(e) => say(format!("standing by: cannot take the lead: {e}")),
            }
        }
        if let Some(held) = &lock
            && Instant::now() >= next_round
        {
            round += 1;
            println!("round {round}:");
            if let Err(e) = rebalance_once(&config, &topology, &runtime, &lockd, &args, Some(held))
            {
                println!("  round {round} failed: {e:#}");
            }
            if args.rounds.is_some_and(|rounds| round >= rounds) {
                break;
            }
            next_round = Instant::now() + every;
        }
        let wait = match lock {
            Some(_) => next_round
                .saturating_duration_since(Instant::now())
                .min(STANDBY_POLL),
            None => STANDBY_POLL,
        };
        let stopped = runtime.block_on(async {
            tokio::select! {
                () = interrupts.until() => true,
                () = tokio::time::sleep(wait) => false,
            }
        });
        if stopped {
            if let Some(held) = lock.take() {
                let _ = runtime.block_on(held.release());
            }
            println!("stopped");
            return Ok(ExitCode::SUCCESS);
        }
    }
    if let Some(held) = lock.take() {
        let _ = runtime.block_on(held.release());
    }
    Ok(ExitCode::SUCCESS)
}

/// One measurement, one plan, and its moves one after another.
fn rebalance_once(
    config: &ClusterConfig,
    topology: &megastore_types::Topology,
    runtime: &tokio::runtime::Runtime,
    lockd: &megastore_rpc::LockdClient,
    args: &RebalanceArgs,
    lock: Option<&OperatorLock>,
) -> anyhow::Result<()> {
    let (placement, weights) = runtime.block_on(async {
        let placement = load_placement(lockd, topology).await?.placement;
        let weights = weights(config, &placement, args.by).await?;
        anyhow::Ok((placement, weights))
    })?;
    let plan = plan_rebalance(&placement, &weights, &candidates(config), args.moves);
    if plan.is_empty() {
        println!("balanced: no move would even out what the servers carry");
        return Ok(());
    }
    let replica_name = |id: ReplicaId| {
        config
            .replica_by_id(id)
            .map_or_else(|| id.0.to_string(), |r| r.name.clone())
    };
    for planned in &plan {
        let from = placement
            .range(planned.range)
            .and_then(|r| r.slot(planned.replica))
            .map(|s| server_name(config, s.server))
            .unwrap_or_default();
        println!(
            "{} {} of replica {} (weighs {}): {from} → {}",
            if args.dry_run { "would move" } else { "moving" },
            planned.range,
            replica_name(planned.replica),
            weights.get(&planned.range).copied().unwrap_or(0),
            server_name(config, planned.to)
        );
        if args.dry_run {
            continue;
        }
        if lock.is_some_and(|held| !held.is_held()) {
            anyhow::bail!(
                "lost the lead before moving {}: stopping the round",
                planned.range
            );
        }
        let options = MoveOptions {
            give_up: false,
            patience: Duration::from_secs(args.patience),
        };
        let end = runtime
            .block_on(crate::range_move_cmd::shown_move(config, planned, &options))
            .with_context(|| format!("moving {}", planned.range))?;
        match end {
            MoveEnd::Finished { epoch } => println!("  moved: epoch {epoch}"),
            MoveEnd::Aborted => anyhow::bail!("gave up moving {}: stopping", planned.range),
            MoveEnd::Refused(why) => anyhow::bail!("moving {}: {why}", planned.range),
        }
    }
    Ok(())
}
