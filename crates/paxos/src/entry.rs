//! Log entries: what one transaction asks to write, plus what the protocol needs.

use std::collections::BTreeSet;

use megastore_rowstore::{KeyRange, Mutation, RowMutation, Timestamp};
use megastore_types::limits::{
    COLUMN_BYTES_MAX, LimitError, ROW_BYTES_MAX, ROW_KEY_BYTES_MAX, TRANSACTION_BYTES_MAX,
    VALUE_BYTES_MAX,
};
use megastore_types::reserved::{GLOBAL_INDEX_TAG, GLOBAL_MIRROR_OBJECT};
use megastore_types::{EgId, ReplicaId, TxnId};
use serde::{Deserialize, Serialize};

/// One cell change, without a timestamp: apply stamps it with the entry's position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CellWrite {
    /// Set the column's value.
    Set {
        /// Column name.
        column: Vec<u8>,
        /// New value.
        value: Vec<u8>,
    },
    /// Delete the column (as of the entry's timestamp).
    Delete {
        /// Column name.
        column: Vec<u8>,
    },
}

impl CellWrite {
    /// The column it changes.
    pub fn column(&self) -> &[u8] {
        match self {
            CellWrite::Set { column, .. } | CellWrite::Delete { column } => column,
        }
    }
}

/// A row-store mutation deleting a range of columns offered as a log entry's write:
/// an entry names each column it changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a log entry cannot delete a range of columns (row {row:?})")]
pub struct RangeDeletionInEntry {
    /// The row.
    pub row: Vec<u8>,
}

/// The cell changes of one row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowWrite {
    /// The row key (inside the entry's entity group).
    pub row: Vec<u8>,
    /// Its changes, in order.
    pub cells: Vec<CellWrite>,
}

impl RowWrite {
    /// A row write from a row-store mutation, dropping its timestamps (the position
    /// decides them). Cell deletions of a single version have no meaning in a log entry
    /// and become column deletions; a range deletion has no form in one at all.
    pub fn from_mutation(mutation: &RowMutation) -> Result<Self, RangeDeletionInEntry> {
        let cells = mutation
            .mutations
            .iter()
            .map(|m| match m {
                Mutation::Set { column, value, .. } => Ok(CellWrite::Set {
                    column: column.clone(),
                    value: value.clone(),
                }),
                Mutation::DeleteColumn { column, .. } | Mutation::DeleteCell { column, .. } => {
                    Ok(CellWrite::Delete {
                        column: column.clone(),
                    })
                }
                Mutation::DeleteColumns { .. } => Err(RangeDeletionInEntry {
                    row: mutation.row.clone(),
                }),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            row: mutation.row.clone(),
            cells,
        })
    }

    /// The row this write leaves in an empty store when applied at `timestamp`: its
    /// sets (a delete leaves nothing).
    pub fn as_row(&self, timestamp: Timestamp) -> megastore_rowstore::Row {
        megastore_rowstore::Row {
            key: self.row.clone(),
            cells: self
                .cells
                .iter()
                .filter_map(|c| match c {
                    CellWrite::Set { column, value } => Some((
                        column.clone(),
                        megastore_rowstore::Cell {
                            timestamp,
                            value: value.clone(),
                        },
                    )),
                    CellWrite::Delete { .. } => None,
                })
                .collect(),
        }
    }

    /// The row-store mutation that applies this write at `timestamp`.
    pub fn at(&self, timestamp: Timestamp) -> RowMutation {
        let mutations = self
            .cells
            .iter()
            .map(|c| match c {
                CellWrite::Set { column, value } => Mutation::Set {
                    column: column.clone(),
                    timestamp,
                    value: value.clone(),
                },
                CellWrite::Delete { column } => Mutation::DeleteColumn {
                    column: column.clone(),
                    timestamp,
                },
            })
            .collect();
        RowMutation {
            row: self.row.clone(),
            mutations,
        }
    }
}

