//! The store's row layout marker, and whether the store keeps the open index. The
//! registry of the groups a replica holds (one row per group under
//! [`SYSTEM_GROUPS_PREFIX`], written by the replica core with the group's first
//! persisted state) and the open index of the groups with work left are the core's
//! (`megastore_paxos::GroupList`).

use megastore_rowstore::{Durability, KeyRange, LATEST, RowMutation, RowStore, RowStoreError};

// The layout marker's row, in the system's part of the key space, where no group's
// prefix starts, beside the registry's rows.
use megastore_schema::keyspace::{SYSTEM_GROUPS_PREFIX, SYSTEM_LAYOUT_ROW as LAYOUT_ROW};

// The core writes the registry where the key space reserves it.
const _: () = {
    let (a, b) = (megastore_paxos::REGISTRY_PREFIX, SYSTEM_GROUPS_PREFIX);
    assert!(a.len() == b.len());
    let mut i = 0;
    while i < a.len() {
        assert!(a[i] == b[i]);
        i += 1;
    }
};
const LAYOUT_COLUMN: &[u8] = b"v";
/// Set once every group with work left is in the open index: on a new store at once,
/// on one written by a version without the index after loading every group once.
const OPEN_INDEX_COLUMN: &[u8] = b"open";
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
        None if megastore_paxos::list_groups(store, None, 1)?.is_empty() => {
            let mark = RowMutation::new(LAYOUT_ROW.to_vec())
                .set(LAYOUT_COLUMN.to_vec(), 0, ROW_LAYOUT.to_be_bytes().to_vec())
                .set(OPEN_INDEX_COLUMN.to_vec(), 0, Vec::new());
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

/// Whether every group of `store` with work left is in the open index (else it
/// holds groups written by a version without one).
pub(crate) fn open_index_kept<S: RowStore>(store: &S) -> Result<bool, RowStoreError> {
    let marker = store.read_row(LAYOUT_ROW, &KeyRange::all(), LATEST)?;
    Ok(marker.is_some_and(|r| r.value(OPEN_INDEX_COLUMN).is_some()))
}

/// Records that every group with work left is in the open index, synced (and with it
/// every listing written before).
pub(crate) fn mark_open_index_kept<S: RowStore>(store: &S) -> Result<(), RowStoreError> {
    let mark = RowMutation::new(LAYOUT_ROW.to_vec()).set(OPEN_INDEX_COLUMN.to_vec(), 0, Vec::new());
    store
        .mutate_row(&mark, None, Durability::Synced)
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use megastore_rowstore::{Durability, MemoryStore, RowStore};

    use super::*;

    fn register(eg: &[u8]) -> RowMutation {
        megastore_paxos::register_group(&megastore_types::EgId(eg.to_vec()))
    }

    #[test]
    fn a_new_store_is_marked_and_an_old_layout_is_refused() {
        let new = MemoryStore::new();
        check_layout(&new).unwrap();
        check_layout(&new).unwrap();
        assert!(
            open_index_kept(&new).unwrap(),
            "a new store keeps it from the start"
        );
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

    #[test]
    fn a_store_from_before_the_open_index_is_marked_once_it_is_built() {
        let store = MemoryStore::new();
        let layout_only = RowMutation::new(LAYOUT_ROW.to_vec()).set(
            LAYOUT_COLUMN.to_vec(),
            0,
            ROW_LAYOUT.to_be_bytes().to_vec(),
        );
        store
            .mutate_row(&layout_only, None, Durability::Synced)
            .unwrap();
        store
            .mutate_row(&register(b"\xfeg\x00\x01"), None, Durability::Synced)
            .unwrap();
        check_layout(&store).unwrap();
        assert!(!open_index_kept(&store).unwrap());
        mark_open_index_kept(&store).unwrap();
        assert!(open_index_kept(&store).unwrap());
        check_layout(&store).unwrap();
    }
}
