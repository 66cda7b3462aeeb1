//! `megastore range`: where groups live (docs/protocol.md, "Placement"). `list` shows
//! the placement held in lockd; `split` cuts a range in two at a group key (both halves
//! keep its servers); `move` and `rebalance` (their own files) hand a range's slot to
//! another server of its site; `remove-replica` takes a witness or read-only replica
//! out of ranges, and `catch-up` (its own file) lets a range whose voters changed
//! take its next voter change ("Voter changes").

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use comfy_table::Table;
use indicatif::ProgressBar;
use megastore_client::placement_store::{
    StoredPlacement, count_groups, load_placement, split_range,
};
use megastore_client::replica_removal::{self, Fenced, RemovalUpdate};
use megastore_client::status::RangeApplied;
use megastore_config::ClusterConfig;
use megastore_placement::{MovePhase, Placement, RangeId, ServerId};

use crate::bytes_arg::{parse_bytes, show_bytes};
use crate::cluster_arg::ClusterArg;

/// Show or change where entity groups live.
#[derive(Debug, Subcommand)]
pub(crate) enum RangeCommand {
    /// Show every range of groups: its bounds, epoch and replicas' servers.
    List {
        #[command(flatten)]
        cluster: ClusterArg,
        /// Output format: `text` (a table) or `json` (the placement as lockd holds it).
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Also count each range's groups: every group some replica holds, listed page
        /// by page from a majority of the voters (a scan of their registries).
        #[arg(long)]
        groups: bool,
    },
    /// Split a range in two at a group key: both halves keep its servers and get a new
    /// epoch (operators only, with `[auth]`).
    Split(SplitArgs),
    /// Move a range's slot to another server of its replica: copy it while the source
    /// serves, freeze the source, copy what is left, and flip the placement (operators
    /// only, with `[auth]`). Interrupted, it is resumed by running it again.
    Move(crate::range_move_cmd::MoveArgs),
    /// Even out what each replica's servers carry, by groups or writes per second:
    /// plans moves from the heaviest server to the lightest and carries them out one
    /// by one (operators only, with `[auth]`).
    Rebalance(crate::range_rebalance_cmd::RebalanceArgs),
    /// Remove a witness or read-only replica from ranges (every range that has it, by
    /// default): its server stops answering for them as soon as it reads the
    /// placement, and drops their rows. A replica removed from every range has left
    /// the cluster for good. Removing a witness changes the range's voters: its next
    /// voter change waits for `range catch-up` (docs/protocol.md, "Voter changes");
    /// operators only, with `[auth]`.
    RemoveReplica(RemoveReplicaArgs),
    /// Catch up ranges' voter changes (every range with one waiting, by default):
    /// every voter makes sure each group's log is held by a majority of the voters,
    /// then the change is recorded and the range may take another (a witness joining
    /// after one was removed, say); operators only, with `[auth]`.
    CatchUp(crate::range_catch_up_cmd::CatchUpArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct SplitArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The range: its number as `range list` shows it (`3` or `range-3`). Default: the
    /// range that holds the key.
    range: Option<String>,
    /// Where the right half starts: an encoded group key as `range list` shows one
    /// (text, `\xHH` for other bytes).
    #[arg(
        long,
        value_name = "KEY",
        conflicts_with = "at_group",
        required_unless_present = "at_group"
    )]
    at: Option<String>,
    /// Where the right half starts: the untyped group of this name (and every later key).
    #[arg(long, value_name = "GROUP")]
    at_group: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RemoveReplicaArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The replica: its name in the config (`c`) or its id.
    replica: String,
    /// The ranges to remove it from (`3` or `range-3`); none: every range that has it.
    ranges: Vec<String>,
    /// How long to wait for a full replica's coordinator to be fenced (it read the
    /// removal, or its lock is free) before giving up; running again carries on.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    patience: u64,
    /// Give up a full replica's removal that began but did not finish: its slot stays
    /// and its coordinator vouches again (from a new epoch).
    #[arg(long)]
    give_up: bool,
}

