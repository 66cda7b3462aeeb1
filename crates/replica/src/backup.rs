//! Backing up a replica's store, for restoring it later: from the running replica
//! (`Admin.Backup`, streamed to wherever the operator runs `megastore backup`), or from
//! a stopped replica's directory on this machine.
//!
//! A backup is a RocksDB checkpoint of the data directory *without* the directory's
//! stamp: restored, it has no stamp while lockd records that the replica served, so it
//! rejoins (no vote per group until caught up) — it may lack votes its replica cast
//! after the backup was made, and voting again there could let two values be chosen.

use std::path::{Path, PathBuf};
use std::time::Duration;

use megastore_config::ClusterConfig;
use megastore_rowstore::RowStoreError;
use megastore_rowstore_rocksdb::RocksStore;
use megastore_rpc::Transport;
use megastore_rpc::pb::admin::BackupRequest;
use megastore_rpc::pb::admin::admin_client::AdminClient;
use tokio::io::AsyncWriteExt;

use crate::ProcessError;

/// Why a backup of a running replica failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The replica's server could not be reached (it may be stopped: back up its
    /// directory instead).
    #[error("replica {replica} at {address} cannot be reached: {message}")]
    Unreachable {
        /// The replica's name.
        replica: String,
        /// Its address.
        address: String,
        /// What failed.
        message: String,
    },
    /// The replica, the transfer or the local files failed; nothing usable was left at
    /// the destination.
    #[error("{0}")]
    Failed(String),
}

/// What a backup wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupCopy {
    /// Files written.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// Backs up the running replica `name` into `out` (a new directory on this machine):
/// the replica takes a checkpoint while it serves and streams it here. The copy is
/// written beside `out` first and renamed into place only once complete; `progress`
/// hears how much has arrived after every chunk.
pub async fn backup_running_replica(
    config: &ClusterConfig,
    name: &str,
    out: &Path,
    mut progress: impl FnMut(BackupCopy),
) -> Result<BackupCopy, BackupError> {
    let replica = config
        .named_server_process(name)
        .map_err(BackupError::Failed)?
        .process;
    if out.exists() {
        return Err(BackupError::Failed(format!(
            "{} exists; a backup goes to a new directory",
            out.display()
        )));
    }
    let partial = partial_path(out);
    if partial.exists() {
        return Err(BackupError::Failed(format!(
            "{} exists (a backup that did not finish?): remove it first",
            partial.display()
        )));
    }
    let unreachable = |message: String| BackupError::Unreachable {
        replica: name.to_string(),
        address: replica.admin_endpoint().to_string(),
        message,
    };
    let channel = Transport::from_config(config)
        .and_then(|t| t.channel(replica.admin_endpoint(), config.timeouts.rpc()))
        .map_err(|e| BackupError::Failed(e.to_string()))?;
    let mut admin = AdminClient::new(channel);
    let token = config
        .operator_token()
        .map_err(|e| BackupError::Failed(e.to_string()))?;
    let request = megastore_rpc::with_operator_token(BackupRequest {}, token.as_deref());
    let call = tokio::time::timeout(config.timeouts.rpc() * 4, admin.backup(request));
    let mut chunks = match call.await {
        Err(_) => return Err(unreachable("no answer".into())),
        Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
            return Err(unreachable(status.message().to_string()));
        }
        Ok(Err(status)) => {
            return Err(BackupError::Failed(format!(
                "replica {name} refused the backup: {}",
                status.message()
            )));
        }
        Ok(Ok(response)) => response.into_inner(),
    };
    if let Some(parent) = partial.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| BackupError::Failed(format!("creating {}: {e}", parent.display())))?;
    }
    // A new directory, or nothing: what is there already is not ours to remove.
    tokio::fs::create_dir(&partial)
        .await
        .map_err(|e| BackupError::Failed(format!("creating {}: {e}", partial.display())))?;
    let result = async {
        let mut copy = BackupCopy { files: 0, bytes: 0 };
        let mut current: Option<(String, tokio::fs::File)> = None;
        // A stalled transfer fails rather than hangs.
        let idle = Duration::from_secs(60);
        loop {
            let chunk = match tokio::time::timeout(idle, chunks.message()).await {
                Err(_) => return Err(format!("no data from replica {name} for {idle:?}")),
                Ok(Err(status)) => {
                    return Err(format!("replica {name}: {}", status.message()));
                }
                Ok(Ok(None)) => break,
                Ok(Ok(Some(chunk))) => chunk,
            };
            if current.as_ref().is_none_or(|(file, _)| *file != chunk.file) {
                if let Some((_, file)) = current.take() {
                    file.sync_all().await.map_err(|e| e.to_string())?;
                }
                let path = partial.join(file_name(&chunk.file)?);
                let file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .await
                    .map_err(|e| format!("creating {}: {e}", path.display()))?;
                copy.files += 1;
                current = Some((chunk.file.clone(), file));
            }
            if let Some((_, file)) = current.as_mut() {
                file.write_all(&chunk.data)
                    .await
                    .map_err(|e| format!("writing {}: {e}", partial.display()))?;
                copy.bytes += chunk.data.len() as u64;
            }
            progress(copy);
        }
        if let Some((_, file)) = current.take() {
            file.sync_all().await.map_err(|e| e.to_string())?;
        }
        if copy.files == 0 {
            return Err(format!("replica {name} sent no files"));
        }
        tokio::fs::rename(&partial, out)
            .await
            .map_err(|e| format!("renaming {} to {}: {e}", partial.display(), out.display()))?;
        Ok(copy)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_dir_all(&partial).await;
    }
    result.map_err(BackupError::Failed)
}