/// A transaction combined into an entry after its first one (docs/protocol.md,
/// "Combining commits"): its id, and where its writes begin among the entry's
/// `writes`. A transaction's writes run to where the next one's begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinedTxn {
    /// The transaction.
    pub txn: TxnId,
    /// The index in `writes` of its first write.
    pub first_write: u32,
}

/// A two-phase commit record kept in this group's log. Unused: two-phase commit keeps
/// its prepared records and decisions as rows of the groups' entries
/// ([`crate::two_phase`]), which reads, snapshots and truncation already handle; the
/// field stays so that stored entries keep their format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TwoPhaseRecord {
    /// This group is prepared to commit `txn`, whose coordinator group is `coordinator`.
    Prepared {
        /// The cross-group transaction.
        txn: TxnId,
        /// Its coordinating entity group.
        coordinator: EgId,
        /// Every participant.
        participants: Vec<EgId>,
    },
    /// The decision for `txn`.
    Decided {
        /// The cross-group transaction.
        txn: TxnId,
        /// Commit (true) or abort.
        commit: bool,
    },
}

/// The value of one log position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// The transaction that wrote it; `None` for a no-op.
    pub txn: Option<TxnId>,
    /// Fingerprint of the schema the writer used (0 when none).
    pub schema: u64,
    /// The position leader of the next position (docs/protocol.md); `None` forces the next
    /// writer onto two-phase Paxos.
    pub next_leader: Option<ReplicaId>,
    /// Row writes, all inside the entity group, never its root row: the transactions'
    /// in their serial order (`txn`'s, then each joined one's), applied in that order,
    /// so a later transaction's write of a cell replaces an earlier one's.
    pub writes: Vec<RowWrite>,
    /// The transactions combined into this entry after `txn`, in serial order; empty
    /// for an entry of one transaction. (This field takes the place of a list that was
    /// always empty, so entries stored before it decode as entries of one transaction.)
    pub joined: Vec<JoinedTxn>,
    /// Always empty: two-phase commit records are rows among `writes`
    /// ([`crate::two_phase`]).
    pub two_phase: Vec<TwoPhaseRecord>,
}

/// Why an entry cannot be accepted for a group.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// A write outside the entity group's key range.
    #[error("row {row} is outside the entity group")]
    RowOutsideGroup {
        /// The row, escaped.
        row: String,
    },
    /// A write to the group's root row, which only the protocol writes.
    #[error("entries may not write the group's root row")]
    RootRowWrite,
    /// A row of the group's global index mirror that names no global index row.
    #[error(
        "row {row} mirrors a global index entry, but the key it names does not start with the global index tag 0xFD"
    )]
    MirrorOutsideGlobalIndexes {
        /// The row, escaped.
        row: String,
    },
    /// A joined transaction listed twice or out of place.
    #[error("combined transactions: {0}")]
    BadJoin(String),
    /// Over a size limit ([`megastore_types::limits`]).
    #[error("{0}")]
    TooLarge(#[from] LimitError),
}

/// What a replica checks of a value it is asked to accept, and the client library of
/// a transaction's writes before it proposes them: inside `eg`, off its root row, and
/// within the size limits.
pub fn check_proposed_writes(eg: &EgId, writes: &[RowWrite]) -> Result<(), EntryError> {
    check_write_sizes(writes)?;
    check_writes_for(eg, writes)
}

/// Checks that every write stays inside `eg` and off its root row.
fn check_writes_for(eg: &EgId, writes: &[RowWrite]) -> Result<(), EntryError> {
    let range = group_range(eg);
    let root = root_row(eg);
    for write in writes {
        if write.row == root {
            return Err(EntryError::RootRowWrite);
        }
        if !range.contains(&write.row) {
            return Err(EntryError::RowOutsideGroup {
                row: write.row.escape_ascii().to_string(),
            });
        }
        if let Some(global) = mirrored_global_row(eg, &write.row)
            && global.first() != Some(&GLOBAL_INDEX_TAG)
        {
            return Err(EntryError::MirrorOutsideGlobalIndexes {
                row: write.row.escape_ascii().to_string(),
            });
        }
    }
    Ok(())
}

