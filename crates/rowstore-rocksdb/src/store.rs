use std::path::{Path, PathBuf};

use megastore_rowstore::versions::garbage_versions;
use megastore_rowstore::{
    Condition, Durability, GcStats, KeyRange, MutateOutcome, Mutation, Row, RowMutation, RowRead,
    RowStore, RowStoreError, ScanOptions, StoredRow, Timestamp, check_rows_in_range,
};
use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Options, ReadOptions, Snapshot, WriteBatch,
    WriteOptions,
};

use crate::errors::{corrupt, engine_error};
use crate::layout::{
    TOMBSTONE_TAG, cell_key, column_prefix, columns_key_range, parse_cell_key, parse_value,
    row_prefix, value_bytes,
};
use crate::locks::RowLocks;
use crate::read::{RawSource, export_rows, scan};

/// Tuning of a [`RocksStore`]. The defaults suit a replica on a small machine.
#[derive(Debug, Clone)]
pub struct RocksOptions {
    /// Size of the shared LRU block cache.
    pub block_cache_bytes: usize,
    /// Background flush and compaction threads.
    pub background_jobs: i32,
}

impl Default for RocksOptions {
    fn default() -> Self {
        Self {
            block_cache_bytes: 64 << 20,
            background_jobs: 2,
        }
    }
}

/// Garbage collection writes its deletions in batches of this many cells.
const GC_BATCH_CELLS: usize = 10_000;
/// How many of a column's versions above a collection's watermark it reads one by one
/// before it seeks past the rest (a seek costs a few steps).
const SEEK_PAST_KEPT_VERSIONS: usize = 4;

/// A [`RowStore`] in a RocksDB directory.
pub struct RocksStore {
    db: DB,
    path: PathBuf,
    row_locks: RowLocks,
}

/// A point-in-time view of a [`RocksStore`] (a RocksDB snapshot).
pub struct RocksSnapshot<'a> {
    snapshot: Snapshot<'a>,
    path: &'a Path,
}

impl std::fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RocksStore {
    /// Opens (creating if missing) the store in `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, RowStoreError> {
        Self::open_with(path, &RocksOptions::default())
    }

    /// Opens (creating if missing) the store in `path`.
    ///
    /// Fails with [`RowStoreError::Locked`] when another process has it open and with
    /// [`RowStoreError::Corrupt`] when its files are damaged.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: &RocksOptions,
    ) -> Result<Self, RowStoreError> {
        let path = path.as_ref().to_path_buf();
        // Made here, not by RocksDB, whose message would show the OS error's debug form.
        std::fs::create_dir_all(&path).map_err(|e| RowStoreError::Io {
            path: path.clone(),
            detail: format!("cannot create the directory: {e}"),
        })?;
        let cache =
            Cache::new_lru_cache(options.block_cache_bytes).map_err(|e| engine_error(&path, e))?;
        let db =
            DB::open(&db_options(options, &cache), &path).map_err(|e| engine_error(&path, e))?;
        Ok(Self {
            db,
            path,
            row_locks: RowLocks::new(),
        })
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a consistent copy of the store to `into` (which must not exist): a
    /// RocksDB checkpoint — hard links to the immutable files where the file system
    /// allows, copies otherwise — openable as a store of its own.
    pub fn checkpoint(&self, into: &Path) -> Result<(), RowStoreError> {
        let checkpoint = rocksdb::checkpoint::Checkpoint::new(&self.db)
            .map_err(|e| engine_error(&self.path, e))?;
        checkpoint
            .create_checkpoint(into)
            .map_err(|e| engine_error(into, e))
    }

    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), RowStoreError> {
        let mut write_options = WriteOptions::default();
        // With sync, RocksDB's write group commits concurrent writers with one fsync.
        write_options.set_sync(durability == Durability::Synced);
        self.db
            .write_opt(batch, &write_options)
            .map_err(|e| engine_error(&self.path, e))
    }

    /// The newest version of a cell, tombstones included, read at the latest state.
    fn newest_cell(
        &self,
        row: &[u8],
        column: &[u8],
    ) -> Result<Option<megastore_rowstore::Cell>, RowStoreError> {
        let prefix = column_prefix(row, column);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(prefix.clone());
        if let Some(end) = megastore_rowstore::prefix_successor(&prefix) {
            read_options.set_iterate_upper_bound(end);
        }
        let mut it = self.db.raw_iter(read_options);
        it.seek(&prefix);
        let Some((key, value)) = it.item() else {
            it.status().map_err(|e| engine_error(&self.path, e))?;
            return Ok(None);
        };
        let cell = parse_cell_key(key).map_err(|e| corrupt(&self.path, e))?;
        let value = parse_value(value).map_err(|e| corrupt(&self.path, e))?;
        Ok(value.map(|v| megastore_rowstore::Cell {
            timestamp: cell.timestamp,
            value: v.to_vec(),
        }))
    }
}

