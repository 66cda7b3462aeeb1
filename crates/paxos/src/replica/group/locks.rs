//! What a replica knows of the prepared records its group holds (docs/protocol.md,
//! "Two-phase commit"): every read at a position returns the locks prepared there, and
//! a group with none to return — almost every group, almost always — is answered
//! without looking for them (*locks-known*).

use std::collections::BTreeSet;

use megastore_rowstore::{KeyRange, Mutation, RowMutation};
use megastore_types::{EgId, Position};

use crate::two_phase::{locks_column, records_range};

/// The prepared records of one group at one replica, kept from every data write the
/// replica makes there (applies and installs, both [`super::GroupLog`]'s) on top of
/// what its store held when the group was loaded. Invariant *locks-known*: a read at
/// position `p` (at most `applied`) that [`PreparedRecords::may_hold_at`] says holds no
/// lock finds no record row with a live locks column at `p`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreparedRecords {
    /// The record rows whose locks column is live at the applied position.
    live: BTreeSet<Vec<u8>>,
    /// While `live` is empty: no record lives at any position from this one through
    /// the applied position.
    none_from: Position,
    /// The `finish-frees-every-lock` knob: a finished record takes every other with it.
    #[cfg(feature = "sim-bugs")]
    finish_frees_all: bool,
}

impl PreparedRecords {
    /// The records `live` at the group's `applied` position as its store holds them
    /// when it is loaded (the rows of [`records_range`] with a live locks column);
    /// `finish_frees_all` is the `finish-frees-every-lock` knob.
    pub(crate) fn loaded(live: Vec<Vec<u8>>, applied: Position, finish_frees_all: bool) -> Self {
        #[cfg(not(feature = "sim-bugs"))]
        let _ = finish_frees_all;
        Self {
            live: live.into_iter().collect(),
            none_from: applied,
            #[cfg(feature = "sim-bugs")]
            finish_frees_all,
        }
    }

    /// The `finish-frees-every-lock` knob.
    fn finish_frees_all(&self) -> bool {
        #[cfg(feature = "sim-bugs")]
        return self.finish_frees_all;
        #[cfg(not(feature = "sim-bugs"))]
        false
    }

    /// Whether a read at `p` (at most the applied position) may find prepared records.
    pub(crate) fn may_hold_at(&self, p: Position) -> bool {
        !self.live.is_empty() || p < self.none_from
    }

    /// Notes the data writes of `eg` made at position `at` (above every position noted
    /// before): a set locks column is a record prepared, a deleted one a record
    /// finished. A change it cannot follow (one version of the column removed, which
    /// may bring an older one back) counts the record as live, so a read looks.
    pub(crate) fn note(&mut self, eg: &EgId, at: Position, rows: &[RowMutation]) {
        let range = records_range(eg);
        let locks = locks_column();
        let mut touched = false;
        for row in rows.iter().filter(|m| range.contains(&m.row)) {
            for mutation in &row.mutations {
                let live = match mutation {
                    Mutation::Set { column, .. } if locks.contains(column) => true,
                    Mutation::DeleteCell { column, .. } if locks.contains(column) => true,
                    Mutation::DeleteColumn { column, .. } if locks.contains(column) => false,
                    Mutation::DeleteColumns { columns } if overlaps(columns, &locks) => false,
                    _ => continue,
                };
                touched = true;
                if live {
                    self.live.insert(row.row.clone());
                } else if self.finish_frees_all() {
                    self.live.clear();
                } else {
                    self.live.remove(&row.row);
                }
            }
        }
        if touched && self.live.is_empty() {
            self.none_from = at;
        }
    }
}

