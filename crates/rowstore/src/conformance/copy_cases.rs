//! Conformance cases for exporting rows exactly as stored and copying a span of them
//! between stores ([`crate::copy_span`]). A copy needs two stores: the store under
//! test is the target of one copy and the source of another, the other side an
//! in-memory store.

use super::Harness;
use crate::copy::{CopyStats, PAGE_BYTES_TARGET, clear_span, copy_span, export_page};
use crate::memory::MemoryStore;
use crate::ordered::KeyRange;
use crate::store::{RowRead, RowStore};
use crate::types::{Durability, LATEST, RowMutation, ScanOptions, StoredRow, StoredVersion};

fn apply<S: RowStore + ?Sized>(store: &S, mutation: RowMutation) {
    store
        .mutate_row(&mutation, None, Durability::Buffered)
        .expect("write");
}

fn version(column: &[u8], timestamp: u64, value: Option<&[u8]>) -> StoredVersion {
    StoredVersion {
        column: column.to_vec(),
        timestamp,
        value: value.map(<[u8]>::to_vec),
    }
}

fn span(start: &[u8], end: &[u8]) -> KeyRange {
    KeyRange {
        start: start.to_vec(),
        end: Some(end.to_vec()),
    }
}

/// Writes the source's rows: versions, a tombstone, a row of tombstones only, and rows
/// outside the span `[b, e)`.
fn fill_source<S: RowStore + ?Sized>(store: &S) {
    apply(store, RowMutation::new(b"a").set(b"c", 1, b"outside"));
    apply(
        store,
        RowMutation::new(b"b")
            .set(b"c", 1, b"one")
            .set(b"c", 5, b"five")
            .delete_column(b"c", 7)
            .set(b"d", 3, b"three"),
    );
    apply(store, RowMutation::new(b"b\0").delete_column(b"x", 2));
    for n in 0..5u8 {
        apply(
            store,
            RowMutation::new([b'c', n]).set(b"v", u64::from(n), [n]),
        );
    }
    apply(store, RowMutation::new(b"e").set(b"c", 1, b"outside too"));
}

/// Writes what a target held before the copy: rows, versions and a tombstone the
/// source lacks, a version at a place the source also uses with another value, and
/// rows outside the span.
fn fill_stale_target<S: RowStore + ?Sized>(store: &S) {
    apply(store, RowMutation::new(b"a").set(b"c", 1, b"mine"));
    apply(
        store,
        RowMutation::new(b"b")
            .set(b"c", 5, b"other five")
            .set(b"c", 6, b"six")
            .set(b"z", 1, b"extra column"),
    );
    apply(
        store,
        RowMutation::new(b"bb").set(b"c", 1, b"not at the source"),
    );
    // More stale rows between two of the source's than any page holds.
    for n in 0..5u8 {
        apply(store, RowMutation::new([b'b', b'z', n]).set(b"s", 1, [n]));
    }
    apply(store, RowMutation::new([b'c', 4]).delete_column(b"v", 9));
    apply(
        store,
        RowMutation::new(b"d").set(b"c", 1, b"past the last row"),
    );
    apply(store, RowMutation::new(b"e").set(b"c", 1, b"mine too"));
}

/// Every row of `store` (all of it), exactly as stored.
fn everything<S: RowRead + ?Sized>(store: &S) -> Vec<StoredRow> {
    store
        .export_rows(&KeyRange::all(), usize::MAX)
        .expect("export")
}

/// Export returns every version, newest first per column, tombstones included, in
/// row order, at most `limit` rows and never part of one.
pub fn export_carries_every_version_and_tombstone<H: Harness>(h: &mut H) {
    let store = h.store();
    fill_source(store);
    let b = store
        .export_rows(&span(b"b", b"b\x01"), usize::MAX)
        .unwrap();
    assert_eq!(
        b,
        vec![
            StoredRow {
                key: b"b".to_vec(),
                versions: vec![
                    version(b"c", 7, None),
                    version(b"c", 5, Some(b"five")),
                    version(b"c", 1, Some(b"one")),
                    version(b"d", 3, Some(b"three")),
                ],
            },
            StoredRow {
                key: b"b\0".to_vec(),
                versions: vec![version(b"x", 2, None)],
            },
        ]
    );
    let two = store.export_rows(&span(b"b", b"e"), 2).unwrap();
    assert_eq!(two, b, "a limit counts rows");
    let all = everything(store);
    assert_eq!(all.len(), 9);
    assert!(all.windows(2).all(|w| w[0].key < w[1].key), "in row order");
    assert!(store.export_rows(&span(b"b", b"b"), 10).unwrap().is_empty());
    assert!(store.export_rows(&KeyRange::all(), 0).unwrap().is_empty());
    // A snapshot exports its moment.
    let snapshot = store.snapshot();
    apply(store, RowMutation::new(b"b").set(b"c", 9, b"nine"));
    assert_eq!(snapshot.export_rows(&span(b"b", b"b\x01"), 10).unwrap(), b);
}