pub(crate) fn run(command: RangeCommand) -> anyhow::Result<ExitCode> {
    match command {
        RangeCommand::List {
            cluster,
            output,
            groups,
        } => {
            let config = cluster.load()?;
            let (stored, counts) = on_lockd(&config, async |lockd, topology| {
                let stored = load_placement(lockd, topology).await?;
                let counts = if groups {
                    Some(count_groups_shown(&config, &stored.placement).await?)
                } else {
                    None
                };
                Ok((stored, counts))
            })?;
            match output {
                Output::Text => print!(
                    "{}",
                    render(&stored, &config, usize::MAX, counts.as_ref(), None)
                ),
                Output::Json => {
                    let mut json = to_json(&stored);
                    if let Some(counts) = &counts {
                        json["groups"] = counts
                            .iter()
                            .map(|(range, n)| (range.0.to_string(), serde_json::json!(n)))
                            .collect::<serde_json::Map<_, _>>()
                            .into();
                    }
                    println!("{json}");
                }
            }
        }
        RangeCommand::Move(args) => return crate::range_move_cmd::run(args),
        RangeCommand::Rebalance(args) => return crate::range_rebalance_cmd::run(args),
        RangeCommand::RemoveReplica(args) => remove_replica(args)?,
        RangeCommand::CatchUp(args) => return crate::range_catch_up_cmd::run(args),
        RangeCommand::Split(args) => {
            let config = args.cluster.load()?;
            let range = args.range.as_deref().map(parse_range).transpose()?;
            let at = match (&args.at, &args.at_group) {
                (Some(key), _) => parse_bytes(key).map_err(|e| anyhow::anyhow!("--at: {e}"))?,
                (None, Some(name)) => {
                    let name = parse_bytes(name).map_err(|e| anyhow::anyhow!("--at-group: {e}"))?;
                    megastore_client::group(&name)
                        .map_err(|e| anyhow::anyhow!("--at-group: {e}"))?
                        .0
                }
                (None, None) => anyhow::bail!("give --at KEY or --at-group GROUP"),
            };
            let done = on_lockd(&config, async |lockd, topology| {
                split_range(lockd, topology, range, &at).await
            })
            .with_context(|| format!("splitting at {}", show_bytes(&at)))?;
            let right = done
                .placement
                .range(done.right)
                .context("the split's right half")?;
            println!(
                "{} {} at {}: {} and {} at epoch {} (placement {})",
                if done.already {
                    "already split"
                } else {
                    "split"
                },
                done.left,
                show_bytes(&at),
                done.left,
                done.right,
                right.epoch.0,
                done.placement.version()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `range remove-replica` waits for the removed slot's servers to read the
/// placement (each polls lockd every second).
const REMOVAL_FENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// `range remove-replica`: a full replica's slot leaves first and its coordinators are
/// fenced (each step printed); then one compare-and-set removes the slot, and the
/// command waits (with a spinner) until each server that held it judges by the new
/// placement, and says so.
fn remove_replica(args: RemoveReplicaArgs) -> anyhow::Result<()> {
    let config = args.cluster.load()?;
    let replica = config
        .replicas
        .iter()
        .find(|r| r.name == args.replica || r.id.to_string() == args.replica)
        .with_context(|| {
            format!(
                "REPLICA: {:?} is no replica of the config (by name or id)",
                args.replica
            )
        })?;
    let (name, id) = (replica.name.clone(), megastore_types::ReplicaId(replica.id));
    let ranges = args
        .ranges
        .iter()
        .map(|r| parse_range(r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let patience = std::time::Duration::from_secs(args.patience);
    let runtime = tokio::runtime::Runtime::new()?;
    if args.give_up {
        let (placement, changed) = runtime
            .block_on(replica_removal::give_up(&config, id, &ranges))
            .with_context(|| format!("giving up removing replica {name}"))?;
        if changed {
            println!(
                "replica {name} stays (placement {}): its removal is given up",
                placement.version()
            );
        } else {
            println!("replica {name} was not leaving any of those ranges: nothing to give up");
        }
        return Ok(());
    }
    let (done, behind) = runtime
        .block_on(async {
            let shown = |update: RemovalUpdate| match update {
                RemovalUpdate::Leaving(since) => println!(
                    "replica {name} is leaving (placement {since}): its coordinator vouches \
                     for none of those ranges from now on"
                ),
                RemovalUpdate::Fenced(server, how) => println!(
                    "server {}: {}",
                    server_name(&config, server),
                    match how {
                        Fenced::ReadIt => "its coordinator read it",
                        Fenced::LockFree => "its coordinator holds no lock (down): fenced",
                    }
                ),
                RemovalUpdate::Waiting(server, why) => {
                    eprintln!("server {}: {why}", server_name(&config, server));
                }
            };
            let done =
                replica_removal::remove_replica(&config, id, &ranges, patience, shown).await?;
            let behind = wait_for_servers(&config, &done).await;
            Ok::<_, megastore_client::ClientError>((done, behind))
        })
        .with_context(|| format!("removing replica {name}"))?;
    let version = done.placement.version();
    let listed: Vec<String> = done.removed_from.iter().map(ToString::to_string).collect();
    if listed.is_empty() {
        println!("replica {name} was removed already (placement {version})");
    } else {
        println!(
            "removed replica {name} from {} (placement {version})",
            listed.join(", ")
        );
        for server in &done.servers {
            let shown = server_name(&config, *server);
            if behind.contains(server) {
                println!(
                    "server {shown} did not confirm it read placement {version} within {}s: \
                     it refuses those ranges once it does (at its start, if it is down)",
                    REMOVAL_FENCE.as_secs()
                );
            } else {
                println!("server {shown} read placement {version}: it serves none of them now");
            }
        }
    }
    let changed: Vec<String> = done
        .removed_from
        .iter()
        .filter(|r| {
            done.placement
                .range(**r)
                .is_some_and(|range| range.voters_changed.is_some())
        })
        .map(ToString::to_string)
        .collect();
    if !changed.is_empty() {
        println!(
            "the voters of {} changed: their next voter change waits for `megastore range catch-up`",
            changed.join(", ")
        );
    }
    if done.placement.removed().contains(&id) {
        println!(
            "replica {name} holds no range now: it has left the cluster and serves nothing; \
             stop its server and take it out of the config"
        );
    }
    Ok(())
}

/// Waits up to [`REMOVAL_FENCE`] until every server of `done` judges by its placement
/// (or a newer one); returns those that did not say so.
async fn wait_for_servers(
    config: &ClusterConfig,
    done: &megastore_client::placement_store::RemovalDone,
) -> std::collections::BTreeSet<ServerId> {
    let bar = ProgressBar::new_spinner();
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let version = done.placement.version().0;
    let mut behind = done.servers.clone();
    let started = std::time::Instant::now();
    while !behind.is_empty() && started.elapsed() < REMOVAL_FENCE {
        let mut still = std::collections::BTreeSet::new();
        for server in behind {
            let read = megastore_client::status::server_placement_version(config, server).await;
            if read.is_none_or(|v| v < version) {
                still.insert(server);
            }
        }
        behind = still;
        bar.set_message(format!(
            "waiting for {} server(s) to read placement v{version}",
            behind.len()
        ));
        bar.tick();
        if !behind.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    bar.finish_and_clear();
    behind
}

/// How many groups each range holds, with a spinner on a terminal.
async fn count_groups_shown(
    config: &ClusterConfig,
    placement: &megastore_placement::Placement,
) -> Result<BTreeMap<RangeId, u64>, megastore_client::ClientError> {
    let bar = ProgressBar::new_spinner();
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let counts = count_groups(config, placement, |range, count| {
        bar.set_message(format!("counting groups: {range} holds {count} so far"));
        bar.tick();
    })
    .await;
    bar.finish_and_clear();
    counts
}

/// `3` or `range-3`.
pub(crate) fn parse_range(text: &str) -> anyhow::Result<RangeId> {
    let digits = text.strip_prefix("range-").unwrap_or(text);
    digits
        .parse()
        .map(RangeId)
        .map_err(|_| anyhow::anyhow!("RANGE: {text:?} is not a range number (like 3 or range-3)"))
}

/// Runs `call` against the cluster's lockd (with the operator token of its config).
fn on_lockd<T>(
    config: &ClusterConfig,
    call: impl AsyncFnOnce(
        &megastore_rpc::LockdClient,
        &megastore_types::Topology,
    ) -> Result<T, megastore_client::ClientError>,
) -> anyhow::Result<T> {
    let topology = config.topology().map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Runtime::new()?;
    // The channels are made in the runtime they will run on.
    let _entered = runtime.enter();
    let lockd = megastore_rpc::LockdClient::new(config).map_err(anyhow::Error::msg)?;
    Ok(runtime.block_on(call(&lockd, &topology))?)
}

/// A server by its name in the config (a replica's first server has the replica's
/// name and id; a `[[servers]]` entry its own), else by id.
pub(crate) fn server_name(config: &ClusterConfig, id: ServerId) -> String {
    config
        .server_processes()
        .into_iter()
        .find(|p| p.server == id.0)
        .map_or_else(|| id.to_string(), |p| p.process.name)
}

/// A replica by its name in the config, else `#id`.
fn replica_name(config: &ClusterConfig, replica: megastore_types::ReplicaId) -> String {
    config
        .replicas
        .iter()
        .find(|r| r.id == replica.0)
        .map_or_else(|| format!("#{}", replica.0), |r| r.name.clone())
}

/// The placement as text: a summary line and a table of at most `rows` ranges (with
/// each one's groups, when counted, and its writes, when the replicas were asked).
pub(crate) fn render(
    stored: &StoredPlacement,
    config: &ClusterConfig,
    rows: usize,
    groups: Option<&BTreeMap<RangeId, u64>>,
    writes: Option<&BTreeMap<RangeId, RangeApplied>>,
) -> String {
    let placement = &stored.placement;
    let mut out = format!(
        "placement {}: {} range{} ({})\n",
        placement.version(),
        placement.ranges().len(),
        if placement.ranges().len() == 1 {
            ""
        } else {
            "s"
        },
        if stored.stored {
            "held in lockd"
        } else {
            "the default: one range on every replica, not stored until changed"
        }
    );
    out.push_str(&servers_line(placement, config));
    if !placement.removed().is_empty() {
        let names: Vec<String> = placement
            .removed()
            .iter()
            .map(|r| replica_name(config, *r))
            .collect();
        out.push_str(&format!("removed replicas: {}\n", names.join(", ")));
    }
    let leaving: Vec<String> = placement
        .ranges()
        .iter()
        .filter_map(|r| {
            let l = r.leaving?;
            Some(format!(
                "{} from {} (since {})",
                replica_name(config, l.replica),
                r.id,
                l.since
            ))
        })
        .collect();
    if !leaving.is_empty() {
        out.push_str(&format!(
            "leaving (`range remove-replica` finishes, `--give-up` keeps them): {}\n",
            leaving.join(", ")
        ));
    }
    let waiting: Vec<String> = placement
        .ranges()
        .iter()
        .filter_map(|r| Some(format!("{} (at {})", r.id, r.voters_changed?)))
        .collect();
    if !waiting.is_empty() {
        out.push_str(&format!(
            "voter changes not caught up (`range catch-up`): {}\n",
            waiting.join(", ")
        ));
    }
    let mut table = Table::new();
    let mut header = vec![
        "RANGE",
        "FROM",
        "TO",
        "EPOCH",
        "REPLICAS (replica@server)",
        "MOVING",
    ];
    if groups.is_some() {
        header.push("GROUPS");
    }
    if writes.is_some() {
        header.push("WRITES/S (10 s)");
        header.push("SIZE");
    }
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_header(header);
    for range in placement.ranges().iter().take(rows) {
        let bound = |key: &[u8]| {
            let text = show_bytes(key);
            let group = megastore_client::group_name(&megastore_types::EgId(key.to_vec()));
            match group {
                Some(name) => format!("{text} (group {})", show_bytes(&name)),
                None if key.is_empty() => "(start)".into(),
                None => text,
            }
        };
        let replicas: Vec<String> = range
            .slots
            .iter()
            .map(|s| {
                format!(
                    "{}@{}",
                    replica_name(config, s.replica),
                    server_name(config, s.server)
                )
            })
            .collect();
        let moving = range.moving.as_ref().map_or_else(
            || "-".to_string(),
            |m| {
                format!(
                    "replica {} {} → {} ({})",
                    m.replica.0,
                    server_name(config, m.from),
                    server_name(config, m.to),
                    match m.phase {
                        MovePhase::Copying => "copying",
                        MovePhase::Frozen => "frozen",
                    }
                )
            },
        );
        let mut row = vec![
            range.id.to_string(),
            bound(&range.start),
            range.end.as_deref().map_or_else(|| "(end)".into(), bound),
            range.epoch.0.to_string(),
            replicas.join(" "),
            moving,
        ];
        if let Some(groups) = groups {
            row.push(
                groups
                    .get(&range.id)
                    .map_or_else(|| "?".into(), u64::to_string),
            );
        }
        if let Some(writes) = writes {
            let seen = writes.get(&range.id);
            row.push(seen.map_or_else(|| "?".into(), |w| format!("{:.1}", w.per_second)));
            row.push(
                seen.and_then(|w| w.bytes)
                    .map_or_else(|| "?".into(), |b| indicatif::HumanBytes(b).to_string()),
            );
        }
        table.add_row(row);
    }
    out.push_str(&format!("{table}\n"));
    if placement.ranges().len() > rows {
        out.push_str(&format!(
            "… and {} more (megastore range list)\n",
            placement.ranges().len() - rows
        ));
    }
    out
}

/// One line naming every server the placement lists, by site, with how many range
/// slots each holds: `servers: A: a (4), a2 (0); B: b (4)`.
fn servers_line(placement: &Placement, config: &ClusterConfig) -> String {
    let mut by_site: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for server in placement.servers() {
        let held = placement
            .ranges()
            .iter()
            .flat_map(|r| &r.slots)
            .filter(|slot| slot.server == server.id)
            .count();
        let site = config
            .cluster
            .sites
            .get(usize::from(server.site.0))
            .cloned()
            .unwrap_or_else(|| format!("site {}", server.site.0));
        by_site
            .entry(site)
            .or_default()
            .push(format!("{} ({held})", server_name(config, server.id)));
    }
    let sites: Vec<String> = by_site
        .into_iter()
        .map(|(site, servers)| format!("{site}: {}", servers.join(", ")))
        .collect();
    format!("servers (range slots held): {}\n", sites.join("; "))
}

/// The placement as JSON: exactly what lockd holds (or would hold), and whether it
/// is stored.
pub(crate) fn to_json(stored: &StoredPlacement) -> serde_json::Value {
    let placement: serde_json::Value =
        serde_json::from_slice(&stored.placement.encode()).unwrap_or_default();
    serde_json::json!({"stored": stored.stored, "placement": placement})
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn a_range_is_named_by_its_number_or_its_name() {
        assert_eq!(parse_range("3").unwrap(), RangeId(3));
        assert_eq!(parse_range("range-12").unwrap(), RangeId(12));
        let err = parse_range("r3").unwrap_err().to_string();
        assert!(err.contains("\"r3\" is not a range number"), "{err}");
    }

    #[test]
    fn the_default_placement_renders_one_range_on_every_replica() {
        let config = crate::cluster_arg::ClusterArg { config: None }
            .load()
            .unwrap();
        let topology = config.topology().unwrap();
        let stored = StoredPlacement {
            placement: Placement::one_server_per_replica(&topology),
            stored: false,
        };
        let text = render(&stored, &config, usize::MAX, None, None);
        assert!(
            text.starts_with("placement v1: 1 range (the default"),
            "{text}"
        );
        assert!(text.contains("a@a b@b c@c d@d"), "{text}");
        assert!(text.contains("(start)") && text.contains("(end)"), "{text}");
        let json = to_json(&stored);
        assert_eq!(json["stored"], false);
        assert_eq!(json["placement"]["ranges"].as_array().unwrap().len(), 1);

        // A split at a group shows the group by name; a status shows `rows` ranges.
        let at = megastore_client::group(b"user-5000").unwrap().0;
        let split = StoredPlacement {
            placement: stored.placement.split(RangeId(0), &at).unwrap(),
            stored: true,
        };
        let text = render(
            &split,
            &config,
            usize::MAX,
            Some(&BTreeMap::from([(RangeId(0), 3)])),
            Some(&BTreeMap::from([(
                RangeId(1),
                RangeApplied {
                    range: RangeId(1),
                    applied: 40,
                    per_second: 2.5,
                    bytes: Some(12_345),
                },
            )])),
        );
        let bound = format!("{} (group user-5000)", show_bytes(&at));
        assert!(text.contains(&bound), "{text}");
        assert!(
            text.starts_with("placement v2: 2 ranges (held in lockd)"),
            "{text}"
        );
        assert!(
            text.contains("servers (range slots held): A: a (2); B: b (2); C: c (2); D: d (2)\n"),
            "{text}"
        );
        assert!(text.contains(" GROUPS  WRITES/S (10 s)  SIZE"), "{text}");
        let counts: Vec<Vec<&str>> = text
            .lines()
            .skip(3)
            .map(|l| l.split_whitespace().rev().take(4).collect())
            .collect();
        assert_eq!(
            counts,
            [vec!["?", "?", "3", "-"], vec!["KiB", "12.06", "2.5", "?"]],
            "{text}"
        );
        let one_row = render(&split, &config, 1, None, None);
        assert!(
            one_row.contains("… and 1 more (megastore range list)"),
            "{one_row}"
        );
    }
}
