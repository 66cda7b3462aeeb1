//! The in-memory row store, with an explicit durability model for the simulator.
//!
//! Every write lands in the *live* state at once. A synced write (or [`RowStore::sync`])
//! also replays every earlier unsynced write into the *durable* state, the way syncing
//! a write-ahead log persists everything logged before it. [`MemoryStore::crash`]
//! throws the live state away and restarts from the durable one.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::RowStoreError;
use crate::ordered::KeyRange;
use crate::store::{RowRead, RowStore, check_rows_in_range};
use crate::types::{
    Cell, Condition, Durability, GcStats, MutateOutcome, Mutation, Row, RowMutation, ScanOptions,
    StoredRow, StoredVersion, Timestamp,
};
use crate::versions::{garbage_versions, visible_version};

/// One column's versions, newest first; `None` is a deletion tombstone.
type Versions = BTreeMap<Reverse<Timestamp>, Option<Vec<u8>>>;
type Columns = BTreeMap<Vec<u8>, Versions>;

#[derive(Debug, Clone, Default)]
struct Data {
    rows: BTreeMap<Vec<u8>, Columns>,
}

/// A write not yet durable, kept to be replayed into the durable state on sync.
#[derive(Debug)]
enum UnsyncedOp {
    Mutate(Vec<RowMutation>),
    CollectGarbage(KeyRange, Timestamp),
}

#[derive(Debug, Default)]
struct State {
    /// What reads see. Shared with snapshots; copied on write while one is alive.
    live: Arc<Data>,
    /// What survives [`MemoryStore::crash`].
    durable: Data,
    unsynced: Vec<UnsyncedOp>,
}

/// An in-memory [`RowStore`] with simulated durability.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

/// A point-in-time view of a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemorySnapshot {
    data: Arc<Data>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a machine crash: every write not yet synced is lost.
    pub fn crash(&self) {
        let mut state = self.lock();
        state.unsynced.clear();
        state.live = Arc::new(state.durable.clone());
    }

    /// How many writes a crash would lose now.
    pub fn unsynced_writes(&self) -> usize {
        self.lock().unsynced.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("memory store lock poisoned: a writer panicked")
    }

    fn live(&self) -> Arc<Data> {
        Arc::clone(&self.lock().live)
    }
}

impl State {
    fn record(&mut self, op: UnsyncedOp, durability: Durability) {
        self.unsynced.push(op);
        if durability == Durability::Synced {
            self.sync();
        }
    }

    fn sync(&mut self) {
        for op in self.unsynced.drain(..) {
            match op {
                UnsyncedOp::Mutate(rows) => rows.iter().for_each(|m| self.durable.apply(m)),
                UnsyncedOp::CollectGarbage(range, watermark) => {
                    self.durable.collect_garbage(&range, watermark);
                }
            }
        }
    }
}

impl Data {
    fn apply(&mut self, mutation: &RowMutation) {
        let columns = self.rows.entry(mutation.row.clone()).or_default();
        for m in &mutation.mutations {
            match m {
                Mutation::Set {
                    column,
                    timestamp,
                    value,
                } => {
                    let versions = columns.entry(column.clone()).or_default();
                    versions.insert(Reverse(*timestamp), Some(value.clone()));
                }
                Mutation::DeleteColumn { column, timestamp } => {
                    let versions = columns.entry(column.clone()).or_default();
                    versions.insert(Reverse(*timestamp), None);
                }
                Mutation::DeleteCell { column, timestamp } => {
                    if let Some(versions) = columns.get_mut(column) {
                        versions.remove(&Reverse(*timestamp));
                        if versions.is_empty() {
                            columns.remove(column);
                        }
                    }
                }
                Mutation::DeleteColumns { columns: range } => {
                    if let Some(range) = bounds(range) {
                        let doomed: Vec<Vec<u8>> = columns
                            .range::<[u8], _>(range)
                            .map(|(column, _)| column.clone())
                            .collect();
                        doomed.iter().for_each(|column| {
                            columns.remove(column);
                        });
                    }
                }
            }
        }
        if columns.is_empty() {
            self.rows.remove(&mutation.row);
        }
    }

    fn newest(&self, row: &[u8], column: &[u8]) -> Option<Cell> {
        let versions = self.rows.get(row)?.get(column)?;
        visible_version(
            versions.iter().map(|(Reverse(ts), v)| (*ts, v.as_deref())),
            Timestamp::MAX,
        )
    }

