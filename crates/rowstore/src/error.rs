use std::path::PathBuf;

/// Why a row store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RowStoreError {
    /// A batch named a row outside the key range it promised to stay in.
    #[error("row {row:?} lies outside the batch's key range {range}")]
    RowOutsideRange {
        /// The offending row key (escaped for display).
        row: String,
        /// The promised range (escaped for display).
        range: String,
    },
    /// Another process holds the store's directory.
    #[error(
        "store directory {path} is locked by another process (is another replica running on it?): {detail}"
    )]
    Locked {
        /// The data directory.
        path: PathBuf,
        /// What the storage engine said.
        detail: String,
    },
    /// The stored data is damaged.
    #[error("store {path} is corrupt: {detail}")]
    Corrupt {
        /// The data directory.
        path: PathBuf,
        /// What is damaged.
        detail: String,
    },
    /// The storage engine or the file system failed.
    #[error("store {path}: {detail}")]
    Io {
        /// The data directory.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// Shows a byte key readably in error messages.
pub fn display_key(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}
