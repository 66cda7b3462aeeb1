//! lockd's durable state on the row store: the Raft vote, log and commit index, and the
//! last snapshot of the lock state. Every write is synced before openraft is told it
//! is done, so a restarted node never forgets a vote or an acknowledged entry.
//!
//! Rows (one column `v`, timestamp 0): `raft/vote`, `raft/committed`, `raft/purged`,
//! `raft/log/<index, 8 bytes big-endian>`, `raft/snapshot`.

// openraft's storage traits fix the error type; it is large, and errors are rare.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use megastore_rowstore::{
    Durability, KeyRange, LATEST, RowMutation, RowRead, RowStore, RowStoreError, ScanOptions,
};
use megastore_rowstore_rocksdb::RocksStore;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader,
    StorageError, StorageIOError, Vote,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use crate::types::{RaftNodeId, TypeConfig};

const COLUMN: &[u8] = b"v";
const VOTE: &[u8] = b"raft/vote";
const COMMITTED: &[u8] = b"raft/committed";
const PURGED: &[u8] = b"raft/purged";
const LOG_PREFIX: &[u8] = b"raft/log/";
pub(crate) const SNAPSHOT: &[u8] = b"raft/snapshot";

type StorageResult<T> = Result<T, StorageError<RaftNodeId>>;

