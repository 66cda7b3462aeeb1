//! Whose a replica's data directory is, and whether it may have forgotten votes.
//!
//! A replica that has voted must never vote again at a position it may have voted on
//! before. If its store is lost (a wiped disk, a new machine), it cannot know which
//! positions those were, so it rejoins (DESIGN.md §4): per group, no vote until the
//! sweep learned how far the other voters got. To tell "lost its store" from "never
//! ran", a replica stamps its directory, then records in lockd that it joined — on
//! every start, before it serves. On start:
//!
//! | directory stamp | lockd `replicas/<id>/joined` | meaning |
//! |---|---|---|
//! | present | — | its own store: trust it (rejoining if the stamp says so) |
//! | absent | absent | it never served: a member from the start |
//! | absent | present | it served before and lost its store: rejoining |
//!
//! A process killed between the two finds its stamp and records `joined` then; one that
//! never got to stamp comes back as new (it had not served). A rejoining stamp stays
//! rejoining: groups it has not touched since still need
//! clearing after any later restart (cleared groups keep their floor in the store).

use std::path::{Path, PathBuf};

use megastore_config::ClusterConfig;
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_lockd::LockdClient;
use megastore_types::ReplicaId;
use serde::{Deserialize, Serialize};

use crate::ProcessError;

/// The file in a replica's data directory.
pub(crate) const STAMP_FILE: &str = "MEGASTORE_STAMP";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stamp {
    pub(crate) cluster: String,
    pub(crate) replica: u16,
    /// Lost its store at some point: rejoin groups it has not cleared.
    pub(crate) rejoining: bool,
}

fn joined_file(id: ReplicaId) -> String {
    format!("replicas/{}/joined", id.0)
}

fn stamp_path(dir: &Path) -> PathBuf {
    dir.join(STAMP_FILE)
}

fn read_stamp(dir: &Path) -> Result<Option<Stamp>, ProcessError> {
    let path = stamp_path(dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            ProcessError::Config(format!("{}: not a megastore stamp ({e})", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ProcessError::Config(format!("{}: {e}", path.display()))),
    }
}

fn write_stamp(dir: &Path, stamp: &Stamp) -> Result<(), ProcessError> {
    let path = stamp_path(dir);
    let io = |e: std::io::Error| ProcessError::Config(format!("{}: {e}", path.display()));
    let temporary = dir.join(format!("{STAMP_FILE}.new"));
    let bytes =
        serde_json::to_vec_pretty(stamp).map_err(|e| ProcessError::Config(e.to_string()))?;
    std::fs::write(&temporary, bytes).map_err(io)?;
    std::fs::File::open(&temporary)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&temporary, &path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

async fn lockd_call(lockd: &LockdClient, command: LockCommand) -> Result<LockReply, ProcessError> {
    lockd
        .execute(command)
        .await
        .map_err(|e| ProcessError::Lock(format!("{e} (the replica needs lockd to start)")))
}

/// Checks or creates the stamp of replica `id`'s directory; returns whether it rejoins.
pub(crate) async fn check_or_stamp(
    config: &ClusterConfig,
    id: ReplicaId,
    dir: &Path,
    lockd: &LockdClient,
) -> Result<bool, ProcessError> {
    let rejoining = match read_stamp(dir)? {
        Some(found) => {
            if found.cluster != config.cluster.name || found.replica != id.0 {
                return Err(ProcessError::Config(format!(
                    "data directory {} belongs to replica {} of cluster {:?}, not replica {} of {:?}; point data_dir elsewhere",
                    dir.display(),
                    found.replica,
                    found.cluster,
                    id.0,
                    config.cluster.name
                )));
            }
            found.rejoining
        }
        None => {
            // The stamp first: a process killed before it records `joined` below comes
            // back to its own (stamped) store, not as a replica that lost it.
            let rejoining = joined(lockd, id).await?;
            write_stamp(
                dir,
                &Stamp {
                    cluster: config.cluster.name.clone(),
                    replica: id.0,
                    rejoining,
                },
            )?;
            rejoining
        }
    };
    // Recorded before this process serves (so before any vote), on every start.
    if !joined(lockd, id).await? {
        let write = LockCommand::WriteFile {
            name: joined_file(id),
            expected: 0,
            contents: config.cluster.name.as_bytes().to_vec(),
        };
        match lockd.execute(write).await {
            // Someone recorded it meanwhile: the goal is met.
            Ok(_) | Err(LockError::VersionMismatch { .. }) => {}
            Err(e) => return Err(ProcessError::Lock(e.to_string())),
        }
    }
    Ok(rejoining)
}

/// Whether lockd records that replica `id` has served.
async fn joined(lockd: &LockdClient, id: ReplicaId) -> Result<bool, ProcessError> {
    match lockd_call(
        lockd,
        LockCommand::ReadFile {
            name: joined_file(id),
        },
    )
    .await?
    {
        LockReply::File(file) => Ok(file.is_some()),
        other => Err(ProcessError::Lock(format!("unexpected reply {other:?}"))),
    }
}
