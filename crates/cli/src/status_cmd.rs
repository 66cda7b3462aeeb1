//! `megastore status`: replicas by site and kind with their health, coordinators with
//! their epochs and lock holders, lockd's leader and members, the leading background
//! rebalancer, the placement of groups
//! over servers, and — for a named entity group — every replica's log positions.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use comfy_table::Table;
use megastore_client::status::{ClusterStatus, Health, cluster_status};
use megastore_rpc::Peers;

use crate::bytes_arg::show_bytes;
use crate::cluster_arg::ClusterArg;

/// Show how every process of a cluster stands.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// Also show every replica's log positions for this entity group (its key as text,
    /// `\xHH` for other bytes).
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Output format: `text` (tables) or `json` (one object, for scripts).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

/// How many ranges the status shows (`megastore range list` shows all).
const PLACEMENT_ROWS: usize = 12;

pub(crate) fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let group = crate::bytes_arg::group_flag(args.group.as_deref())?;
    crate::logging::init_quiet();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let status = runtime.block_on(async {
        let peers = Peers::new(&config).map_err(anyhow::Error::msg)?;
        anyhow::Ok(cluster_status(&config, &peers, group.as_ref()).await)
    })?;
    match args.output {
        Output::Text => {
            print!("{}", render(&status));
            if let Some(placement) = &status.placement {
                print!(
                    "\n{}",
                    crate::range_cmd::render(
                        placement,
                        &config,
                        PLACEMENT_ROWS,
                        None,
                        Some(&status.range_writes())
                    )
                );
            }
        }
        Output::Json => println!("{}", to_json(&status)),
    }
    Ok(ExitCode::SUCCESS)
}

