//! Reading a group's committed log in order, for watchers: which replica answers show
//! a committed entry, and what a committed entry changed in a range of rows.
//!
//! A replica marks a slot visible only once its value is chosen and the invalidation
//! step is done (docs/protocol.md), so a visible slot read from any one replica is the
//! group's committed entry at that position, the same everywhere. A slot that is not
//! visible there (not yet, or never reached that replica) says nothing about the
//! position; a position truncated there has lost its entry at that replica, though
//! another replica may still keep it.
//!
//! Not here: which replicas to ask, waiting for new positions, resuming (the client
//! library's `watch`).
//!
//! Invariant (*watch-reads-committed*): [`log_read`] yields an entry only from a
//! visible slot.

use megastore_rowstore::KeyRange;
use megastore_types::{EgId, Position, TxnId};

use crate::entry::{LogEntry, RowWrite};
use crate::messages::{ReplicaError, ReplicaReply};

/// What one replica's answer to a `ReadLog` says about the position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRead {
    /// The entry committed at the position.
    Committed(LogEntry),
    /// Nothing this replica can vouch for: no slot, a slot not visible yet, or it is
    /// rejoining.
    NotHere,
    /// The replica truncated its log through `truncated`, at or above the position.
    Truncated {
        /// Its truncation point.
        truncated: Position,
    },
    /// The replica could not be asked, or refused for another reason.
    Failed(String),
}

/// Classifies a replica's answer to `ReadLog` (`None`: no answer).
pub fn log_read(answer: Option<ReplicaReply>) -> LogRead {
    match answer {
        Some(ReplicaReply::Log { slot: Some(s), .. }) if s.visible => LogRead::Committed(s.entry),
        Some(ReplicaReply::Log { .. })
        | Some(ReplicaReply::Error {
            error: ReplicaError::Rejoining,
            ..
        }) => LogRead::NotHere,
        Some(ReplicaReply::Error {
            error: ReplicaError::Truncated { truncated, .. },
            ..
        }) => LogRead::Truncated { truncated },
        Some(ReplicaReply::Error { error, .. }) => LogRead::Failed(error.to_string()),
        Some(other) => LogRead::Failed(format!("unexpected answer {other:?}")),
        None => LogRead::Failed("no answer".into()),
    }
}

impl LogRead {
    /// What two replicas' answers about one position say together: a committed entry
    /// settles it; else a truncation (the higher point) says more than a replica
    /// without the slot; else the later answer.
    pub fn or(self, other: LogRead) -> LogRead {
        match (self, other) {
            (committed @ LogRead::Committed(_), _) | (_, committed @ LogRead::Committed(_)) => {
                committed
            }
            (LogRead::Truncated { truncated: a }, LogRead::Truncated { truncated: b }) => {
                LogRead::Truncated {
                    truncated: a.max(b),
                }
            }
            (truncated @ LogRead::Truncated { .. }, _)
            | (_, truncated @ LogRead::Truncated { .. }) => truncated,
            (_, later) => later,
        }
    }
}

/// One transaction's writes, of a committed entry, that fall in a watched range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The transaction.
    pub txn: TxnId,
    /// Its writes in the range, in order, as the replicas apply them.
    pub writes: Vec<RowWrite>,
}

/// What the entry committed at `position` of `eg` changed in `rows`: one [`Change`] per
/// transaction with a write there, in the entry's serial order (none for a no-op).
pub fn changes_in(eg: &EgId, entry: &LogEntry, position: Position, rows: &KeyRange) -> Vec<Change> {
    entry
        .transactions()
        .into_iter()
        .enumerate()
        .filter_map(|(ordinal, (txn, writes))| {
            let ordinal = u32::try_from(ordinal).expect("an entry combines few transactions");
            let writes: Vec<RowWrite> = writes
                .iter()
                .filter(|w| rows.contains(&w.row))
                .map(|w| crate::queue::stamped(eg, w, position, ordinal).into_owned())
                .collect();
            (!writes.is_empty()).then_some(Change { txn, writes })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::SlotRecord;
    use crate::entry::CellWrite;
    use megastore_types::{Ballot, ClientId};

    fn txn(seq: u64) -> TxnId {
        TxnId {
            client: ClientId(1),
            seq,
        }
    }

    fn write(row: &[u8]) -> RowWrite {
        RowWrite {
            row: row.to_vec(),
            cells: vec![CellWrite::Set {
                column: b"c".to_vec(),
                value: b"v".to_vec(),
            }],
        }
    }

    fn entry() -> LogEntry {
        LogEntry::combining(
            [
                (txn(1), vec![write(b"eg/a"), write(b"eg/x")]),
                (txn(2), vec![write(b"eg/y")]),
                (txn(3), vec![write(b"eg/b")]),
            ],
            None,
        )
    }

    fn slot(visible: bool) -> ReplicaReply {
        ReplicaReply::Log {
            id: 1,
            slot: Some(SlotRecord {
                ballot: Ballot::ZERO,
                entry: entry(),
                visible,
            }),
        }
    }

    #[test]
    fn only_a_visible_slot_is_committed() {
        assert_eq!(log_read(Some(slot(true))), LogRead::Committed(entry()));
        assert_eq!(log_read(Some(slot(false))), LogRead::NotHere);
        assert_eq!(
            log_read(Some(ReplicaReply::Log { id: 1, slot: None })),
            LogRead::NotHere
        );
        let truncated = ReplicaReply::Error {
            id: 1,
            error: ReplicaError::Truncated {
                truncated: Position(9),
                chosen: None,
            },
        };
        assert_eq!(
            log_read(Some(truncated)),
            LogRead::Truncated {
                truncated: Position(9)
            }
        );
        assert!(matches!(log_read(None), LogRead::Failed(_)));
    }

    #[test]
    fn answers_combine_committed_first_then_the_highest_truncation() {
        let truncated = |p| LogRead::Truncated {
            truncated: Position(p),
        };
        let committed = LogRead::Committed(entry());
        assert_eq!(truncated(3).or(committed.clone()), committed);
        assert_eq!(truncated(3).or(truncated(5)), truncated(5));
        assert_eq!(truncated(5).or(LogRead::NotHere), truncated(5));
        assert_eq!(
            LogRead::NotHere.or(LogRead::Failed("gone".into())),
            LogRead::Failed("gone".into())
        );
    }

    #[test]
    fn changes_keep_each_transaction_and_only_the_range() {
        let eg = EgId(b"eg".to_vec());
        let range = KeyRange {
            start: b"eg/a".to_vec(),
            end: Some(b"eg/c".to_vec()),
        };
        let changes = changes_in(&eg, &entry(), Position(4), &range);
        assert_eq!(
            changes,
            vec![
                Change {
                    txn: txn(1),
                    writes: vec![write(b"eg/a")]
                },
                Change {
                    txn: txn(3),
                    writes: vec![write(b"eg/b")]
                },
            ]
        );
        let noop = LogEntry {
            txn: None,
            ..entry()
        };
        assert!(changes_in(&eg, &noop, Position(4), &KeyRange::all()).is_empty());
    }
}
