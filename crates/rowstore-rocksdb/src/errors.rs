//! Mapping RocksDB's errors onto [`RowStoreError`], naming the directory.

use std::path::Path;

use megastore_rowstore::RowStoreError;
use rocksdb::ErrorKind;

/// Classifies an engine error: a held `LOCK` file, corruption, or other I/O trouble.
pub(crate) fn engine_error(path: &Path, error: rocksdb::Error) -> RowStoreError {
    let kind = error.kind();
    let detail = error.into_string();
    let path = path.to_path_buf();
    match kind {
        ErrorKind::Corruption => RowStoreError::Corrupt { path, detail },
        ErrorKind::IOError if detail.contains("lock file") || detail.contains("/LOCK") => {
            RowStoreError::Locked { path, detail }
        }
        _ => RowStoreError::Io { path, detail },
    }
}

/// Data read back from the engine does not have the layout this crate writes.
pub(crate) fn corrupt(path: &Path, detail: String) -> RowStoreError {
    RowStoreError::Corrupt {
        path: path.to_path_buf(),
        detail,
    }
}
