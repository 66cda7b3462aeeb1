//! Copying a span of rows from one store to another exactly as stored: every version
//! and tombstone, so reads at any timestamp see the same rows in both. Moving a range
//! of entity groups between servers (docs/protocol.md, "Placement") is this copy,
//! made once while the source still serves and again once it is frozen.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::RowStoreError;
use crate::ordered::KeyRange;
use crate::store::{RowRead, RowStore};
use crate::types::{Durability, RowMutation, StoredRow, StoredVersion, Timestamp};

/// What [`copy_span`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Rows the source holds in the span.
    pub rows: u64,
    /// Versions written to the target (those it held already are not written again).
    pub written: u64,
    /// Versions the target held that the source does not, removed.
    pub removed: u64,
}

impl std::ops::AddAssign for CopyStats {
    fn add_assign(&mut self, other: CopyStats) {
        self.rows += other.rows;
        self.written += other.written;
        self.removed += other.removed;
    }
}

/// Makes `to`'s rows in `span` exactly `from`'s — every version and tombstone, and no
/// other row — leaving every row outside `span` alone. Works page by page, reading at
/// most `page_rows` rows of each store at a time (so memory is bounded however much
/// either holds), each page one atomic batch of the target written with
/// `durability`. The copy is of one moment if `from` is a snapshot or
/// does not change meanwhile; otherwise each page is of its own moment, and a later
/// copy of the span (from a source that no longer changes) makes it exact. Each page
/// is an [`export_page`] at the source and an [`import_page`] at the target, so a copy
/// between processes is the same copy.
pub fn copy_span<F, T>(
    from: &F,
    to: &T,
    span: &KeyRange,
    page_rows: usize,
    durability: Durability,
) -> Result<CopyStats, RowStoreError>
where
    F: RowRead + ?Sized,
    T: RowStore + ?Sized,
{
    let mut stats = CopyStats::default();
    let mut rest = span.clone();
    while !rest.is_empty() {
        let page = export_page(from, &rest, page_rows)?;
        stats += import_page(to, &rest, &page, page_rows, durability)?;
        match page.next {
            Some(next) => rest.start = next,
            None => break,
        }
    }
    Ok(stats)
}

/// One page of a span as the source holds it: its rows from the start of the span
/// asked for up to `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedPage {
    /// The rows, every version and tombstone, in key order.
    pub rows: Vec<StoredRow>,
    /// The first key the page does not speak for, where the next page starts (`None`:
    /// it speaks for the rest of the span; the span is done).
    pub next: Option<Vec<u8>>,
}

/// A page takes no row past its first once it holds this many bytes (keys, columns
/// and values of its versions): a page travels between servers as one message, well
/// within `MESSAGE_BYTES_MAX` (64 MiB), however large its rows are. A row is at most
/// `ROW_BYTES_MAX` (1 MB) per write, but its versions add up until collected.
pub const PAGE_BYTES_TARGET: usize = 4 << 20;

/// The first page of `from`'s rows in `rest`: at most `page_rows` rows, and no row
/// past the first once it holds [`PAGE_BYTES_TARGET`] bytes. (The source's rows are
/// read `page_rows` at a time, so that is what a page costs in memory at most.)
pub fn export_page<F: RowRead + ?Sized>(
    from: &F,
    rest: &KeyRange,
    page_rows: usize,
) -> Result<ExportedPage, RowStoreError> {
    let page_rows = page_rows.max(1);
    let mut rows = from.export_rows(rest, page_rows)?;
    // More may follow if it read all it asked for, or left some out.
    let more = rows.len() == page_rows;
    let within = rows_within(&rows, PAGE_BYTES_TARGET);
    let cut = within < rows.len();
    rows.truncate(within);
    let next = rows
        .last()
        .filter(|_| more || cut)
        .map(|last| [last.key.as_slice(), &[0]].concat());
    Ok(ExportedPage { rows, next })
}

/// How many of `rows`, from the first, a page holds within `bytes` (at least one).
fn rows_within(rows: &[StoredRow], bytes: usize) -> usize {
    let mut held = 0;
    for (n, row) in rows.iter().enumerate() {
        if n > 0 && held >= bytes {
            return n;
        }
        held += row.stored_bytes();
    }
    rows.len()
}