/// The status as one JSON object: the same facts as [`render`]'s tables, with the
/// names of the text's columns in snake case (`null` where the text shows `-`).
pub(crate) fn to_json(status: &ClusterStatus) -> serde_json::Value {
    use serde_json::json;
    let health = |h: &Health| match h {
        Health::Serving => json!({"state": "serving"}),
        Health::Rejoining => json!({"state": "rejoining"}),
        Health::Failing(why) => json!({"state": "failing", "why": why}),
        Health::Unreachable => json!({"state": "unreachable"}),
    };
    let lockd: Vec<_> = status
        .lockd
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "site": l.site,
                "address": l.address,
                "id": l.id,
                "raft": l.raft.as_ref().map(|r| json!({
                    "state": r.state,
                    "term": r.term,
                    "leader": r.leader,
                    "voters": r.voters,
                    "learners": r.learners,
                    "last_log_index": r.last_log_index,
                    "applied_index": r.applied_index,
                })),
            })
        })
        .collect();
    let replicas: Vec<_> = status
        .replicas
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "id": r.id.0,
                "site": r.site,
                "kind": r.kind.to_string(),
                "removed": removed(status, r.id),
                "address": r.address,
                "health": health(&r.health),
                "behind": r.behind.map(|lag| json!({"groups": lag.groups, "positions": lag.positions})),
                "ranges": r.ranges.as_ref().map(|s| json!({
                    "placement_version": s.placement_version,
                    "ranges": s.ranges.iter().map(|w| json!({
                        "range": w.range.0,
                        "applied": w.applied,
                        "applied_per_second": w.per_second,
                        "bytes": w.bytes,
                    })).collect::<Vec<_>>(),
                })),
                "coordinator": r.coordinator.as_ref().map(|c| json!({
                    "address": c.address,
                    "answering": c.answering,
                    "epoch": c.epoch.map(|e| e.0),
                    "disabled": c.disabled,
                    "vouched": c.vouched,
                    "holder": c.holder.as_ref().map(|h| json!({
                        "session": h.session.0,
                        "owner": h.owner,
                        "sequencer": h.sequencer.0,
                    })),
                })),
                "log": r.log.map(|log| json!({
                    "highest": log.highest.0,
                    "visible": log.visible.0,
                    "applied": log.applied.0,
                    "truncated": log.truncated.0,
                    "next_leader": log.next_leader.map(|l| l.0),
                })),
            })
        })
        .collect();
    let schema = status.schema.as_ref().map(|s| {
        let indexes: Vec<_> = s
            .indexes
            .iter()
            .map(|i| {
                json!({
                    "name": i.name,
                    "kind": i.kind.keyword().to_lowercase(),
                    "table": i.table,
                    "state": if i.state.is_ready() { "ready" } else { "building" },
                    "backfill": i.backfill.as_ref().map(|p| json!({"groups": p.groups, "entries": p.entries})),
                })
            })
            .collect();
        json!({"name": s.name, "version": s.version, "indexes": indexes})
    });
    json!({
        "cluster": status.cluster,
        "admin_auth": status.admin_auth,
        "users_required": status.users_required,
        "lockd_leader": status.lockd_leader(),
        "lockd": lockd,
        // `null` when lockd was not asked; `{"leader": null}` when none runs.
        "rebalancer": status.rebalancer.as_ref().map(|holder| json!({
            "leader": holder.as_ref().map(|h| json!({"owner": h.owner, "session": h.session.0})),
        })),
        "replicas": replicas,
        "group": status.group.as_ref().map(|g| {
            let name = megastore_client::group_name(g).unwrap_or_else(|| g.0.clone());
            show_bytes(&name)
        }),
        "schema": schema,
        "placement": status.placement.as_ref().map(crate::range_cmd::to_json),
        "servers": status.servers.iter().map(|s| json!({
            "name": s.name,
            "server": s.server,
            "replica": s.replica,
            "site": s.site,
            "address": s.address,
            "answering": s.ranges.is_some(),
            "placement_version": s.ranges.as_ref().map(|r| r.placement_version),
            "ranges": s.ranges.as_ref().map(|r| r.ranges.iter().map(|w| w.range.0).collect::<Vec<_>>()),
            "coordinator_holder": s.coordinator_holder.as_ref().map(|h| h.as_ref().map(|h| json!({
                "session": h.session.0,
                "owner": h.owner,
            }))),
        })).collect::<Vec<_>>(),
        "queues": status.queues.as_ref().map(|q| {
            let depth = |d: &megastore_paxos::queue::Depth| {
                json!({"messages": d.messages, "oldest_sent_ms": d.oldest_sent_ms})
            };
            let inbox: serde_json::Map<String, serde_json::Value> =
                q.backlog.inbox.iter().map(|(name, d)| (name.clone(), depth(d))).collect();
            json!({
                "replica": q.replica,
                "at": q.at.map(|p| p.0),
                "inbox": inbox,
                "outbox": depth(&q.backlog.outbox),
            })
        }),
    })
}

/// A queue's depth as text: how many wait, and how long the oldest has (by its
/// sender's clock, so skew between machines shows in it).
fn depth_text(depth: &megastore_paxos::queue::Depth, now_ms: u64) -> String {
    let age = depth.oldest_sent_ms.map_or_else(String::new, |sent| {
        format!(
            ", oldest sent {:.1} s ago",
            now_ms.saturating_sub(sent) as f64 / 1000.0
        )
    });
    format!(
        "{} message{}{age}",
        depth.messages,
        if depth.messages == 1 { "" } else { "s" }
    )
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(comfy_table::presets::NOTHING)
        .set_header(header.iter().map(|h| h.to_string()));
    table
}

fn health(health: &Health) -> String {
    match health {
        Health::Serving => "serving".into(),
        Health::Rejoining => "rejoining (non-voter, catching up)".into(),
        Health::Failing(why) => format!("failing: {why}"),
        Health::Unreachable => "UNREACHABLE".into(),
    }
}

/// The status as text: three tables (four with a group).
/// The replica servers beyond the replicas' first ones: who answers, the ranges each
/// holds, and who holds its coordinator's lock.
fn render_servers(servers: &[megastore_client::status::ServerStatus]) -> String {
    let mut table = table(&[
        "SERVER",
        "REPLICA",
        "SITE",
        "ADDRESS",
        "HEALTH",
        "PLACEMENT",
        "COORDINATOR LOCK",
    ]);
    for s in servers {
        table.add_row(vec![
            format!("{} (id {})", s.name, s.server),
            s.replica.clone(),
            s.site.clone(),
            s.address.clone(),
            if s.ranges.is_some() {
                "serving".into()
            } else {
                "UNREACHABLE".into()
            },
            s.ranges.as_ref().map_or_else(
                || "-".into(),
                |r| format!("v{} ({} ranges)", r.placement_version, r.ranges.len()),
            ),
            match &s.coordinator_holder {
                None => "-".into(),
                Some(None) => "nobody".into(),
                Some(Some(h)) => format!("session {} ({})", h.session.0, h.owner),
            },
        ]);
    }
    format!("{table}\n")
}

