use crate::error::RowStoreError;
use crate::ordered::KeyRange;
use crate::types::{
    Cell, Condition, Durability, GcStats, MutateOutcome, Row, RowMutation, ScanOptions, StoredRow,
    Timestamp,
};

/// Reads at a timestamp. Implemented by every store and by its snapshots.
pub trait RowRead {
    /// The row `row` at `at`, restricted to `columns`; `None` if no such cell is visible.
    fn read_row(
        &self,
        row: &[u8],
        columns: &KeyRange,
        at: Timestamp,
    ) -> Result<Option<Row>, RowStoreError>;

    /// The rows of `rows` at `at` in key order (or reverse), skipping rows with no
    /// visible cell among `options.columns`, at most `options.limit` of them.
    fn scan(
        &self,
        rows: &KeyRange,
        at: Timestamp,
        options: &ScanOptions,
    ) -> Result<Vec<Row>, RowStoreError>;

    /// Every stored version of the first `limit` rows of `rows` in key order,
    /// deletion tombstones included: the rows exactly as stored, for a copy of them to
    /// another store ([`crate::copy_span`]). A row is never split across calls.
    fn export_rows(&self, rows: &KeyRange, limit: usize) -> Result<Vec<StoredRow>, RowStoreError>;

    /// The visible version of one cell at `at`.
    fn read_cell(
        &self,
        row: &[u8],
        column: &[u8],
        at: Timestamp,
    ) -> Result<Option<Cell>, RowStoreError> {
        let row = self.read_row(row, &KeyRange::single(column), at)?;
        Ok(row.and_then(|mut r| r.cells.remove(column)))
    }
}

/// A Bigtable-style row store: ordered rows, versioned cells, single-row atomic
/// check-and-mutate, atomic batches within one key range, stable snapshots.
///
/// The trait is synchronous; async drivers call it from a blocking pool.
///
/// Guarantees every implementation keeps (checked by [`crate::conformance`]):
/// - each [`RowMutation`] is applied atomically: a read sees all of it or none of it;
/// - a conditional mutation's check and write are atomic with respect to every other
///   write of the same row;
/// - [`RowStore::mutate_rows`] applies all its row mutations atomically;
/// - a write that returned with [`Durability::Synced`] survives a restart or crash,
///   and so does every write that returned before it;
/// - a [`RowStore::Snapshot`] never observes writes made after it was taken.
pub trait RowStore: RowRead + Send + Sync {
    /// A point-in-time view of the whole store.
    type Snapshot<'a>: RowRead
    where
        Self: 'a;

    /// Takes a snapshot: its reads never see later writes, however long it is kept.
    fn snapshot(&self) -> Self::Snapshot<'_>;

    /// Applies `mutation` atomically if `condition` (checked against the newest version
    /// of its cell) holds, or unconditionally when there is none.
    fn mutate_row(
        &self,
        mutation: &RowMutation,
        condition: Option<&Condition>,
        durability: Durability,
    ) -> Result<MutateOutcome, RowStoreError>;

    /// Applies several rows' mutations as one atomic write. Every row must lie in
    /// `range` (one entity group), else nothing is written and the call fails.
    fn mutate_rows(
        &self,
        range: &KeyRange,
        mutations: &[RowMutation],
        durability: Durability,
    ) -> Result<(), RowStoreError>;

    /// Makes every write that has returned so far durable.
    fn sync(&self) -> Result<(), RowStoreError>;

    /// Removes cell versions in `rows` that no read at `watermark` or later can see:
    /// for each column, every version older than its newest version at or below
    /// `watermark`, and that version too when it is a deletion. Callers must not write
    /// at or below `watermark` in `rows` afterwards.
    fn collect_garbage(
        &self,
        rows: &KeyRange,
        watermark: Timestamp,
    ) -> Result<GcStats, RowStoreError>;
}

/// Fails unless every row of `mutations` lies in `range`.
pub fn check_rows_in_range(
    range: &KeyRange,
    mutations: &[RowMutation],
) -> Result<(), RowStoreError> {
    use crate::error::display_key;
    match mutations.iter().find(|m| !range.contains(&m.row)) {
        None => Ok(()),
        Some(m) => Err(RowStoreError::RowOutsideRange {
            row: display_key(&m.row),
            range: format!(
                "[{}, {})",
                display_key(&range.start),
                range
                    .end
                    .as_deref()
                    .map_or_else(|| "∞".to_string(), display_key)
            ),
        }),
    }
}