/// Makes `to`'s rows in the part of `rest` that `page` (exported from `rest`) speaks
/// for exactly the page's, reading at most `page_rows` of the target's rows at a time;
/// each part one atomic batch written with `durability`.
pub fn import_page<T: RowStore + ?Sized>(
    to: &T,
    rest: &KeyRange,
    page: &ExportedPage,
    page_rows: usize,
    durability: Durability,
) -> Result<CopyStats, RowStoreError> {
    let page_rows = page_rows.max(1);
    let covered_end = page.next.clone().or_else(|| rest.end.clone());
    let mut stats = CopyStats {
        rows: page.rows.len() as u64,
        ..CopyStats::default()
    };
    let mut start = rest.start.clone();
    loop {
        let remaining = KeyRange {
            start: start.clone(),
            end: covered_end.clone(),
        };
        if remaining.is_empty() {
            return Ok(stats);
        }
        // The target's rows a page at a time: each part covers what its page speaks for.
        let held = to.export_rows(&remaining, page_rows)?;
        let next = speaks_until(&held, page_rows);
        let part = KeyRange {
            start,
            end: next.clone().or_else(|| covered_end.clone()),
        };
        let wanted: Vec<StoredRow> = page
            .rows
            .iter()
            .filter(|r| part.contains(&r.key))
            .cloned()
            .collect();
        let held: Vec<StoredRow> = held.into_iter().filter(|r| part.contains(&r.key)).collect();
        let mutations = page_mutations(&wanted, &held, &mut stats);
        if !mutations.is_empty() {
            to.mutate_rows(&part, &mutations, durability)?;
        }
        match next {
            Some(next) => start = next,
            None => return Ok(stats),
        }
    }
}

/// The key right after a full page's last row (`None`: the page is not full, so it
/// speaks for the rest of its span).
fn speaks_until(rows: &[StoredRow], page_rows: usize) -> Option<Vec<u8>> {
    rows.last()
        .filter(|_| rows.len() == page_rows)
        .map(|last| [last.key.as_slice(), &[0]].concat())
}

/// Removes every version of every row of `to` in `span` (retiring a copy of a range
/// that moved away), page by page, `page_rows` rows at a time, each page one atomic
/// batch written with `durability`. Returns how many versions it removed.
pub fn clear_span<T: RowStore + ?Sized>(
    to: &T,
    span: &KeyRange,
    page_rows: usize,
    durability: Durability,
) -> Result<u64, RowStoreError> {
    let mut removed = 0;
    loop {
        let page = to.export_rows(span, page_rows.max(1))?;
        if page.is_empty() {
            return Ok(removed);
        }
        let mutations: Vec<RowMutation> = page
            .iter()
            .map(|row| {
                removed += row.versions.len() as u64;
                row.versions
                    .iter()
                    .fold(RowMutation::new(row.key.clone()), |m, v| {
                        m.delete_cell(v.column.clone(), v.timestamp)
                    })
            })
            .collect();
        to.mutate_rows(span, &mutations, durability)?;
    }
}

/// The mutations that turn `held` (the target's rows of a page's keys) into `page`.
fn page_mutations(
    page: &[StoredRow],
    held: &[StoredRow],
    stats: &mut CopyStats,
) -> Vec<RowMutation> {
    let (wanted, had) = (by_key(page), by_key(held));
    let keys: BTreeSet<&[u8]> = wanted.keys().chain(had.keys()).copied().collect();
    let none = BTreeSet::new();
    let mut mutations = Vec::new();
    for key in keys {
        let want = wanted.get(key).unwrap_or(&none);
        let have = had.get(key).unwrap_or(&none);
        // A version written at a (column, timestamp) replaces the one there, so only
        // versions at places the source leaves empty are removed.
        let places: BTreeSet<(&[u8], Timestamp)> = want
            .iter()
            .map(|v| (v.column.as_slice(), v.timestamp))
            .collect();
        let mut mutation = RowMutation::new(key);
        for gone in have.difference(want) {
            if !places.contains(&(gone.column.as_slice(), gone.timestamp)) {
                mutation = mutation.delete_cell(gone.column.clone(), gone.timestamp);
                stats.removed += 1;
            }
        }
        for new in want.difference(have) {
            mutation = match &new.value {
                Some(value) => mutation.set(new.column.clone(), new.timestamp, value.clone()),
                None => mutation.delete_column(new.column.clone(), new.timestamp),
            };
            stats.written += 1;
        }
        if !mutation.mutations.is_empty() {
            mutations.push(mutation);
        }
    }
    mutations
}

/// Each row's versions, by key.
fn by_key(rows: &[StoredRow]) -> BTreeMap<&[u8], BTreeSet<&StoredVersion>> {
    rows.iter()
        .map(|row| (row.key.as_slice(), row.versions.iter().collect()))
        .collect()
}