/// Where a backup to `out` is written until it is complete.
fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

/// A file name the replica sent, refused if it would leave the backup directory.
fn file_name(name: &str) -> Result<&str, String> {
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\']);
    if plain {
        Ok(name)
    } else {
        Err(format!(
            "the replica sent a file name {name:?} that is not a plain name"
        ))
    }
}

/// Writes a backup of replica `name`'s store to `out` (which must not exist). The
/// replica must be stopped (the others keep serving); returns its data directory.
pub fn backup_replica(
    config: &ClusterConfig,
    name: &str,
    out: &Path,
) -> Result<std::path::PathBuf, ProcessError> {
    let replica = config
        .named_server_process(name)
        .map_err(ProcessError::UnknownName)?
        .process;
    if out.exists() {
        return Err(ProcessError::Config(format!(
            "{} exists; a backup goes to a new directory",
            out.display()
        )));
    }
    if !replica.data_dir.exists() {
        return Err(ProcessError::Config(format!(
            "replica {name} has no data directory at {}",
            replica.data_dir.display()
        )));
    }
    let store = RocksStore::open(&replica.data_dir).map_err(|e| match e {
        RowStoreError::Locked { .. } => ProcessError::Config(format!(
            "replica {name} is running ({} is in use): stop it first — the other replicas keep serving",
            replica.data_dir.display()
        )),
        e => ProcessError::Config(format!("replica {name}: {e}")),
    })?;
    store
        .checkpoint(out)
        .map_err(|e| ProcessError::Config(format!("backing up replica {name}: {e}")))?;
    Ok(replica.data_dir.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_file_names_from_the_replica_are_written() {
        assert_eq!(file_name("000009.sst"), Ok("000009.sst"));
        for bad in ["", ".", "..", "../escape", "a/b", "/etc/passwd", "a\\b"] {
            let error = file_name(bad).unwrap_err();
            assert!(error.contains("not a plain name"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn a_backup_is_written_beside_its_destination_until_complete() {
        assert_eq!(
            partial_path(Path::new("/backups/b-1")),
            PathBuf::from("/backups/b-1.partial")
        );
    }
}
