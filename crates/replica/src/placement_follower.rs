//! Following the placement lockd holds (docs/protocol.md, "Placement"): the replica
//! server and the coordinator judge every request by the newest placement they have
//! read, so each reads it before it answers anything and then polls lockd for newer
//! ones, handing each to its core (`Input::Placement`). What a newer placement means —
//! groups leaving memory, rows retired, a new coordinator epoch — the cores decide.
//!
//! Polling, not a watch: placements change only by operator commands, and a move
//! waits for its source's coordinator to have read it (the operator's fence step), so
//! a poll's delay costs a move time, never safety. One poll is one small lockd read.

use std::time::Duration;

use megastore_client::placement_store::{change_placement, load_placement};
use megastore_config::ServerProcess;
use megastore_placement::{Placement, Range, Server, ServerId, Version};
use megastore_rpc::LockdClient;
use megastore_types::{ReplicaId, Topology};

/// How often a process asks lockd for a newer placement.
pub(crate) const PLACEMENT_POLL: Duration = Duration::from_secs(1);

/// Who a replica server process is in the placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    /// The replica whose slot it serves (in the ranges placed on it).
    pub(crate) replica: ReplicaId,
    /// Its server id.
    pub(crate) server: ServerId,
    /// Whether it is the replica's first server (its `[[replicas]]` entry, with the
    /// replica's id: [`Placement::one_server_per_replica`]) rather than one of its
    /// `[[servers]]`.
    pub(crate) first: bool,
}

impl Member {
    /// The member a configured server process is.
    pub(crate) fn of(process: &ServerProcess) -> Self {
        Self {
            replica: ReplicaId(process.process.id),
            server: ServerId(process.server),
            first: process.first,
        }
    }
}

/// The placement lockd holds now, read again until lockd answers (a process must not
/// answer anything before it knows what it serves).
pub(crate) async fn first_placement(lockd: &LockdClient, topology: &Topology) -> Placement {
    let mut attempts = 0u32;
    loop {
        match load_placement(lockd, topology).await {
            Ok(stored) => return stored.placement,
            Err(e) => {
                // Every attempt while lockd is still coming up would flood the log.
                if attempts.is_multiple_of(10) {
                    tracing::warn!(
                        "cannot read the placement yet ({e}); answering nothing until it is read"
                    );
                }
                attempts += 1;
                tokio::time::sleep(PLACEMENT_POLL / 4).await;
            }
        }
    }
}

/// What became of a placement handed to a process's events.
pub(crate) enum Fed {
    /// Taken: the core will step on it.
    Taken,
    /// The process is busy (its events are full): hand it again at the next poll.
    Busy,
    /// The process is gone.
    Gone,
}

/// The placement lockd holds, with `member` in it, added by compare-and-set if it is
/// not:
/// - a replica's first server, when the placement names the replica in no range (new
///   to the cluster, or left out by a change made from a config that predates it),
///   adds the replica ([`Placement::add_replica`]: a slot of every range on this
///   server); a replica the placement lists as removed changes nothing by it
///   ([`Placement::remove_replica`]), so its server serves nothing.
/// - any other server, when the placement does not list it, lists itself at its
///   replica's site holding nothing ([`Placement::add_server`]); ranges come to it
///   only by moves.
pub(crate) async fn join(
    lockd: &LockdClient,
    topology: &Topology,
    member: Member,
) -> Result<Placement, String> {
    let me = topology
        .replica(member.replica)
        .ok_or_else(|| format!("replica {} is not in the topology", member.replica.0))?;
    change_placement(lockd, topology, |current| {
        if member.first {
            current.add_replica(me, member.server)
        } else {
            current.add_server(Server {
                id: member.server,
                site: me.site,
            })
        }
    })
    .await
    .map_err(|e| {
        format!(
            "placing server {} of replica {}: {e}",
            member.server.0, member.replica.0
        )
    })
}

/// Polls lockd every [`PLACEMENT_POLL`] and hands `feed` each placement newer than
/// `known` (the one the process judges by already), until `feed` says the process is
/// gone. A placement that cannot be read or decoded is logged and read again later:
/// the process keeps judging by the one it has. With `joined`, a placement that lacks
/// that member is joined again ([`join`]) before it is fed.
pub(crate) fn follow(
    lockd: LockdClient,
    topology: Topology,
    mut known: Version,
    joined: Option<Member>,
    mut feed: impl FnMut(Placement) -> Fed + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PLACEMENT_POLL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // A join reads the placement too, and writes only if it lacks the replica.
            let read = match joined {
                Some(member) => join(&lockd, &topology, member).await,
                None => load_placement(&lockd, &topology)
                    .await
                    .map(|stored| stored.placement)
                    .map_err(|e| e.to_string()),
            };
            match read {
                Ok(placement) if placement.version() > known => {
                    let version = placement.version();
                    match feed(placement) {
                        Fed::Taken => {
                            tracing::info!(version = version.0, "read a newer placement");
                            known = version;
                        }
                        Fed::Busy => {}
                        Fed::Gone => return,
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("cannot read the placement: {e}"),
            }
        }
    })
}

/// The ranges `placement` puts `replica`'s slot on `server`, in key order.
pub(crate) fn ranges_held(
    placement: &Placement,
    server: ServerId,
    replica: ReplicaId,
) -> impl Iterator<Item = &Range> {
    placement
        .ranges()
        .iter()
        .filter(move |r| r.slot(replica).is_some_and(|s| s.server == server))
}