/// RocksDB settings, with why each is chosen (docs/building.md has the same table).
fn db_options(options: &RocksOptions, cache: &Cache) -> Options {
    let mut db = Options::default();
    db.create_if_missing(true);
    // Catch corruption at open and during reads rather than serving bad data.
    db.set_paranoid_checks(true);
    db.set_max_background_jobs(options.background_jobs);
    // Cheap compression for hot levels, dense compression for the bottom level.
    db.set_compression_type(DBCompressionType::Lz4);
    db.set_bottommost_compression_type(DBCompressionType::Zstd);
    db.set_level_compaction_dynamic_level_bytes(true);
    // Smooth out writeback instead of large bursts at file close.
    db.set_bytes_per_sync(1 << 20);
    // Unsynced writes stay in RocksDB's WAL buffer until a sync (`sync`, or a write
    // with `Durability::Synced`, which flushes the buffer before its fsync) instead of
    // costing a write(2) each: a replica's driver makes one unsynced write per batch of
    // steps (and one per garbage collection or read in between) and syncs once per
    // batch. What a crash may lose is unchanged: unsynced writes, now also when only
    // the process dies.
    db.set_manual_wal_flush(true);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    // Whole-key bloom filters skip SST files that cannot hold a cell.
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks stay with their open tables, outside the block cache:
    // every read makes an iterator, which needs every overlapping table's index, and
    // in the cache they were evicted by data blocks and decompressed again per read
    // (throughput halved once tables reached the ZSTD bottom level; docs/building.md).
    table.set_cache_index_and_filter_blocks(false);
    db.set_block_based_table_factory(&table);
    db
}

/// Adds one row's mutations to a write batch.
fn add_to_batch(batch: &mut WriteBatch, mutation: &RowMutation) {
    for m in &mutation.mutations {
        match m {
            Mutation::Set {
                column,
                timestamp,
                value,
            } => {
                batch.put(
                    cell_key(&mutation.row, column, *timestamp),
                    value_bytes(value),
                );
            }
            Mutation::DeleteColumn { column, timestamp } => {
                batch.put(cell_key(&mutation.row, column, *timestamp), [TOMBSTONE_TAG]);
            }
            Mutation::DeleteCell { column, timestamp } => {
                batch.delete(cell_key(&mutation.row, column, *timestamp));
            }
            Mutation::DeleteColumns { columns } => {
                // One range tombstone: escaping keeps byte order and is prefix-free, so
                // the row's cells of exactly these columns lie between the two keys.
                if !columns.is_empty() {
                    let (from, to) = columns_key_range(&mutation.row, columns);
                    batch.delete_range(from, to);
                }
            }
        }
    }
}

impl RowRead for RocksStore {
    fn read_row(
        &self,
        row: &[u8],
        columns: &KeyRange,
        at: Timestamp,
    ) -> Result<Option<Row>, RowStoreError> {
        read_row(&self.db, &self.path, row, columns, at)
    }

    fn scan(
        &self,
        rows: &KeyRange,
        at: Timestamp,
        options: &ScanOptions,
    ) -> Result<Vec<Row>, RowStoreError> {
        scan(&self.db, &self.path, rows, at, options)
    }

    fn export_rows(&self, rows: &KeyRange, limit: usize) -> Result<Vec<StoredRow>, RowStoreError> {
        export_rows(&self.db, &self.path, rows, limit)
    }
}

impl RowRead for RocksSnapshot<'_> {
    fn read_row(
        &self,
        row: &[u8],
        columns: &KeyRange,
        at: Timestamp,
    ) -> Result<Option<Row>, RowStoreError> {
        read_row(&self.snapshot, self.path, row, columns, at)
    }

    fn scan(
        &self,
        rows: &KeyRange,
        at: Timestamp,
        options: &ScanOptions,
    ) -> Result<Vec<Row>, RowStoreError> {
        scan(&self.snapshot, self.path, rows, at, options)
    }

    fn export_rows(&self, rows: &KeyRange, limit: usize) -> Result<Vec<StoredRow>, RowStoreError> {
        export_rows(&self.snapshot, self.path, rows, limit)
    }
}

