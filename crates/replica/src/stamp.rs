//! Whose a replica's data directory is, and whether it may have forgotten votes.
//!
//! A replica that has voted must never vote again at a position it may have voted on
//! before. If its store is lost (a wiped disk, a new machine), it cannot know which
//! positions those were, so it rejoins (DESIGN.md §4): per group, no vote until the
//! sweep learned how far the other voters got. To tell "lost its store" from "never
//! ran", a replica records in lockd that it joined *before* it first serves, and stamps
//! its directory after. On start:
//!
//! | directory stamp | lockd `replicas/<id>/joined` | meaning |
//! |---|---|---|
//! | present | — | its own store: trust it (rejoining if the stamp says so) |
//! | absent | absent | it never served: a member from the start |
//! | absent | present | it served before and lost its store: rejoining |
//!
//! A rejoining stamp stays rejoining: groups it has not touched since still need
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
    let expected = |rejoining| Stamp {
        cluster: config.cluster.name.clone(),
        replica: id.0,
        rejoining,
    };
    if let Some(found) = read_stamp(dir)? {
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
        return Ok(found.rejoining);
    }
    let name = joined_file(id);
    let joined = match lockd_call(lockd, LockCommand::ReadFile { name: name.clone() }).await? {
        LockReply::File(file) => file.is_some(),
        other => return Err(ProcessError::Lock(format!("unexpected reply {other:?}"))),
    };
    if !joined {
        // Recorded before the first vote; a concurrent start of the same replica loses
        // the race here and fails rather than both serving.
        match lockd
            .execute(LockCommand::WriteFile {
                name,
                expected: 0,
                contents: config.cluster.name.as_bytes().to_vec(),
            })
            .await
        {
            Ok(_) => {}
            Err(LockError::VersionMismatch { .. }) => {
                return Err(ProcessError::Lock(
                    "another process started this replica at the same time".into(),
                ));
            }
            Err(e) => return Err(ProcessError::Lock(e.to_string())),
        }
    }
    let rejoining = joined;
    write_stamp(dir, &expected(rejoining))?;
    Ok(rejoining)
}
