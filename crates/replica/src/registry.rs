//! Which entity groups this replica holds: one row per group under a system prefix no
//! group uses, written with the group's first persisted state. A restarted replica
//! loads every registered group, so its sweep catches up (and truncates) groups that
//! nothing asks about — not only those a client happens to touch.

use std::collections::BTreeSet;

use megastore_rowstore::{KeyRange, LATEST, RowMutation, RowRead, RowStoreError, ScanOptions};

/// Rows `0xFF 0xFF ‖ "megastore/groups/" ‖ eg`: no schema prefix starts with 0xFF, and
/// the public API refuses groups that do.
const PREFIX: &[u8] = b"\xff\xffmegastore/groups/";
const COLUMN: &[u8] = b"g";

/// The first byte no entity group may start with.
pub(crate) const SYSTEM_BYTE: u8 = 0xFF;

fn row(eg: &[u8]) -> Vec<u8> {
    let mut row = PREFIX.to_vec();
    row.extend_from_slice(eg);
    row
}

/// The mutation that registers the group with key prefix `eg`.
pub(crate) fn register(eg: &[u8]) -> RowMutation {
    RowMutation::new(row(eg)).set(COLUMN.to_vec(), 0, Vec::new())
}

/// Every registered group's key prefix.
pub(crate) fn load<S: RowRead>(store: &S) -> Result<BTreeSet<Vec<u8>>, RowStoreError> {
    let rows = store.scan(
        &KeyRange::prefix(PREFIX.to_vec()),
        LATEST,
        &ScanOptions::default(),
    )?;
    Ok(rows
        .into_iter()
        .map(|r| r.key[PREFIX.len()..].to_vec())
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
                .mutate_row(&register(&eg), None, Durability::Synced)
                .unwrap();
        }
        let found = load(&store).unwrap();
        assert_eq!(found, [b"a".to_vec(), b"b\x00c".to_vec()].into());
    }
}
