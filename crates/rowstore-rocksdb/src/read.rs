//! Reads at a timestamp over a raw RocksDB iterator, shared by the store and its
//! snapshots. A raw iterator reads one implicit (or the given explicit) snapshot, so
//! every read and scan sees a single point in time.

use std::collections::BTreeMap;
use std::path::Path;

use megastore_rowstore::ordered::{escape_into, prefix_successor, unescape};
use megastore_rowstore::{
    Cell, KeyRange, Row, RowStoreError, ScanOptions, StoredRow, StoredVersion, Timestamp,
};
use rocksdb::{DB, DBRawIteratorWithThreadMode, ReadOptions, Snapshot};

use crate::errors::{corrupt, engine_error};
use crate::layout::{parse_cell_key, parse_value, row_prefix};

/// Something a raw iterator can be opened on: the database or a snapshot of it.
pub(crate) trait RawSource {
    fn raw_iter(&self, options: ReadOptions) -> DBRawIteratorWithThreadMode<'_, DB>;
}

impl RawSource for DB {
    fn raw_iter(&self, options: ReadOptions) -> DBRawIteratorWithThreadMode<'_, DB> {
        self.raw_iterator_opt(options)
    }
}

impl RawSource for Snapshot<'_> {
    fn raw_iter(&self, options: ReadOptions) -> DBRawIteratorWithThreadMode<'_, DB> {
        self.raw_iterator_opt(options)
    }
}

/// After this many `next()` calls over versions of a column whose visible version is
/// already known, seek past the column instead.
const SKIP_BY_NEXT_MAX: usize = 8;

/// The column being read: its escaped and plain name, and the version chosen so far.
struct ColumnState {
    escaped: Vec<u8>,
    name: Vec<u8>,
    /// (timestamp, value or tombstone) of the newest version at or below the read
    /// timestamp seen so far.
    chosen: Option<(Timestamp, Option<Vec<u8>>)>,
    /// Forward scans meet versions newest first, so the first one at or below the
    /// read timestamp settles the column.
    settled: bool,
    skipped: usize,
}

/// The row being read: its escaped prefix (what every cell key of it starts with),
/// its key, and the cells found visible so far.
struct RowState {
    escaped: Vec<u8>,
    key: Vec<u8>,
    cells: BTreeMap<Vec<u8>, Cell>,
    column: Option<ColumnState>,
}

impl RowState {
    fn finish_column(&mut self) {
        if let Some(ColumnState {
            name,
            chosen: Some((timestamp, Some(value))),
            ..
        }) = self.column.take()
        {
            self.cells.insert(name, Cell { timestamp, value });
        }
    }

    fn finish(mut self, found: &mut Vec<Row>) {
        self.finish_column();
        if !self.cells.is_empty() {
            found.push(Row {
                key: self.key,
                cells: self.cells,
            });
        }
    }
}