/// A copy makes the target's rows in the span exactly the source's (every version,
/// every tombstone, no other row), page by page of any size, leaves the rows outside
/// the span alone, and copying again changes nothing.
pub fn a_copy_makes_the_span_exactly_the_sources_and_leaves_the_rest<H: Harness>(h: &mut H) {
    let the_span = span(b"b", b"e");
    let in_span = |rows: Vec<StoredRow>| -> Vec<StoredRow> {
        rows.into_iter()
            .filter(|r| the_span.contains(&r.key))
            .collect()
    };
    let outside = |rows: Vec<StoredRow>| -> Vec<StoredRow> {
        rows.into_iter()
            .filter(|r| !the_span.contains(&r.key))
            .collect()
    };
    for page_rows in [1, 2, 3, 100] {
        // Into the store under test, from memory.
        let source = MemoryStore::new();
        fill_source(&source);
        let target = h.store();
        let before: Vec<StoredRow> = everything(target);
        for row in &before {
            // Start each round from the stale target alone.
            let mut wipe = RowMutation::new(row.key.clone());
            for v in &row.versions {
                wipe = wipe.delete_cell(v.column.clone(), v.timestamp);
            }
            apply(target, wipe);
        }
        fill_stale_target(target);
        let stale_outside = outside(everything(target));
        let stats =
            copy_span(&source, target, &the_span, page_rows, Durability::Buffered).expect("copy");
        assert_eq!(
            in_span(everything(target)),
            in_span(everything(&source)),
            "pages of {page_rows}"
        );
        assert_eq!(
            outside(everything(target)),
            stale_outside,
            "outside the span: untouched"
        );
        assert_eq!(stats.rows, 7);
        assert!(stats.removed >= 5, "{stats:?}");
        // Reads agree at every timestamp.
        for at in [0, 1, 2, 4, 5, 6, 7, 9, LATEST] {
            let scan = |s: &dyn RowRead| s.scan(&the_span, at, &ScanOptions::default()).unwrap();
            assert_eq!(scan(target), scan(&source), "at {at}");
        }
        let again = copy_span(&source, target, &the_span, page_rows, Durability::Buffered)
            .expect("copy again");
        assert_eq!(
            again,
            CopyStats {
                rows: 7,
                written: 0,
                removed: 0
            }
        );

        // From the store under test, into memory, from a snapshot taken before more
        // writes: the copy is of the snapshot's moment.
        let copy = MemoryStore::new();
        fill_stale_target(&copy);
        let snapshot = target.snapshot();
        let at_snapshot = in_span(snapshot.export_rows(&KeyRange::all(), usize::MAX).unwrap());
        apply(
            target,
            RowMutation::new(b"c").set(b"late", 1, b"after the snapshot"),
        );
        copy_span(&snapshot, &copy, &the_span, page_rows, Durability::Buffered).expect("copy out");
        assert_eq!(in_span(everything(&copy)), at_snapshot);
        assert_eq!(
            copy.read_cell(b"e", b"c", LATEST).unwrap().unwrap().value,
            b"mine too"
        );
    }
}

/// A copy written synced survives a restart.
pub fn a_synced_copy_survives_a_restart<H: Harness>(h: &mut H) {
    let source = MemoryStore::new();
    fill_source(&source);
    fill_stale_target(h.store());
    h.store().sync().unwrap();
    copy_span(&source, h.store(), &KeyRange::all(), 2, Durability::Synced).expect("copy");
    h.restart();
    assert_eq!(everything(h.store()), everything(&source));
}

/// Clearing a span removes every version of every row in it, page by page, and
/// nothing outside it, durably when synced.
pub fn clearing_a_span_removes_all_of_it_and_nothing_else<H: Harness>(h: &mut H) {
    fill_source(h.store());
    let before = everything(h.store());
    let the_span = span(b"b", b"e");
    let removed = clear_span(h.store(), &the_span, 2, Durability::Synced).expect("clear");
    let in_span_versions: usize = before
        .iter()
        .filter(|r| the_span.contains(&r.key))
        .map(|r| r.versions.len())
        .sum();
    assert_eq!(removed, in_span_versions as u64);
    h.restart();
    let after = everything(h.store());
    let expected: Vec<StoredRow> = before
        .into_iter()
        .filter(|r| !the_span.contains(&r.key))
        .collect();
    assert_eq!(after, expected);
    assert_eq!(
        clear_span(h.store(), &the_span, 2, Durability::Synced).unwrap(),
        0
    );
}

/// A page takes no row past its first once it holds `PAGE_BYTES_TARGET` bytes (a row
/// larger than that goes alone), and a copy of such rows, page by page, is exact.
pub fn pages_are_bounded_by_bytes_and_still_copy_exactly<H: Harness>(h: &mut H) {
    let big = vec![7u8; 1_500_000];
    let store = h.store();
    for n in 0..6u8 {
        apply(
            store,
            RowMutation::new([b'r', n]).set(b"v", 1, big.as_slice()),
        );
    }
    // A row of five 1.5 MB versions: larger than a page on its own.
    let mut huge = RowMutation::new(b"s");
    for ts in 1..=5 {
        huge = huge.set(b"v", ts, big.as_slice());
    }
    apply(store, huge);
    let all = KeyRange::all();
    let first = export_page(store, &all, 100).expect("a page");
    let keys: Vec<Vec<u8>> = first.rows.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        [b"r\0".to_vec(), b"r\x01".to_vec(), b"r\x02".to_vec()]
    );
    assert_eq!(
        first.next,
        Some(b"r\x02\0".to_vec()),
        "it speaks for its rows only"
    );
    let bytes: usize = first
        .rows
        .iter()
        .map(|r| r.versions.len() * big.len())
        .sum();
    assert!(
        bytes < PAGE_BYTES_TARGET + big.len(),
        "{bytes} bytes in a page"
    );
    let from_s = KeyRange {
        start: b"s".to_vec(),
        end: None,
    };
    let alone = export_page(store, &from_s, 100).expect("a page");
    assert_eq!(alone.rows.len(), 1);
    assert_eq!(alone.rows[0].versions.len(), 5);
    assert_eq!(alone.next, None, "the last row: nothing follows");

    let copy = MemoryStore::new();
    let stats = copy_span(store, &copy, &all, 100, Durability::Buffered).expect("copy");
    assert_eq!(stats.rows, 7);
    assert_eq!(everything(&copy), everything(store));
}