fn read_row<S: RawSource>(
    source: &S,
    path: &Path,
    row: &[u8],
    columns: &KeyRange,
    at: Timestamp,
) -> Result<Option<Row>, RowStoreError> {
    let options = ScanOptions {
        columns: columns.clone(),
        limit: Some(1),
        reverse: false,
    };
    Ok(scan(source, path, &KeyRange::single(row), at, &options)?.pop())
}

impl RowStore for RocksStore {
    type Snapshot<'a> = RocksSnapshot<'a>;

    fn snapshot(&self) -> RocksSnapshot<'_> {
        RocksSnapshot {
            snapshot: self.db.snapshot(),
            path: &self.path,
        }
    }

    fn mutate_row(
        &self,
        mutation: &RowMutation,
        condition: Option<&Condition>,
        durability: Durability,
    ) -> Result<MutateOutcome, RowStoreError> {
        let _row_lock = self.row_locks.lock([mutation.row.as_slice()]);
        if let Some(cond) = condition {
            let current = self.newest_cell(&mutation.row, &cond.column)?;
            if current.as_ref().map(|c| &c.value) != cond.expected.as_ref() {
                return Ok(MutateOutcome::ConditionFailed { current });
            }
        }
        let mut batch = WriteBatch::default();
        add_to_batch(&mut batch, mutation);
        self.write(batch, durability)?;
        Ok(MutateOutcome::Applied)
    }

    fn mutate_rows(
        &self,
        range: &KeyRange,
        mutations: &[RowMutation],
        durability: Durability,
    ) -> Result<(), RowStoreError> {
        check_rows_in_range(range, mutations)?;
        let _row_locks = self
            .row_locks
            .lock(mutations.iter().map(|m| m.row.as_slice()));
        let mut batch = WriteBatch::default();
        mutations.iter().for_each(|m| add_to_batch(&mut batch, m));
        self.write(batch, durability)
    }

    fn sync(&self) -> Result<(), RowStoreError> {
        self.db
            .flush_wal(true)
            .map_err(|e| engine_error(&self.path, e))
    }

    fn collect_garbage(
        &self,
        rows: &KeyRange,
        watermark: Timestamp,
    ) -> Result<GcStats, RowStoreError> {
        let mut stats = GcStats::default();
        if rows.is_empty() {
            return Ok(stats);
        }
        let lower = row_prefix(&rows.start);
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_lower_bound(lower.clone());
        if let Some(end) = &rows.end {
            read_options.set_iterate_upper_bound(row_prefix(end));
        }
        let mut it = self.db.raw_iter(read_options);
        it.seek(&lower);
        let mut batch = WriteBatch::default();
        // (row, column) of the group being gathered, and its versions newest first.
        let mut group: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut versions: Vec<(Timestamp, bool)> = Vec::new();
        let mut kept_above = 0;
        let mut flush_group = |group: &(Vec<u8>, Vec<u8>),
                               versions: &mut Vec<(Timestamp, bool)>,
                               batch: &mut WriteBatch| {
            for ts in garbage_versions(versions.drain(..), watermark) {
                batch.delete(cell_key(&group.0, &group.1, ts));
                stats.cells_removed += 1;
            }
        };
        while let Some((key, value)) = it.item() {
            let cell = parse_cell_key(key).map_err(|e| corrupt(&self.path, e))?;
            let is_tombstone = parse_value(value)
                .map_err(|e| corrupt(&self.path, e))?
                .is_none();
            if group
                .as_ref()
                .is_none_or(|(r, c)| *r != cell.row || *c != cell.column)
            {
                if let Some(done) = group.take() {
                    flush_group(&done, &mut versions, &mut batch);
                    if batch.len() >= GC_BATCH_CELLS {
                        self.write(std::mem::take(&mut batch), Durability::Buffered)?;
                    }
                }
                kept_above = 0;
                group = Some((cell.row, cell.column));
            }
            if cell.timestamp > watermark {
                // Kept whatever it is. A column's versions sort newest first, so past
                // a few of them one seek lands on the newest at or below the
                // watermark: a group keeps hundreds of positions of history above it,
                // and reading them all was most of a collection's work.
                kept_above += 1;
                if kept_above == SEEK_PAST_KEPT_VERSIONS
                    && let Some((row, column)) = &group
                {
                    it.seek(cell_key(row, column, watermark));
                } else {
                    it.next();
                }
                continue;
            }
            versions.push((cell.timestamp, is_tombstone));
            it.next();
        }
        it.status().map_err(|e| engine_error(&self.path, e))?;
        if let Some(done) = group {
            flush_group(&done, &mut versions, &mut batch);
        }
        self.write(batch, Durability::Buffered)?;
        Ok(stats)
    }
}