/// Whether the placement lists replica `id` as removed from every range
/// (`megastore range remove-replica`).
fn removed(status: &ClusterStatus, id: megastore_types::ReplicaId) -> bool {
    status
        .placement
        .as_ref()
        .is_some_and(|p| p.placement.removed().contains(&id))
}

pub(crate) fn render(status: &ClusterStatus) -> String {
    let name_of = |id: u64| {
        status
            .lockd
            .iter()
            .find(|l| u64::from(l.id) == id)
            .map_or_else(|| format!("#{id}"), |l| l.name.clone())
    };
    let mut out = format!("cluster {:?}\n", status.cluster);
    out.push_str(if status.admin_auth {
        "administration: operator token required ([auth])\n"
    } else {
        "administration: UNAUTHENTICATED (no [auth]: anyone who reaches a replica may back it up)\n"
    });
    out.push_str(if status.users_required {
        "public API: users only, held to their roles ([auth] require_users; megastore user list)\n\n"
    } else {
        "public API: open to anyone who reaches a replica (no [auth] require_users)\n\n"
    });
    match status.lockd_leader() {
        Some(leader) => out.push_str(&format!("lock service: leader {}\n", name_of(leader))),
        None => out.push_str("lock service: NO LEADER (coordinators cannot renew their locks)\n"),
    }
    let mut lockd = table(&[
        "LOCKD", "SITE", "ADDRESS", "STATE", "TERM", "LEADER", "VOTERS", "LEARNERS", "LOG",
        "APPLIED",
    ]);
    for l in &status.lockd {
        let list = |ids: &[u64]| {
            ids.iter()
                .map(|id| name_of(*id))
                .collect::<Vec<_>>()
                .join(",")
        };
        let number = |n: Option<u64>| n.map_or_else(|| "-".into(), |n| n.to_string());
        match &l.raft {
            Some(raft) => lockd.add_row(vec![
                l.name.clone(),
                l.site.clone(),
                l.address.clone(),
                raft.state.clone(),
                raft.term.to_string(),
                raft.leader.map_or_else(|| "-".into(), name_of),
                list(&raft.voters),
                list(&raft.learners),
                number(raft.last_log_index),
                number(raft.applied_index),
            ]),
            None => lockd.add_row(vec![
                l.name.clone(),
                l.site.clone(),
                l.address.clone(),
                "UNREACHABLE".into(),
            ]),
        };
    }
    out.push_str(&format!("{lockd}\n"));
    match &status.rebalancer {
        Some(Some(holder)) => out.push_str(&format!(
            "rebalancer: {} leads (session {})\n",
            holder.owner, holder.session.0
        )),
        Some(None) => {
            out.push_str("rebalancer: none running (`megastore range rebalance --every`)\n")
        }
        None => {}
    }
    out.push('\n');

    let mut replicas = table(&[
        "REPLICA",
        "SITE",
        "KIND",
        "ADDRESS",
        "HEALTH",
        "BEHIND",
        "PLACEMENT",
        "COORDINATOR",
        "EPOCH",
        "LOCK HOLDER",
    ]);
    for r in &status.replicas {
        let kind = if removed(status, r.id) {
            format!("{} (removed)", r.kind)
        } else {
            r.kind.to_string()
        };
        let (coordinator, epoch, holder) = match &r.coordinator {
            None => ("-".into(), "-".into(), "-".into()),
            Some(c) => (
                format!(
                    "{} {}",
                    c.address,
                    if c.answering {
                        "answering"
                    } else {
                        "UNREACHABLE"
                    }
                ),
                match (c.epoch, c.disabled) {
                    (_, true) => "DISABLED (until its process restarts)".into(),
                    (Some(e), false) => e.0.to_string(),
                    (None, false) => "none (holds no lock)".into(),
                },
                c.holder.as_ref().map_or_else(
                    || "nobody".into(),
                    |h| {
                        format!(
                            "session {} ({}) sequencer {}",
                            h.session.0, h.owner, h.sequencer.0
                        )
                    },
                ),
            ),
        };
        replicas.add_row(vec![
            r.name.clone(),
            r.site.clone(),
            kind,
            r.address.clone(),
            health(&r.health),
            r.behind.map_or_else(
                || "-".into(),
                |lag| match lag.positions {
                    0 => "0".to_string(),
                    n => format!("{n} positions in {} groups", lag.groups),
                },
            ),
            // The placement it judges by, and the ranges that puts on it: one behind
            // the others has not read the newest yet.
            r.ranges.as_ref().map_or_else(
                || "-".into(),
                |s| format!("v{} ({} ranges)", s.placement_version, s.ranges.len()),
            ),
            coordinator,
            epoch,
            holder,
        ]);
    }
    out.push_str(&format!("{replicas}\n"));
    if !status.servers.is_empty() {
        out.push('\n');
        out.push_str(&render_servers(&status.servers));
    }

    if let Some(schema) = &status.schema {
        out.push_str(&format!(
            "\nschema {} (catalog version {})\n",
            schema.name, schema.version
        ));
        let mut indexes = table(&["INDEX", "KIND", "TABLE", "STATE"]);
        for i in &schema.indexes {
            let state = match (&i.backfill, i.state.is_ready()) {
                (_, true) => "ready".to_string(),
                (Some(p), false) if p.groups > 0 => format!(
                    "BUILDING: backfilled {} groups ({} entries); scans refused",
                    p.groups, p.entries
                ),
                (_, false) => {
                    "BUILDING: not backfilled yet (`megastore schema backfill`); scans refused"
                        .to_string()
                }
            };
            indexes.add_row(vec![
                i.name.clone(),
                i.kind.keyword().to_lowercase(),
                i.table.clone(),
                state,
            ]);
        }
        out.push_str(&format!("{indexes}\n"));
    }

    if let Some(group) = &status.group {
        let name = megastore_client::group_name(group).unwrap_or_else(|| group.0.clone());
        out.push_str(&format!("\nentity group {}\n", show_bytes(&name)));
        let mut log = table(&[
            "REPLICA",
            "HIGHEST",
            "VISIBLE",
            "APPLIED",
            "TRUNCATED",
            "NEXT LEADER",
            "VOUCHED",
        ]);
        for r in &status.replicas {
            let vouched = r
                .coordinator
                .as_ref()
                .and_then(|c| c.vouched)
                .map_or("-", |v| if v { "yes" } else { "no" });
            match &r.log {
                Some(state) => log.add_row(vec![
                    r.name.clone(),
                    state.highest.0.to_string(),
                    state.visible.0.to_string(),
                    state.applied.0.to_string(),
                    state.truncated.0.to_string(),
                    state.next_leader.map_or_else(
                        || "-".into(),
                        |leader| {
                            status
                                .replicas
                                .iter()
                                .find(|r| r.id == leader)
                                .map_or_else(|| format!("#{}", leader.0), |r| r.name.clone())
                        },
                    ),
                    vouched.into(),
                ]),
                None => log.add_row(vec![r.name.clone(), health(&r.health)]),
            };
        }
        out.push_str(&format!("{log}\n"));
        if let Some(queues) = &status.queues {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            let at = queues.at.map_or_else(String::new, |p| format!(" at {p}"));
            out.push_str(&format!(
                "\nqueues (as applied at replica {}{at})\n",
                queues.replica
            ));
            let mut table = table(&["QUEUE", "WAITING"]);
            table.add_row(vec![
                "(outbox: sent, not yet delivered)".to_string(),
                depth_text(&queues.backlog.outbox, now_ms),
            ]);
            for (name, depth) in &queues.backlog.inbox {
                table.add_row(vec![name.clone(), depth_text(depth, now_ms)]);
            }
            out.push_str(&format!("{table}\n"));
        }
    }
    out
}