    fn row_at(key: &[u8], columns: &Columns, wanted: &KeyRange, at: Timestamp) -> Option<Row> {
        let cells: BTreeMap<Vec<u8>, Cell> = columns
            .range::<[u8], _>(bounds(wanted)?)
            .filter_map(|(column, versions)| {
                let cell = visible_version(
                    versions.iter().map(|(Reverse(ts), v)| (*ts, v.as_deref())),
                    at,
                )?;
                Some((column.clone(), cell))
            })
            .collect();
        (!cells.is_empty()).then(|| Row {
            key: key.to_vec(),
            cells,
        })
    }

    fn collect_garbage(&mut self, rows: &KeyRange, watermark: Timestamp) -> u64 {
        let mut removed = 0;
        let mut emptied_rows = Vec::new();
        let Some(rows) = bounds(rows) else { return 0 };
        for (key, columns) in self.rows.range_mut::<[u8], _>(rows) {
            columns.retain(|_, versions| {
                let garbage = garbage_versions(
                    versions.iter().map(|(Reverse(ts), v)| (*ts, v.is_none())),
                    watermark,
                );
                removed += garbage.len() as u64;
                garbage.into_iter().for_each(|ts| {
                    versions.remove(&Reverse(ts));
                });
                !versions.is_empty()
            });
            if columns.is_empty() {
                emptied_rows.push(key.clone());
            }
        }
        emptied_rows.iter().for_each(|k| {
            self.rows.remove(k);
        });
        removed
    }
}

impl RowRead for Data {
    fn read_row(
        &self,
        row: &[u8],
        columns: &KeyRange,
        at: Timestamp,
    ) -> Result<Option<Row>, RowStoreError> {
        Ok(self
            .rows
            .get(row)
            .and_then(|cols| Data::row_at(row, cols, columns, at)))
    }

    fn export_rows(&self, rows: &KeyRange, limit: usize) -> Result<Vec<StoredRow>, RowStoreError> {
        Ok(self.stored_rows(rows, limit))
    }

    fn scan(
        &self,
        rows: &KeyRange,
        at: Timestamp,
        options: &ScanOptions,
    ) -> Result<Vec<Row>, RowStoreError> {
        let Some(rows) = bounds(rows) else {
            return Ok(Vec::new());
        };
        let in_range = self.rows.range::<[u8], _>(rows);
        let visible =
            |(key, cols): (&Vec<u8>, &Columns)| Data::row_at(key, cols, &options.columns, at);
        let limit = options.limit.unwrap_or(usize::MAX);
        Ok(if options.reverse {
            in_range.rev().filter_map(visible).take(limit).collect()
        } else {
            in_range.filter_map(visible).take(limit).collect()
        })
    }
}

impl Data {
    fn stored_rows(&self, rows: &KeyRange, limit: usize) -> Vec<StoredRow> {
        let Some(rows) = bounds(rows) else {
            return Vec::new();
        };
        self.rows
            .range::<[u8], _>(rows)
            .take(limit)
            .map(|(key, columns)| StoredRow {
                key: key.clone(),
                versions: columns
                    .iter()
                    .flat_map(|(column, versions)| {
                        versions
                            .iter()
                            .map(|(Reverse(timestamp), value)| StoredVersion {
                                column: column.clone(),
                                timestamp: *timestamp,
                                value: value.clone(),
                            })
                    })
                    .collect(),
            })
            .collect()
    }
}

type ByteBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// `range` as `BTreeMap::range` bounds, or `None` for an empty (possibly inverted)
/// range, on which `BTreeMap::range` would panic.
fn bounds(range: &KeyRange) -> Option<ByteBounds<'_>> {
    if range.is_empty() {
        return None;
    }
    let end = match &range.end {
        Some(end) => Bound::Excluded(end.as_slice()),
        None => Bound::Unbounded,
    };
    Some((Bound::Included(range.start.as_slice()), end))
}

impl RowRead for MemoryStore {
    fn read_row(
        &self,
        row: &[u8],
        columns: &KeyRange,
        at: Timestamp,
    ) -> Result<Option<Row>, RowStoreError> {
        self.live().read_row(row, columns, at)
    }

    fn scan(
        &self,
        rows: &KeyRange,
        at: Timestamp,
        options: &ScanOptions,
    ) -> Result<Vec<Row>, RowStoreError> {
        self.live().scan(rows, at, options)
    }

    fn export_rows(&self, rows: &KeyRange, limit: usize) -> Result<Vec<StoredRow>, RowStoreError> {
        Ok(self.live().stored_rows(rows, limit))
    }
}

impl RowRead for MemorySnapshot {
    fn read_row(
        &self,
        row: &[u8],
        columns: &KeyRange,
        at: Timestamp,
    ) -> Result<Option<Row>, RowStoreError> {
        self.data.read_row(row, columns, at)
    }