/// The bytes `writes` count against [`TRANSACTION_BYTES_MAX`]: row keys, columns and
/// values.
pub fn write_bytes(writes: &[RowWrite]) -> usize {
    writes
        .iter()
        .map(|w| {
            w.row.len()
                + w.cells
                    .iter()
                    .map(|c| match c {
                        CellWrite::Set { column, value } => column.len() + value.len(),
                        CellWrite::Delete { column } => column.len(),
                    })
                    .sum::<usize>()
        })
        .sum()
}

/// Checks the writes of one transaction against the size limits (the same check on
/// every path: the client library before it proposes, replicas before they accept).
pub fn check_write_sizes(writes: &[RowWrite]) -> Result<(), LimitError> {
    let mut total = 0usize;
    for write in writes {
        if write.row.len() > ROW_KEY_BYTES_MAX {
            return Err(LimitError::Key {
                found: write.row.len(),
            });
        }
        let mut row = write.row.len();
        for cell in &write.cells {
            let column = cell.column();
            if column.len() > COLUMN_BYTES_MAX {
                return Err(LimitError::Column {
                    found: column.len(),
                });
            }
            row += column.len();
            if let CellWrite::Set { value, .. } = cell {
                if value.len() > VALUE_BYTES_MAX {
                    return Err(LimitError::Value { found: value.len() });
                }
                row += value.len();
            }
        }
        if row > ROW_BYTES_MAX {
            return Err(LimitError::Row { found: row });
        }
        total += row;
    }
    if total > TRANSACTION_BYTES_MAX {
        return Err(LimitError::Transaction { found: total });
    }
    Ok(())
}

impl LogEntry {
    /// The no-op value: proposed when settling a position nobody accepted a value at.
    pub fn noop() -> Self {
        Self {
            txn: None,
            schema: 0,
            next_leader: None,
            writes: Vec::new(),
            joined: Vec::new(),
            two_phase: Vec::new(),
        }
    }

    /// Whether this is a no-op.
    pub fn is_noop(&self) -> bool {
        self.txn.is_none()
    }

    /// Whether `txn` is one of the transactions this entry commits.
    pub fn holds(&self, txn: TxnId) -> bool {
        self.txn == Some(txn) || self.joined.iter().any(|j| j.txn == txn)
    }

    /// The transactions this entry commits, in serial order, each with its writes.
    /// A no-op has none; an entry whose joined list names impossible places (which
    /// no proposer builds) gives each transaction the writes that lie in its range.
    pub fn transactions(&self) -> Vec<(TxnId, &[RowWrite])> {
        let Some(first) = self.txn else {
            return Vec::new();
        };
        let len = self.writes.len();
        let starts: Vec<(TxnId, usize)> = std::iter::once((first, 0))
            .chain(
                self.joined
                    .iter()
                    .map(|j| (j.txn, (j.first_write as usize).min(len))),
            )
            .collect();
        starts
            .iter()
            .enumerate()
            .map(|(i, &(txn, from))| {
                let to = starts.get(i + 1).map_or(len, |&(_, next)| next.max(from));
                (txn, &self.writes[from..to])
            })
            .collect()
    }

    /// An entry committing `transactions` (at least one) in this order.
    pub fn combining(
        transactions: impl IntoIterator<Item = (TxnId, Vec<RowWrite>)>,
        next_leader: Option<ReplicaId>,
    ) -> Self {
        let mut entry = Self {
            next_leader,
            ..Self::noop()
        };
        for (txn, writes) in transactions {
            if entry.txn.is_none() {
                entry.txn = Some(txn);
            } else {
                entry.joined.push(JoinedTxn {
                    txn,
                    first_write: u32::try_from(entry.writes.len())
                        .expect("an entry's writes are bounded by the transaction size limit"),
                });
            }
            entry.writes.extend(writes);
        }
        assert!(
            entry.txn.is_some(),
            "an entry combines at least one transaction"
        );
        entry
    }

    /// [`LogEntry::check_for`], and the size limits: for a value asked to be accepted
    /// (a value already chosen is only checked for its group, so limits can change).
    pub fn check_proposed_for(&self, eg: &EgId) -> Result<(), EntryError> {
        self.check_joined()?;
        check_proposed_writes(eg, &self.writes)
    }

