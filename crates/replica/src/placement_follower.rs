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
use megastore_placement::{Placement, Range, ServerId, Version};
use megastore_rpc::LockdClient;
use megastore_types::{ReplicaId, Topology};

/// How often a process asks lockd for a newer placement.
pub(crate) const PLACEMENT_POLL: Duration = Duration::from_secs(1);

/// The server a replica's process runs as. Every cluster today runs one server per
/// replica, with the replica's id ([`Placement::one_server_per_replica`]).
pub(crate) fn own_server(replica: ReplicaId) -> ServerId {
    ServerId(replica.0)
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

/// The placement lockd holds, with `replica` in it: a replica the placement names in
/// no range (new to the cluster, or left out by a change made from a config that
/// predates it) adds itself first, by compare-and-set ([`Placement::add_replica`]: a
/// slot of every range on a server of its own). Removing a replica from a range is
/// not built; when it is, a removed replica must not add itself back.
pub(crate) async fn join(
    lockd: &LockdClient,
    topology: &Topology,
    replica: ReplicaId,
) -> Result<Placement, String> {
    let me = topology
        .replica(replica)
        .ok_or_else(|| format!("replica {} is not in the topology", replica.0))?;
    change_placement(lockd, topology, |current| {
        current.add_replica(me, own_server(replica))
    })
    .await
    .map_err(|e| format!("placing replica {}: {e}", replica.0))
}

/// Polls lockd every [`PLACEMENT_POLL`] and hands `feed` each placement newer than
/// `known` (the one the process judges by already), until `feed` says the process is
/// gone. A placement that cannot be read or decoded is logged and read again later:
/// the process keeps judging by the one it has. With `joined`, a placement that names
/// that replica in no range is joined again ([`join`]) before it is fed.
pub(crate) fn follow(
    lockd: LockdClient,
    topology: Topology,
    mut known: Version,
    joined: Option<ReplicaId>,
    mut feed: impl FnMut(Placement) -> Fed + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PLACEMENT_POLL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // A join reads the placement too, and writes only if it lacks the replica.
            let read = match joined {
                Some(replica) => join(&lockd, &topology, replica).await,
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