/// Whether column range `a` shares a column with `b`.
fn overlaps(a: &KeyRange, b: &KeyRange) -> bool {
    let starts_before_b_ends = b.end.as_ref().is_none_or(|end| a.start < *end);
    let ends_after_b_starts = a.end.as_ref().is_none_or(|end| b.start < *end);
    starts_before_b_ends && ends_after_b_starts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::two_phase::record_row;
    use megastore_types::{ClientId, TxnId};

    fn eg() -> EgId {
        EgId(b"user:1".to_vec())
    }

    fn record(seq: u64) -> Vec<u8> {
        record_row(
            &eg(),
            TxnId {
                client: ClientId(7),
                seq,
            },
        )
    }

    fn set_locks(row: Vec<u8>, at: u64) -> RowMutation {
        RowMutation {
            row,
            mutations: vec![Mutation::Set {
                column: b"locks".to_vec(),
                timestamp: at,
                value: b"x".to_vec(),
            }],
        }
    }

    fn delete_locks(row: Vec<u8>, at: u64) -> RowMutation {
        RowMutation {
            row,
            mutations: vec![Mutation::DeleteColumn {
                column: b"locks".to_vec(),
                timestamp: at,
            }],
        }
    }

    #[test]
    fn a_group_loaded_without_records_holds_none_from_its_applied_position() {
        let records = PreparedRecords::loaded(Vec::new(), Position(10), false);
        assert!(records.may_hold_at(Position(9)), "older history is unknown");
        assert!(!records.may_hold_at(Position(10)));
    }

    #[test]
    fn a_record_holds_from_its_prepare_until_the_last_one_is_finished() {
        let mut records = PreparedRecords::loaded(Vec::new(), Position(1), false);
        records.note(&eg(), Position(2), &[set_locks(record(1), 2)]);
        records.note(&eg(), Position(3), &[set_locks(record(2), 3)]);
        records.note(&eg(), Position(4), &[delete_locks(record(1), 4)]);
        assert!(
            records.may_hold_at(Position(4)),
            "record 2 is still pending"
        );
        records.note(&eg(), Position(5), &[delete_locks(record(2), 5)]);
        assert!(records.may_hold_at(Position(4)));
        assert!(!records.may_hold_at(Position(5)));
    }

    #[test]
    fn writes_outside_the_records_or_their_locks_column_change_nothing() {
        let mut records = PreparedRecords::loaded(Vec::new(), Position(1), false);
        let mut other_column = set_locks(record(1), 2);
        other_column.mutations = vec![Mutation::Set {
            column: b"c".to_vec(),
            timestamp: 2,
            value: Vec::new(),
        }];
        records.note(
            &eg(),
            Position(2),
            &[set_locks(b"user:1\x00photo".to_vec(), 2), other_column],
        );
        assert!(!records.may_hold_at(Position(1)));
    }

    #[test]
    fn an_install_that_drops_a_record_frees_the_group_from_its_position() {
        let mut records = PreparedRecords::loaded(vec![record(1)], Position(1), false);
        let mut install = delete_locks(record(1), 9);
        install.mutations.push(Mutation::DeleteColumns {
            columns: KeyRange::all(),
        });
        records.note(&eg(), Position(9), &[install]);
        assert!(!records.may_hold_at(Position(9)));
        assert!(records.may_hold_at(Position(8)));
    }

    #[test]
    fn a_removed_version_counts_the_record_as_live() {
        let mut records = PreparedRecords::loaded(Vec::new(), Position(1), false);
        let mut removal = set_locks(record(1), 2);
        removal.mutations = vec![Mutation::DeleteCell {
            column: b"locks".to_vec(),
            timestamp: 2,
        }];
        records.note(&eg(), Position(2), &[removal]);
        assert!(records.may_hold_at(Position(2)));
    }

    #[cfg(feature = "sim-bugs")]
    #[test]
    fn the_knob_frees_every_record_with_the_first_finished() {
        let mut records = PreparedRecords::loaded(vec![record(1), record(2)], Position(1), true);
        records.note(&eg(), Position(2), &[delete_locks(record(1), 2)]);
        assert!(!records.may_hold_at(Position(2)));
    }
}