    /// Checks that the joined transactions are distinct, follow a first one, and
    /// begin their writes in order within `writes`.
    fn check_joined(&self) -> Result<(), EntryError> {
        if self.joined.is_empty() {
            return Ok(());
        }
        let Some(first) = self.txn else {
            return Err(EntryError::BadJoin("a no-op joins no transaction".into()));
        };
        let mut seen = BTreeSet::from([first]);
        let mut from = 0u32;
        for joined in &self.joined {
            if !seen.insert(joined.txn) {
                return Err(EntryError::BadJoin(format!(
                    "transaction {} appears twice",
                    joined.txn
                )));
            }
            if joined.first_write < from || joined.first_write as usize > self.writes.len() {
                return Err(EntryError::BadJoin(format!(
                    "transaction {} begins at write {}, outside {from}..={}",
                    joined.txn,
                    joined.first_write,
                    self.writes.len()
                )));
            }
            from = joined.first_write;
        }
        Ok(())
    }

    /// Checks that every write stays inside `eg` and off its root row.
    pub fn check_for(&self, eg: &EgId) -> Result<(), EntryError> {
        check_writes_for(eg, &self.writes)
    }

    /// The row keys this entry writes.
    pub fn written_rows(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.writes.iter().map(|w| w.row.as_slice())
    }
}

/// Every row of an entity group: its key prefix.
pub fn group_range(eg: &EgId) -> KeyRange {
    KeyRange::prefix(eg.0.clone())
}

/// The group's root row: the prefix followed by object id 0, which no table or index
/// uses — the first row of the group's range. It holds the log and the replication
/// state; entries never write it.
pub fn root_row(eg: &EgId) -> Vec<u8> {
    let mut row = eg.0.clone();
    row.push(0);
    row
}

/// The key prefix (the `EgId` bytes) of the group whose root row is `row`, if `row` is
/// a root row: the inverse of [`root_row`], without copying.
pub fn group_of_root_row(row: &[u8]) -> Option<&[u8]> {
    match row.split_last() {
        Some((0, eg)) if !eg.is_empty() => Some(eg),
        _ => None,
    }
}

/// The rows of `eg`'s global index mirror: `G ‖ GLOBAL_MIRROR_OBJECT ‖ global row key`.
pub fn global_mirror_range(eg: &EgId) -> KeyRange {
    let mut prefix = eg.0.clone();
    prefix.extend_from_slice(&GLOBAL_MIRROR_OBJECT);
    KeyRange::prefix(prefix)
}

/// The row of `eg`'s mirror that holds global index row `global` (which must start
/// with the global index tag for an entry to be accepted).
pub fn mirror_row_of(eg: &EgId, global: &[u8]) -> Vec<u8> {
    let mut row = eg.0.clone();
    row.extend_from_slice(&GLOBAL_MIRROR_OBJECT);
    row.extend_from_slice(global);
    row
}

/// The global index row a row of `eg`'s mirror names, if `row` is one.
pub fn mirrored_global_row<'r>(eg: &EgId, row: &'r [u8]) -> Option<&'r [u8]> {
    row.strip_prefix(eg.0.as_slice())?
        .strip_prefix(GLOBAL_MIRROR_OBJECT.as_slice())
}

/// Every global index entry's row.
pub fn global_index_range() -> KeyRange {
    KeyRange::prefix(vec![GLOBAL_INDEX_TAG])
}

/// The group's data rows: everything in its range after the root row.
pub fn data_range(eg: &EgId) -> KeyRange {
    let mut start = root_row(eg);
    start.push(0);
    KeyRange {
        start,
        end: group_range(eg).end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_row_names_its_group() {
        let eg = EgId(b"user-1".to_vec());
        assert_eq!(group_of_root_row(&root_row(&eg)), Some(&eg.0[..]));
        assert_eq!(group_of_root_row(b"user-1"), None);
        assert_eq!(group_of_root_row(b"\x00"), None);
    }
}
