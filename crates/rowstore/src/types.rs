//! The Bigtable data model: rows of columns of timestamped cells, and mutations of them.

use std::collections::BTreeMap;

use crate::ordered::KeyRange;

/// A cell version's timestamp. Megastore uses the log position.
pub type Timestamp = u64;

/// Read "as of now": the newest version of every cell.
pub const LATEST: Timestamp = Timestamp::MAX;

/// One version of one column, as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The version's timestamp.
    pub timestamp: Timestamp,
    /// The stored bytes.
    pub value: Vec<u8>,
}

/// A row as seen at some timestamp: for each column, its newest version at or below
/// that timestamp, unless that version is a deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The row key.
    pub key: Vec<u8>,
    /// Column name → visible cell. Never empty: a row without visible cells is absent.
    pub cells: BTreeMap<Vec<u8>, Cell>,
}

impl Row {
    /// The visible value of `column`, if any.
    pub fn value(&self, column: &[u8]) -> Option<&[u8]> {
        self.cells.get(column).map(|c| c.value.as_slice())
    }
}

/// One change to one column of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Write `value` as the version of `column` at `timestamp` (replacing a version
    /// already at that timestamp).
    Set {
        /// Column name.
        column: Vec<u8>,
        /// Version timestamp.
        timestamp: Timestamp,
        /// Bytes to store.
        value: Vec<u8>,
    },
    /// Delete `column` as of `timestamp`: reads at `timestamp` or later (until a newer
    /// version) see no value, reads below `timestamp` still see the older versions.
    /// Stored as a tombstone version; garbage collection removes it later.
    DeleteColumn {
        /// Column name.
        column: Vec<u8>,
        /// Tombstone timestamp.
        timestamp: Timestamp,
    },
    /// Remove exactly the version of `column` at `timestamp`, if there is one.
    DeleteCell {
        /// Column name.
        column: Vec<u8>,
        /// Timestamp of the version to remove.
        timestamp: Timestamp,
    },
    /// Remove every version (tombstones included) of every column in `columns`, as a
    /// [`Mutation::DeleteCell`] of each would, in one write however many it covers.
    DeleteColumns {
        /// The columns.
        columns: KeyRange,
    },
}

impl Mutation {
    /// The one column this mutation touches; `None` for a range of columns.
    pub fn column(&self) -> Option<&[u8]> {
        match self {
            Mutation::Set { column, .. }
            | Mutation::DeleteColumn { column, .. }
            | Mutation::DeleteCell { column, .. } => Some(column),
            Mutation::DeleteColumns { .. } => None,
        }
    }
}

/// Mutations of one row, applied atomically and in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowMutation {
    /// The row key.
    pub row: Vec<u8>,
    /// The changes, applied in this order.
    pub mutations: Vec<Mutation>,
}

impl RowMutation {
    /// An empty mutation of `row`.
    pub fn new(row: impl Into<Vec<u8>>) -> Self {
        Self {
            row: row.into(),
            mutations: Vec::new(),
        }
    }

    /// Adds a [`Mutation::Set`].
    pub fn set(
        mut self,
        column: impl Into<Vec<u8>>,
        timestamp: Timestamp,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        self.mutations.push(Mutation::Set {
            column: column.into(),
            timestamp,
            value: value.into(),
        });
        self
    }

    /// Adds a [`Mutation::DeleteColumn`].
    pub fn delete_column(mut self, column: impl Into<Vec<u8>>, timestamp: Timestamp) -> Self {
        self.mutations.push(Mutation::DeleteColumn {
            column: column.into(),
            timestamp,
        });
        self
    }

    /// About how many bytes it writes: its row key, columns, values and timestamps.
    pub fn size_bytes(&self) -> usize {
        let cells: usize = self
            .mutations
            .iter()
            .map(|m| match m {
                Mutation::Set { column, value, .. } => column.len() + value.len() + 8,
                Mutation::DeleteColumn { column, .. } | Mutation::DeleteCell { column, .. } => {
                    column.len() + 8
                }
                Mutation::DeleteColumns { columns } => {
                    columns.start.len() + columns.end.as_ref().map_or(0, Vec::len)
                }
            })
            .sum();
        self.row.len() + cells
    }

    /// Adds a [`Mutation::DeleteCell`].
    pub fn delete_cell(mut self, column: impl Into<Vec<u8>>, timestamp: Timestamp) -> Self {
        self.mutations.push(Mutation::DeleteCell {
            column: column.into(),
            timestamp,
        });
        self
    }

    /// Adds a [`Mutation::DeleteColumns`].
    pub fn delete_columns(mut self, columns: KeyRange) -> Self {
        self.mutations.push(Mutation::DeleteColumns { columns });
        self
    }
}

/// A check-and-mutate condition on the newest version of one cell (any timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The column to check.
    pub column: Vec<u8>,
    /// The value its newest version must hold; `None` means "absent or deleted".
    pub expected: Option<Vec<u8>>,
}

/// What a conditional mutation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MutateOutcome {
    /// The condition held (or there was none) and every mutation was applied.
    Applied,
    /// The condition did not hold; nothing was written.
    ConditionFailed {
        /// The newest version of the checked cell, if it has a live one.
        current: Option<Cell>,
    },
}

/// Whether a write must reach stable storage before the call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Durable before returning: survives a crash of the process or the machine.
    /// Concurrent synced writes may share one sync.
    Synced,
    /// Visible at once; durable at the next synced write or [`crate::RowStore::sync`].
    /// A machine crash (the in-memory store's [`crate::MemoryStore::crash`]) may lose it.
    Buffered,
}

/// How to scan a row range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOptions {
    /// Which columns to return; rows with no visible cell among them are skipped.
    pub columns: KeyRange,
    /// At most this many rows; `None` = no limit.
    pub limit: Option<usize>,
    /// Return rows in descending key order.
    pub reverse: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            columns: KeyRange::all(),
            limit: None,
            reverse: false,
        }
    }
}

/// What a garbage collection pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GcStats {
    /// Cell versions (including tombstones) removed.
    pub cells_removed: u64,
}

/// One stored version of one column, tombstones included: what a copy of rows carries
/// ([`crate::RowRead::export_rows`], [`crate::copy_span`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StoredVersion {
    /// Column name.
    pub column: Vec<u8>,
    /// Version timestamp.
    pub timestamp: Timestamp,
    /// The bytes, or `None` for a deletion tombstone.
    pub value: Option<Vec<u8>>,
}

/// Every stored version of one row: by column, then newest first. Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    /// The row key.
    pub key: Vec<u8>,
    /// Its versions.
    pub versions: Vec<StoredVersion>,
}

impl StoredRow {
    /// The bytes it holds: its key, and each version's column, value and timestamp.
    pub fn stored_bytes(&self) -> usize {
        self.key.len()
            + self
                .versions
                .iter()
                .map(|v| v.column.len() + v.value.as_ref().map_or(0, Vec::len) + 8)
                .sum::<usize>()
    }
}
