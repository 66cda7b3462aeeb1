//! Removing a replica from ranges (`megastore range remove-replica`, docs/protocol.md,
//! "Voter changes" and "Removing a full replica"): the operator's side, carried out
//! over the network. A full replica's slot first leaves
//! ([`Placement::begin_removal`]); then its coordinator on each server holding it is
//! fenced — it answers that it read that placement (`Coordinator.KnowsMove`), or the
//! lock service says nobody holds its lock (a coordinator that takes it again reads
//! the placement before vouching) — and only then is the slot removed
//! ([`Placement::remove_replica`]). A witness's or read-only replica's slot needs no
//! fence and goes at once. The placement core decides what each step is
//! ([`removal_step`]); this module carries the steps out and repeats a fence that is
//! not there yet.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_coordinator::coordinator_lock;
use megastore_lock::{LockCommand, LockReply};
use megastore_placement::{
    OperatorBugs, Placement, RangeId, RemovalStep, ServerId, Version, removal_step,
};
use megastore_types::ReplicaId;

use crate::ClientError;
use crate::placement_store::{RemovalDone, change_placement, load_placement};
use crate::range_moves::Operator;

/// How a server's coordinator was found fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// It answered that it read the placement that began the removal.
    ReadIt,
    /// Nobody holds its lock: it vouches for nothing until it takes the lock again
    /// and reads a placement at least that new.
    LockFree,
}

/// What a removal is doing, for a progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemovalUpdate {
    /// The full replica's slot is leaving from this placement version on.
    Leaving(Version),
    /// A server's coordinator is fenced.
    Fenced(ServerId, Fenced),
    /// A server's coordinator is not fenced yet (why), asked again shortly.
    Waiting(ServerId, String),
}

/// The pause between two asks of a coordinator that is not fenced yet.
const FENCE_RETRY: Duration = Duration::from_millis(500);

/// Removes replica `replica` from `ranges` (every range holding it, if empty): a full
/// replica's slot leaves, its coordinators are fenced (each for at most `patience`),
/// then the slot goes in one compare-and-set — each step the placement core's
/// [`removal_step`]. Run again after any failure, it carries on from where the
/// placement shows the removal to be.
pub async fn remove_replica(
    config: &ClusterConfig,
    replica: ReplicaId,
    ranges: &[RangeId],
    patience: Duration,
    mut progress: impl FnMut(RemovalUpdate),
) -> Result<RemovalDone, ClientError> {
    let operator = Operator::new(config)?;
    let mut fenced = BTreeSet::new();
    loop {
        let stored = load_placement(&operator.lockd, &operator.topology).await?;
        let step = |p: &Placement, fenced: &BTreeSet<_>| {
            removal_step(p, replica, ranges, fenced, OperatorBugs::NONE)
        };
        match step(&stored.placement, &fenced)
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?
        {
            RemovalStep::Write(_) => {
                // Made again over the newest placement, should another change land.
                let mut before = None;
                let after = change_placement(&operator.lockd, &operator.topology, |p| {
                    before = None;
                    match step(p, &fenced)? {
                        RemovalStep::Write(next) => {
                            before = Some(p.clone());
                            Ok(next)
                        }
                        _ => Ok(p.clone()),
                    }
                })
                .await?;
                let Some(before) = before else { continue };
                let done = RemovalDone::between(&before, after, replica);
                if !done.removed_from.is_empty() {
                    return Ok(done);
                }
                progress(RemovalUpdate::Leaving(done.placement.version()));
            }
            RemovalStep::Fence { since, servers } => {
                for server in servers {
                    let how = fence(&operator, server, since, patience, &mut progress).await?;
                    progress(RemovalUpdate::Fenced(server, how));
                    fenced.insert((server, since));
                }
            }
            RemovalStep::Done => {
                return Ok(RemovalDone::between(
                    &stored.placement,
                    stored.placement.clone(),
                    replica,
                ));
            }
        }
    }
}

/// Gives up replica `replica`'s removal from `ranges` (every range, if empty) where
/// its slot is still leaving ([`Placement::abort_removal`]): the slot stays, and its
/// coordinator serves those ranges again from a new epoch. Returns the placement
/// stored, and whether anything was given up.
pub async fn give_up(
    config: &ClusterConfig,
    replica: ReplicaId,
    ranges: &[RangeId],
) -> Result<(Placement, bool), ClientError> {
    let operator = Operator::new(config)?;
    let mut changed = false;
    let placement = change_placement(&operator.lockd, &operator.topology, |p| {
        let next = p.abort_removal(replica, ranges)?;
        changed = next != *p;
        Ok(next)
    })
    .await?;
    Ok((placement, changed))
}

/// Waits until `server`'s coordinator is fenced for the placement `since`.
async fn fence(
    operator: &Operator,
    server: ServerId,
    since: Version,
    patience: Duration,
    progress: &mut impl FnMut(RemovalUpdate),
) -> Result<Fenced, ClientError> {
    let started = Instant::now();
    loop {
        // The lock first: one quick question to lockd, where a coordinator that is
        // down would make the other wait out its deadline. Asked only now, after the
        // placement that began the removal was stored.
        let lock = coordinator_lock(server);
        let holder = operator.lockd.execute(LockCommand::Holder { lock }).await;
        if matches!(holder, Ok(LockReply::Holder(None))) {
            return Ok(Fenced::LockFree);
        }
        let asked = operator.knows_move(server, since.0).await;
        if asked == Ok(true) {
            return Ok(Fenced::ReadIt);
        }
        let why = match asked {
            Ok(_) => format!("its coordinator has not read placement {since} yet"),
            Err(why) => format!("{why}, and its coordinator's lock is held"),
        };
        if started.elapsed() > patience {
            return Err(ClientError::Unavailable(format!(
                "server {}: {why} after {}s; run the removal again",
                server.0,
                patience.as_secs()
            )));
        }
        progress(RemovalUpdate::Waiting(server, why));
        tokio::time::sleep(FENCE_RETRY).await;
    }
}