    fn scan(
        &self,
        rows: &KeyRange,
        at: Timestamp,
        options: &ScanOptions,
    ) -> Result<Vec<Row>, RowStoreError> {
        self.data.scan(rows, at, options)
    }

    fn export_rows(&self, rows: &KeyRange, limit: usize) -> Result<Vec<StoredRow>, RowStoreError> {
        Ok(self.data.stored_rows(rows, limit))
    }
}

impl RowStore for MemoryStore {
    type Snapshot<'a> = MemorySnapshot;

    fn snapshot(&self) -> MemorySnapshot {
        MemorySnapshot { data: self.live() }
    }

    fn mutate_row(
        &self,
        mutation: &RowMutation,
        condition: Option<&Condition>,
        durability: Durability,
    ) -> Result<MutateOutcome, RowStoreError> {
        let mut state = self.lock();
        if let Some(cond) = condition {
            let current = state.live.newest(&mutation.row, &cond.column);
            if current.as_ref().map(|c| &c.value) != cond.expected.as_ref() {
                return Ok(MutateOutcome::ConditionFailed { current });
            }
        }
        Arc::make_mut(&mut state.live).apply(mutation);
        state.record(UnsyncedOp::Mutate(vec![mutation.clone()]), durability);
        Ok(MutateOutcome::Applied)
    }

    fn mutate_rows(
        &self,
        range: &KeyRange,
        mutations: &[RowMutation],
        durability: Durability,
    ) -> Result<(), RowStoreError> {
        check_rows_in_range(range, mutations)?;
        let mut state = self.lock();
        let live = Arc::make_mut(&mut state.live);
        mutations.iter().for_each(|m| live.apply(m));
        state.record(UnsyncedOp::Mutate(mutations.to_vec()), durability);
        Ok(())
    }

    fn sync(&self) -> Result<(), RowStoreError> {
        self.lock().sync();
        Ok(())
    }

    fn collect_garbage(
        &self,
        rows: &KeyRange,
        watermark: Timestamp,
    ) -> Result<GcStats, RowStoreError> {
        let mut state = self.lock();
        let cells_removed = Arc::make_mut(&mut state.live).collect_garbage(rows, watermark);
        state.record(
            UnsyncedOp::CollectGarbage(rows.clone(), watermark),
            Durability::Buffered,
        );
        Ok(GcStats { cells_removed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LATEST;

    fn put(store: &MemoryStore, row: &[u8], value: &[u8], durability: Durability) {
        let m = RowMutation::new(row).set(b"c".to_vec(), 1, value);
        store.mutate_row(&m, None, durability).unwrap();
    }

    #[test]
    fn crash_loses_exactly_the_unsynced_writes() {
        let store = MemoryStore::new();
        put(&store, b"a", b"1", Durability::Synced);
        put(&store, b"b", b"1", Durability::Buffered);
        assert_eq!(store.unsynced_writes(), 1);
        store.crash();
        assert!(store.read_cell(b"a", b"c", LATEST).unwrap().is_some());
        assert!(store.read_cell(b"b", b"c", LATEST).unwrap().is_none());
    }

    #[test]
    fn a_synced_write_makes_earlier_buffered_writes_durable() {
        let store = MemoryStore::new();
        put(&store, b"a", b"1", Durability::Buffered);
        put(&store, b"b", b"1", Durability::Synced);
        assert_eq!(store.unsynced_writes(), 0);
        store.crash();
        assert!(store.read_cell(b"a", b"c", LATEST).unwrap().is_some());
    }

    #[test]
    fn unsynced_garbage_collection_is_undone_by_a_crash() {
        let store = MemoryStore::new();
        put(&store, b"a", b"old", Durability::Synced);
        let newer = RowMutation::new(&b"a"[..]).set(b"c".to_vec(), 2, b"new".to_vec());
        store.mutate_row(&newer, None, Durability::Synced).unwrap();
        assert_eq!(
            store
                .collect_garbage(&KeyRange::all(), 5)
                .unwrap()
                .cells_removed,
            1
        );
        assert!(store.read_cell(b"a", b"c", 1).unwrap().is_none());
        store.crash();
        assert!(store.read_cell(b"a", b"c", 1).unwrap().is_some());
    }

    #[test]
    fn inverted_ranges_read_nothing() {
        let store = MemoryStore::new();
        put(&store, b"m", b"1", Durability::Buffered);
        let inverted = KeyRange::between(b"z".to_vec(), b"a".to_vec());
        assert!(
            store
                .scan(&inverted, LATEST, &ScanOptions::default())
                .unwrap()
                .is_empty()
        );
    }
}
