//! What of a replica's row store belongs to a range of groups (docs/protocol.md,
//! "Placement"): what moving the range's slot to another server copies, exactly as
//! stored (`megastore_rowstore::copy_span`), and what the source retires once the
//! move is done (`megastore_rowstore::clear_span`).
//!
//! Everything a replica knows of a group is in its rows — the log, promises, grants
//! and marks in its root row, its data and mirrors in the rest — plus its rows in the
//! registry and the open index. A server that starts from a copy of them answers as
//! the slot did, since the core keeps nothing of a group in memory that it cannot
//! reload (the position leader's memory of a refused grant is liveness only). Beside
//! them, the global index rows (`0xFD …`) the groups' mirrors name: each belongs to
//! the one group whose mirror names it, so a copy (`super::range_copy`) copies those
//! rows too, and [`retire_range`] deletes them.

use std::collections::BTreeSet;

use megastore_rowstore::{Durability, KeyRange, RowRead, RowStore, RowStoreError, clear_span};
use megastore_types::reserved::{GLOBAL_INDEX_TAG, SYSTEM_TAG, UNTYPED_GROUP_TAG};

use super::registry::{GroupList, registered_in};
use crate::entry::{global_mirror_range, mirrored_global_row};

/// Groups listed at once while finding the global rows a range's mirrors name.
const GROUPS_PAGE: usize = 256;

/// The parts of the key space where groups' rows are: typed groups below the global
/// index entries, and untyped groups below the system's rows.
fn group_areas() -> [KeyRange; 2] {
    [
        KeyRange {
            start: Vec::new(),
            end: Some(vec![GLOBAL_INDEX_TAG]),
        },
        KeyRange::between([UNTYPED_GROUP_TAG], [SYSTEM_TAG]),
    ]
}

/// Every span of a replica's store that holds state of the groups whose keys lie in
/// `groups` (a range of group keys, as a placement's range is): their rows, and their
/// rows in the registry and the open index. Disjoint, in key order.
pub fn group_state_spans(groups: &KeyRange) -> Vec<KeyRange> {
    let mut spans: Vec<KeyRange> = group_areas()
        .iter()
        .filter_map(|area| area.intersection(groups))
        .collect();
    for list in [GroupList::Open, GroupList::Registered] {
        let rows = list.rows_of(groups);
        if !rows.is_empty() {
            spans.push(rows);
        }
    }
    spans.sort_by(|a, b| a.start.cmp(&b.start));
    debug_assert!(
        spans
            .windows(2)
            .all(|w| w[0].end.as_ref().is_some_and(|end| *end <= w[1].start)),
        "group state spans overlap: {spans:?}"
    );
    spans
}

/// The global index rows named by the mirrors of the groups in `groups` that `store`
/// holds (registered), deleted mirror rows included while a version of them is kept.
pub(super) fn mirrored_global_rows<S: RowRead>(
    store: &S,
    groups: &KeyRange,
) -> Result<BTreeSet<Vec<u8>>, RowStoreError> {
    let mut rows = BTreeSet::new();
    let mut rest = groups.clone();
    loop {
        let page = registered_in(store, &rest, GROUPS_PAGE)?;
        for eg in &page {
            for mirror in store.export_rows(&global_mirror_range(eg), usize::MAX)? {
                if let Some(global) = mirrored_global_row(eg, &mirror.key) {
                    rows.insert(global.to_vec());
                }
            }
        }
        match page.last() {
            Some(last) if page.len() == GROUPS_PAGE => {
                rest.start = [last.0.as_slice(), &[0]].concat();
            }
            _ => return Ok(rows),
        }
    }
}

/// How many bytes `store` holds of the groups in `groups` (every version of every row
/// of [`group_state_spans`], as [`megastore_rowstore::StoredRow::stored_bytes`] counts
/// them; their global index rows aside), read `page_rows` rows at a time; `after_page`
/// is told each page's bytes (a caller paces the reading by it) and may stop the
/// reading (then `None`).
pub fn range_bytes<S: RowRead + ?Sized>(
    store: &S,
    groups: &KeyRange,
    page_rows: usize,
    mut after_page: impl FnMut(u64) -> std::ops::ControlFlow<()>,
) -> Result<Option<u64>, RowStoreError> {
    let page_rows = page_rows.max(1);
    let mut total = 0;
    for span in group_state_spans(groups) {
        let mut rest = span;
        loop {
            let rows = store.export_rows(&rest, page_rows)?;
            let bytes: u64 = rows.iter().map(|r| r.stored_bytes() as u64).sum();
            total += bytes;
            if after_page(bytes).is_break() {
                return Ok(None);
            }
            match rows.last() {
                Some(last) if rows.len() == page_rows => {
                    rest.start = [last.key.as_slice(), &[0]].concat();
                }
                _ => break,
            }
        }
    }
    Ok(Some(total))
}