/// Scans `rows` at `at`; see [`megastore_rowstore::RowRead::scan`].
///
/// Works on raw key bytes: a row or column boundary is a change of escaped prefix, a
/// column name is decoded only when it changes, and once a column's visible version is
/// known its older versions are skipped.
pub(crate) fn scan<S: RawSource>(
    source: &S,
    path: &Path,
    rows: &KeyRange,
    at: Timestamp,
    options: &ScanOptions,
) -> Result<Vec<Row>, RowStoreError> {
    let limit = options.limit.unwrap_or(usize::MAX);
    if rows.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let lower = row_prefix(&rows.start);
    let upper = rows.end.as_deref().map(row_prefix);
    let mut read_options = ReadOptions::default();
    read_options.set_iterate_lower_bound(lower.clone());
    if let Some(upper) = &upper {
        read_options.set_iterate_upper_bound(upper.clone());
    }
    let mut it = source.raw_iter(read_options);
    match (options.reverse, &upper) {
        (false, _) => it.seek(&lower),
        (true, Some(upper)) => it.seek_for_prev(upper),
        (true, None) => it.seek_to_last(),
    }
    let reverse = options.reverse;
    let advance =
        |it: &mut DBRawIteratorWithThreadMode<'_, DB>| if reverse { it.prev() } else { it.next() };

    let mut found = Vec::new();
    let mut row: Option<RowState> = None;
    while let Some((key, value)) = it.item() {
        if row.as_ref().is_none_or(|r| !key.starts_with(&r.escaped)) {
            if let Some(done) = row.take() {
                done.finish(&mut found);
                if found.len() >= limit {
                    break;
                }
            }
            let mut rest = key;
            let row_key = unescape(&mut rest, false)
                .map_err(|e| corrupt(path, format!("cell key row: {e}")))?;
            let escaped = key[..key.len() - rest.len()].to_vec();
            row = Some(RowState {
                escaped,
                key: row_key,
                cells: BTreeMap::new(),
                column: None,
            });
        }
        let state = row.as_mut().expect("a row was started above");
        let rest = &key[state.escaped.len()..];
        let Some(split) = rest.len().checked_sub(8) else {
            return Err(corrupt(
                path,
                format!(
                    "cell key ends in {} bytes, not a column and timestamp",
                    rest.len()
                ),
            ));
        };
        let (escaped_column, ts_bytes) = rest.split_at(split);

        if state
            .column
            .as_ref()
            .is_none_or(|c| c.escaped != escaped_column)
        {
            state.finish_column();
            let mut column_bytes = escaped_column;
            let name = unescape(&mut column_bytes, false)
                .ok()
                .filter(|_| column_bytes.is_empty())
                .ok_or_else(|| corrupt(path, "cell key column is malformed".to_string()))?;
            if !options.columns.contains(&name) {
                if reverse {
                    advance(&mut it);
                } else {
                    // Seek past the columns outside the range instead of reading them.
                    let mut target = state.escaped.clone();
                    if name < options.columns.start {
                        escape_into(&options.columns.start, &mut target);
                    } else {
                        match prefix_successor(&target) {
                            Some(next_row) => target = next_row,
                            None => break,
                        }
                    }
                    it.seek(&target);
                }
                continue;
            }
            state.column = Some(ColumnState {
                escaped: escaped_column.to_vec(),
                name,
                chosen: None,
                settled: false,
                skipped: 0,
            });
        }
        let column = state.column.as_mut().expect("a column was started above");
        if column.settled {
            column.skipped += 1;
            if column.skipped > SKIP_BY_NEXT_MAX {
                let column_prefix = [state.escaped.as_slice(), &column.escaped].concat();
                match prefix_successor(&column_prefix) {
                    Some(next_column) => it.seek(&next_column),
                    None => break,
                }
            } else {
                advance(&mut it);
            }
            continue;
        }
        let timestamp = !u64::from_be_bytes(ts_bytes.try_into().expect("split off 8 bytes"));
        if timestamp <= at {
            let value = parse_value(value).map_err(|e| corrupt(path, e))?;
            column.chosen = Some((timestamp, value.map(<[u8]>::to_vec)));
            column.settled = !reverse;
        }
        advance(&mut it);
    }
    it.status().map_err(|e| engine_error(path, e))?;
    if let Some(last) = row.filter(|_| found.len() < limit) {
        last.finish(&mut found);
    }
    Ok(found)
}

/// Every stored version of the first `limit` rows of `rows`; see
/// [`megastore_rowstore::RowRead::export_rows`].
pub(crate) fn export_rows<S: RawSource>(
    source: &S,
    path: &Path,
    rows: &KeyRange,
    limit: usize,
) -> Result<Vec<StoredRow>, RowStoreError> {
    if rows.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let lower = row_prefix(&rows.start);
    let mut read_options = ReadOptions::default();
    read_options.set_iterate_lower_bound(lower.clone());
    if let Some(end) = &rows.end {
        read_options.set_iterate_upper_bound(row_prefix(end));
    }
    let mut it = source.raw_iter(read_options);
    it.seek(&lower);
    let mut found: Vec<StoredRow> = Vec::new();
    while let Some((key, value)) = it.item() {
        let cell = parse_cell_key(key).map_err(|e| corrupt(path, e))?;
        let value = parse_value(value).map_err(|e| corrupt(path, e))?;
        let version = StoredVersion {
            column: cell.column,
            timestamp: cell.timestamp,
            value: value.map(<[u8]>::to_vec),
        };
        let same_row = found.last().is_some_and(|row| row.key == cell.row);
        if same_row {
            found.last_mut().expect("a row").versions.push(version);
        } else if found.len() == limit {
            break;
        } else {
            found.push(StoredRow {
                key: cell.row,
                versions: vec![version],
            });
        }
        it.next();
    }
    it.status().map_err(|e| engine_error(path, e))?;
    Ok(found)
}
