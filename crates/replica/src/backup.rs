//! Backing up a stopped replica's store, for restoring it later.
//!
//! A backup is a RocksDB checkpoint of the data directory *without* the directory's
//! stamp: restored, it has no stamp while lockd records that the replica served, so it
//! rejoins (no vote per group until caught up) — it may lack votes its replica cast
//! after the backup was made, and voting again there could let two values be chosen.

use std::path::Path;

use megastore_config::ClusterConfig;
use megastore_rowstore::RowStoreError;
use megastore_rowstore_rocksdb::RocksStore;

use crate::ProcessError;

/// Writes a backup of replica `name`'s store to `out` (which must not exist). The
/// replica must be stopped (the others keep serving); returns its data directory.
pub fn backup_replica(
    config: &ClusterConfig,
    name: &str,
    out: &Path,
) -> Result<std::path::PathBuf, ProcessError> {
    let replica = config.replica(name).ok_or_else(|| {
        ProcessError::UnknownName(format!(
            "no replica is called {name:?} in the config (replicas: {})",
            ClusterConfig::names(config.replicas.iter().map(|r| r.name.as_str()))
        ))
    })?;
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
