//! The row store: Bigtable's data model behind one synchronous trait.
//!
//! Responsibility: rows (ordered byte keys) of columns of cells versioned by a `u64`
//! timestamp — the log position — with reads at a timestamp, ordered scans, single-row
//! atomic check-and-mutate, atomic multi-row batches inside one key range, snapshots
//! garbage collection of old versions, and exact copies of a span of rows between
//! stores ([`copy_span`], [`clear_span`]: every version and tombstone, for moving a
//! range of groups between servers; a page at a time between processes with
//! [`export_page`] and [`import_page`]). [`RowStore`] is the trait,
//! [`MemoryStore`] the in-memory implementation (with an explicit synced/unsynced
//! durability model for the simulator), and [`conformance`] the suite every
//! implementation passes. The RocksDB implementation lives in
//! `megastore-rowstore-rocksdb`, the only crate that links RocksDB.
//!
//! Not here: what rows and columns mean (the schema crate maps entities to rows; the
//! protocol crates own the root row's log cells), and any notion of time or network.
//!
//! Invariants every store keeps (see [`RowStore`] for the full contract):
//! - *row atomicity*: a [`RowMutation`] is seen whole or not at all;
//! - *read-at-timestamp*: a read at `t` sees, per column, the newest version `<= t`,
//!   unless that version is a deletion;
//! - *durable-when-synced*: a write that returned with [`Durability::Synced`], and every
//!   write before it, survives a crash;
//! - *stable snapshots*: a snapshot never sees a write made after it was taken.
//!
//! ```
//! use megastore_rowstore::{Durability, KeyRange, MemoryStore, RowMutation, RowRead, RowStore};
//!
//! let store = MemoryStore::new();
//! let put = RowMutation::new(b"user/101".to_vec()).set(b"User.name".to_vec(), 7, b"John".to_vec());
//! store.mutate_row(&put, None, Durability::Synced)?;
//! assert_eq!(store.read_cell(b"user/101", b"User.name", 7)?.unwrap().value, b"John");
//! assert!(store.read_cell(b"user/101", b"User.name", 6)?.is_none(), "not yet written at 6");
//! # let _ = KeyRange::all();
//! # Ok::<(), megastore_rowstore::RowStoreError>(())
//! ```

pub mod conformance;
mod copy;
mod error;
mod memory;
pub mod ordered;
mod store;
mod types;
pub mod versions;

pub use copy::{
    CopyStats, ExportedPage, PAGE_BYTES_TARGET, clear_span, copy_span, export_page, import_page,
};
pub use error::{RowStoreError, display_key};
pub use memory::{MemorySnapshot, MemoryStore};
pub use ordered::{KeyRange, prefix_successor};
pub use store::{RowRead, RowStore, check_rows_in_range};
pub use types::{
    Cell, Condition, Durability, GcStats, LATEST, MutateOutcome, Mutation, Row, RowMutation,
    ScanOptions, StoredRow, StoredVersion, Timestamp,
};

#[cfg(test)]
mod conformance_tests {
    use super::MemoryStore;
    use super::conformance::Harness;

    /// The in-memory store; a restart is a simulated crash.
    struct MemoryHarness(MemoryStore);

    impl Harness for MemoryHarness {
        type Store = MemoryStore;

        fn store(&self) -> &MemoryStore {
            &self.0
        }

        fn restart(&mut self) {
            self.0.crash();
        }
    }

    crate::rowstore_conformance_tests!(MemoryHarness(MemoryStore::new()));
}
