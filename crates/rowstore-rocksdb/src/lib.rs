//! The RocksDB [`RowStore`](megastore_rowstore::RowStore): the only crate that links
//! RocksDB.
//!
//! Responsibility: keep the row store's contract (see `megastore_rowstore::RowStore`)
//! on a RocksDB directory — durable synced writes, single-row atomic check-and-mutate,
//! atomic batches, snapshots, garbage collection — and report a locked or corrupt
//! directory clearly.
//!
//! Not here: what rows mean, replication, or async: callers run it on a blocking pool.
//!
//! Invariants:
//! - *durable-when-synced*: a [`Durability::Synced`](megastore_rowstore::Durability)
//!   write returns only after RocksDB synced its write-ahead log; RocksDB's write group
//!   lets concurrent synced writers share one sync;
//! - *row atomicity*: each row mutation and each batch is one RocksDB `WriteBatch`;
//!   writes take striped row locks so a check-and-mutate's read and write are atomic
//!   with respect to every other write of the row;
//! - the on-disk layout (`escape(row) ‖ escape(column) ‖ !timestamp`, see `layout.rs`)
//!   is checked on every read: a key or value of another shape is reported as
//!   corruption, never guessed at.

mod errors;
mod layout;
mod locks;
mod read;
mod store;

pub use store::{RocksOptions, RocksSnapshot, RocksStore};