fn log_key(index: u64) -> Vec<u8> {
    let mut key = LOG_PREFIX.to_vec();
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The log from `start` on.
fn log_range_from(start: u64) -> KeyRange {
    let all = KeyRange::prefix(LOG_PREFIX.to_vec());
    KeyRange {
        start: log_key(start),
        ..all
    }
}

fn io_error(
    subject: ErrorSubject<RaftNodeId>,
    verb: ErrorVerb,
    e: impl ToString,
) -> StorageError<RaftNodeId> {
    StorageError::IO {
        source: StorageIOError::new(subject, verb, AnyError::error(e.to_string())),
    }
}

/// The node's store, shared by the log, the state machine and whatever openraft task
/// still holds them; it reports when it has really closed (RocksDB released its lock
/// file), so a node can be restarted on the same directory in one process.
pub(crate) struct OpenStore {
    store: Option<RocksStore>,
    closed: Option<oneshot::Sender<()>>,
}

impl OpenStore {
    pub(crate) fn new(store: RocksStore) -> (Self, oneshot::Receiver<()>) {
        let (closed, on_close) = oneshot::channel();
        let open = Self {
            store: Some(store),
            closed: Some(closed),
        };
        (open, on_close)
    }
}

impl std::ops::Deref for OpenStore {
    type Target = RocksStore;

    fn deref(&self) -> &RocksStore {
        self.store
            .as_ref()
            .expect("the store is open until dropped")
    }
}

impl Drop for OpenStore {
    fn drop(&mut self) {
        drop(self.store.take());
        if let Some(closed) = self.closed.take() {
            let _ = closed.send(());
        }
    }
}

/// Reads and writes JSON values in single cells of the store.
#[derive(Clone)]
pub(crate) struct Cells {
    store: Arc<OpenStore>,
}

impl Cells {
    pub(crate) fn new(store: OpenStore) -> Self {
        Self {
            store: Arc::new(store),
        }
    }

    pub(crate) fn get<T: DeserializeOwned>(&self, row: &[u8]) -> Result<Option<T>, String> {
        let cell = self
            .store
            .read_cell(row, COLUMN, LATEST)
            .map_err(|e| e.to_string())?;
        cell.map(|c| {
            serde_json::from_slice(&c.value).map_err(|e| {
                format!(
                    "row {} does not decode: {e}",
                    megastore_rowstore::display_key(row)
                )
            })
        })
        .transpose()
    }

    pub(crate) fn put<T: Serialize>(&self, row: &[u8], value: &T) -> Result<(), String> {
        let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
        let mutation = RowMutation::new(row.to_vec()).set(COLUMN.to_vec(), 0, bytes);
        self.store
            .mutate_row(&mutation, None, Durability::Synced)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn put_many(
        &self,
        range: &KeyRange,
        rows: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), RowStoreError> {
        let mutations: Vec<RowMutation> = rows
            .into_iter()
            .map(|(row, bytes)| RowMutation::new(row).set(COLUMN.to_vec(), 0, bytes))
            .collect();
        self.store
            .mutate_rows(range, &mutations, Durability::Synced)
    }

    fn delete_rows(&self, range: &KeyRange) -> Result<(), RowStoreError> {
        let rows = self.store.scan(range, LATEST, &ScanOptions::default())?;
        let mutations: Vec<RowMutation> = rows
            .into_iter()
            .map(|r| RowMutation::new(r.key).delete_cell(COLUMN.to_vec(), 0))
            .collect();
        if mutations.is_empty() {
            return Ok(());
        }
        self.store
            .mutate_rows(range, &mutations, Durability::Synced)
    }

    fn scan_values(
        &self,
        range: &KeyRange,
        options: &ScanOptions,
    ) -> Result<Vec<Vec<u8>>, RowStoreError> {
        Ok(self
            .store
            .scan(range, LATEST, options)?
            .into_iter()
            .filter_map(|mut r| r.cells.remove(COLUMN).map(|c| c.value))
            .collect())
    }
}

/// The Raft log, vote and commit index.
#[derive(Clone)]
pub(crate) struct LogStore {
    cells: Cells,
}

impl LogStore {
    pub(crate) fn new(cells: Cells) -> Self {
        Self { cells }
    }

    fn log_range() -> KeyRange {
        KeyRange::prefix(LOG_PREFIX.to_vec())
    }

    fn last_entry(&self) -> StorageResult<Option<Entry<TypeConfig>>> {
        let options = ScanOptions {
            limit: Some(1),
            reverse: true,
            ..ScanOptions::default()
        };
        let values = self
            .cells
            .scan_values(&Self::log_range(), &options)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        values
            .first()
            .map(|v| serde_json::from_slice(v))
            .transpose()
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, e))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let keys = match range.end_bound() {
            Bound::Included(i) => match i.checked_add(1) {
                Some(end) => KeyRange::between(log_key(start), log_key(end)),
                None => log_range_from(start),
            },
            Bound::Excluded(i) => KeyRange::between(log_key(start), log_key(*i)),
            Bound::Unbounded => log_range_from(start),
        };
        let values = self
            .cells
            .scan_values(&keys, &ScanOptions::default())
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        values
            .iter()
            .map(|v| {
                serde_json::from_slice(v)
                    .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, e))
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<RaftNodeId>> = self
            .cells
            .get(PURGED)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        let last_log_id = self.last_entry()?.map(|e| e.log_id).or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<RaftNodeId>) -> StorageResult<()> {
        self.cells
            .put(VOTE, vote)
            .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<RaftNodeId>>> {
        self.cells
            .get(VOTE)
            .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Read, e))
    }

    async fn save_committed(&mut self, committed: Option<LogId<RaftNodeId>>) -> StorageResult<()> {
        self.cells
            .put(COMMITTED, &committed)
            .map_err(|e| io_error(ErrorSubject::Store, ErrorVerb::Write, e))
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<RaftNodeId>>> {
        let committed: Option<Option<LogId<RaftNodeId>>> = self
            .cells
            .get(COMMITTED)
            .map_err(|e| io_error(ErrorSubject::Store, ErrorVerb::Read, e))?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry)
                .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, e))?;
            rows.push((log_key(entry.log_id.index), bytes));
        }
        // One synced batch: durable before openraft counts the entries as stored.
        let result = self.cells.put_many(&Self::log_range(), rows);
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let message = e.to_string();
                callback.log_io_completed(Err(std::io::Error::other(message.clone())));
                Err(io_error(ErrorSubject::Logs, ErrorVerb::Write, message))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<RaftNodeId>) -> StorageResult<()> {
        self.cells
            .delete_rows(&log_range_from(log_id.index))
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }

    async fn purge(&mut self, log_id: LogId<RaftNodeId>) -> StorageResult<()> {
        // The purge mark first: a crash between the two leaves entries that are merely
        // unused, never a hole below the mark.
        self.cells
            .put(PURGED, &log_id)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        let range = KeyRange::between(log_key(0), log_key(log_id.index.saturating_add(1)));
        self.cells
            .delete_rows(&range)
            .map_err(|e| io_error(ErrorSubject::Logs, ErrorVerb::Delete, e))
    }
}
