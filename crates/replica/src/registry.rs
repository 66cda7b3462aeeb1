//! Which entity groups this replica holds: one row per group under a system prefix no
//! group uses, written with the group's first persisted state. A restarted replica
//! loads every registered group, so its sweep catches up (and truncates) groups that
//! nothing asks about — not only those a client happens to touch.

use std::collections::BTreeSet;

use megastore_rowstore::{
    Durability, KeyRange, LATEST, RowMutation, RowRead, RowStore, RowStoreError, ScanOptions,
};

// Rows `0xFF 0xFF ‖ "megastore/groups/" ‖ eg` (PREFIX) and the layout marker's row, in
// the system's part of the key space, where no group's prefix starts.
use megastore_schema::keyspace::{SYSTEM_GROUPS_PREFIX as PREFIX, SYSTEM_LAYOUT_ROW as LAYOUT_ROW};

const COLUMN: &[u8] = b"g";
const LAYOUT_COLUMN: &[u8] = b"v";
/// The row layout of this version: every group id self-delimiting
/// ([`megastore_schema::keyspace`]). Layout 1, which has no marker, named untyped groups
/// by their raw bytes, so one group's range could hold another's rows.
pub(crate) const ROW_LAYOUT: u64 = 2;

/// Why a store cannot be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LayoutError {
    /// Written by an older version, in a row layout this one cannot read.
    #[error(
        "its rows are in row layout {found}, this megastore reads layout {ROW_LAYOUT} only \
         (layout 1 named entity groups by their raw bytes, so one group's rows could lie \
         inside another's); start this replica on an empty data directory, and it rejoins \
         and copies every group from the other replicas — a cluster whose replicas all \
         hold layout-1 data cannot be upgraded in place"
    )]
    Old {
        /// The layout found.
        found: u64,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] RowStoreError),
}

/// Checks that `store` holds rows of this version's layout, marking a store that holds
/// no group yet as this layout.
pub(crate) fn check_layout<S: RowStore>(store: &S) -> Result<(), LayoutError> {
    let marker = store.read_row(LAYOUT_ROW, &KeyRange::all(), LATEST)?;
    let found = match marker.as_ref().and_then(|r| r.value(LAYOUT_COLUMN)) {
        Some(bytes) => bytes
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| LayoutError::Old { found: 0 })?,
        None if load(store)?.is_empty() => {
            let mark = RowMutation::new(LAYOUT_ROW.to_vec()).set(
                LAYOUT_COLUMN.to_vec(),
                0,
                ROW_LAYOUT.to_be_bytes().to_vec(),
            );
            store.mutate_row(&mark, None, Durability::Synced)?;
            ROW_LAYOUT
        }
        None => 1,
    };
    if found == ROW_LAYOUT {
        Ok(())
    } else {
        Err(LayoutError::Old { found })
    }
}

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

    #[test]
    fn a_new_store_is_marked_and_an_old_layout_is_refused() {
        let new = MemoryStore::new();
        check_layout(&new).unwrap();
        check_layout(&new).unwrap();
        new.mutate_row(&register(b"\xfeg\x00\x01"), None, Durability::Synced)
            .unwrap();
        check_layout(&new).unwrap();

        // Groups registered, no marker: written by a version of layout 1.
        let old = MemoryStore::new();
        old.mutate_row(&register(b"eg-0001"), None, Durability::Synced)
            .unwrap();
        let refused = check_layout(&old).unwrap_err().to_string();
        assert!(refused.contains("row layout 1"), "{refused}");
        assert!(refused.contains("empty data directory"), "{refused}");
    }
}