/// Deletes `store`'s state of the groups in `groups` (a range that moved away): the
/// global index rows their mirrors name, then every span of [`group_state_spans`].
/// Returns how many versions it removed.
pub fn retire_range<T: RowStore>(
    store: &T,
    groups: &KeyRange,
    page_rows: usize,
    durability: Durability,
) -> Result<u64, RowStoreError> {
    let mut removed = 0;
    for global in mirrored_global_rows(store, groups)? {
        removed += clear_span(store, &KeyRange::single(global), page_rows, durability)?;
    }
    for span in group_state_spans(groups) {
        removed += clear_span(store, &span, page_rows, durability)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::registry::{OPEN_PREFIX, REGISTRY_PREFIX};

    #[test]
    fn the_spans_of_every_group_skip_the_global_entries_and_the_system_rows_but_its_lists() {
        let spans = group_state_spans(&KeyRange::all());
        assert_eq!(spans.len(), 4);
        let in_some = |key: &[u8]| spans.iter().any(|s| s.contains(key));
        for key in [
            &[0x01, 7][..],
            &[0xF8, 0xFF],
            &[0xFE, b'a', 0, 1],
            &[REGISTRY_PREFIX, b"\xfeg"].concat(),
            &[OPEN_PREFIX, b"\x01"].concat(),
        ] {
            assert!(in_some(key), "{key:?}");
        }
        for key in [
            &[GLOBAL_INDEX_TAG, 1][..],
            b"\xff\xffmegastore/layout",
            &[SYSTEM_TAG],
        ] {
            assert!(!in_some(key), "{key:?}");
        }
    }

    #[test]
    fn a_ranges_spans_hold_its_groups_rows_and_list_entries_only() {
        let range = KeyRange::between([0x20], [0x40]);
        let spans = group_state_spans(&range);
        let in_some = |key: &[u8]| spans.iter().any(|s| s.contains(key));
        assert!(in_some(&[0x20, 0, 9]));
        assert!(in_some(&[REGISTRY_PREFIX, &[0x3f, 0xff]].concat()));
        assert!(in_some(&[OPEN_PREFIX, &[0x20]].concat()));
        assert!(!in_some(&[0x40]));
        assert!(!in_some(&[0x1f, 0xff]));
        assert!(!in_some(&[REGISTRY_PREFIX, &[0x40]].concat()));
        assert!(!in_some(&[OPEN_PREFIX, &[0x10]].concat()));
        // The last range reaches into the untyped groups, and no further.
        let last = group_state_spans(&KeyRange {
            start: vec![0xF0],
            end: None,
        });
        assert_eq!(last.len(), 4);
        assert!(last.iter().any(|s| s.contains(&[0xFE, 1])));
        assert!(!last.iter().any(|s| s.contains(&[GLOBAL_INDEX_TAG])));
    }

    #[test]
    fn a_ranges_bytes_are_its_groups_rows_every_version_and_nothing_else() {
        use megastore_rowstore::{MemoryStore, RowMutation};
        let store = MemoryStore::new();
        let write = |mutation: RowMutation| {
            store
                .mutate_row(&mutation, None, Durability::Buffered)
                .expect("a write");
        };
        // In the range: three rows, one with two versions and a tombstone.
        for n in 0..3u8 {
            write(RowMutation::new([0x20, n]).set(b"c", 1, [n; 10]));
        }
        write(
            RowMutation::new([0x21])
                .set(b"c", 1, [1; 100])
                .set(b"c", 2, [2; 100])
                .delete_column(b"d", 3),
        );
        write(RowMutation::new([REGISTRY_PREFIX, &[0x20]].concat()).set(b"r", 1, b""));
        // Outside it: a group past its end, and a global index row.
        write(RowMutation::new([0x40, 0]).set(b"c", 1, [9; 1000]));
        write(RowMutation::new([GLOBAL_INDEX_TAG, 0x20]).set(b"c", 1, [9; 1000]));
        let range = KeyRange::between([0x20], [0x40]);
        let expected: u64 = [
            2 + 1 + 10 + 8,
            2 + 1 + 10 + 8,
            2 + 1 + 10 + 8,
            1 + 2 * (1 + 100 + 8) + (1 + 8),
            REGISTRY_PREFIX.len() as u64 + 1 + 1 + 8,
        ]
        .iter()
        .sum();
        for page_rows in [1, 2, 100] {
            let mut pages = Vec::new();
            let bytes = range_bytes(&store, &range, page_rows, |b| {
                pages.push(b);
                std::ops::ControlFlow::Continue(())
            })
            .expect("read");
            assert_eq!(bytes, Some(expected), "pages of {page_rows}");
            assert_eq!(pages.iter().sum::<u64>(), expected);
        }
        let stopped = range_bytes(&store, &range, 1, |_| std::ops::ControlFlow::Break(()));
        assert_eq!(stopped.ok(), Some(None), "stopped after its first page");
    }
}
