//! Which entity groups this replica holds: one row per group under a system prefix no
//! group uses, written with the group's first persisted state. A restarted replica
//! loads every registered group, so its sweep catches up (and truncates) groups that
//! nothing asks about — not only those a client happens to touch.

use std::collections::BTreeSet;

use megastore_rowstore::{KeyRange, LATEST, RowMutation, RowRead, RowStoreError, ScanOptions};
use megastore_types::EgId;

/// Rows `0xFF 0xFF ‖ "megastore/groups/" ‖ eg`: no schema prefix starts with 0xFF, and
/// the public API refuses groups that do.
const PREFIX: &[u8] = b"\xff\xffmegastore/groups/";
const COLUMN: &[u8] = b"g";

/// The first byte no entity group may start with.
pub(crate) const SYSTEM_BYTE: u8 = 0xFF;

fn row(eg: &EgId) -> Vec<u8> {
    let mut row = PREFIX.to_vec();
    row.extend_from_slice(&eg.0);
    row
}

/// The group whose root row is `root_row` (`eg ‖ 0x00`).
pub(crate) fn group_of_root_row(root_row: &[u8]) -> Option<EgId> {
    match root_row.split_last() {
        Some((0, eg)) if !eg.is_empty() => Some(EgId(eg.to_vec())),
        _ => None,
    }
}

/// The mutation that registers `eg`.
pub(crate) fn register(eg: &EgId) -> RowMutation {
    RowMutation::new(row(eg)).set(COLUMN.to_vec(), 0, Vec::new())
}

/// Every registered group.
pub(crate) fn load<S: RowRead>(store: &S) -> Result<BTreeSet<EgId>, RowStoreError> {
    let rows = store.scan(
        &KeyRange::prefix(PREFIX.to_vec()),
        LATEST,
        &ScanOptions::default(),
    )?;
    Ok(rows
        .into_iter()
        .map(|r| EgId(r.key[PREFIX.len()..].to_vec()))
        .collect())
}

#[cfg(test)]
mod tests {
    use megastore_rowstore::{Durability, MemoryStore, RowStore};

    use super::*;

    #[test]
    fn registered_groups_are_found_again() {
        let store = MemoryStore::new();
        for eg in [b"a".to_vec(), b"b\x00c".to_vec()] {
            store
                .mutate_row(&register(&EgId(eg)), None, Durability::Synced)
                .unwrap();
        }
        let found = load(&store).unwrap();
        assert_eq!(
            found,
            [EgId(b"a".to_vec()), EgId(b"b\x00c".to_vec())].into()
        );
        assert_eq!(
            group_of_root_row(b"user-1\x00"),
            Some(EgId(b"user-1".to_vec()))
        );
        assert_eq!(group_of_root_row(b"user-1"), None);
        assert_eq!(group_of_root_row(b"\x00"), None);
    }
}
