//! The conformance suite every [`RowStore`] passes: the in-memory store in this crate's
//! tests and the RocksDB store in its crate's tests run exactly these cases.
//!
//! Use [`crate::rowstore_conformance_tests!`] with an expression that builds a fresh
//! [`Harness`]; it expands to one `#[test]` per case.

use std::collections::BTreeSet;

mod copy_cases;
pub use copy_cases::{
    a_copy_makes_the_span_exactly_the_sources_and_leaves_the_rest,
    a_synced_copy_survives_a_restart, clearing_a_span_removes_all_of_it_and_nothing_else,
    export_carries_every_version_and_tombstone, pages_are_bounded_by_bytes_and_still_copy_exactly,
};

use crate::ordered::KeyRange;
use crate::store::{RowRead, RowStore};
use crate::types::{
    Cell, Condition, Durability, LATEST, MutateOutcome, Row, RowMutation, ScanOptions,
};

/// A store under test that can be restarted.
pub trait Harness {
    /// The store type.
    type Store: RowStore;
    /// The store as it is now.
    fn store(&self) -> &Self::Store;
    /// Stops the store as a crash would and opens it again from what it made durable.
    fn restart(&mut self);
}

fn set(row: &[u8], column: &[u8], ts: u64, value: &[u8]) -> RowMutation {
    RowMutation::new(row).set(column, ts, value)
}

fn write<S: RowStore>(store: &S, m: RowMutation) {
    let outcome = store
        .mutate_row(&m, None, Durability::Buffered)
        .expect("write");
    assert_eq!(outcome, MutateOutcome::Applied);
}

fn value_at<S: RowRead>(store: &S, row: &[u8], column: &[u8], at: u64) -> Option<Vec<u8>> {
    store
        .read_cell(row, column, at)
        .expect("read")
        .map(|c| c.value)
}

fn keys(rows: &[Row]) -> Vec<Vec<u8>> {
    rows.iter().map(|r| r.key.clone()).collect()
}

fn scan_keys<S: RowRead>(
    store: &S,
    range: &KeyRange,
    at: u64,
    options: &ScanOptions,
) -> Vec<Vec<u8>> {
    keys(&store.scan(range, at, options).expect("scan"))
}

/// A row never written reads as absent, in point reads and scans.
pub fn missing_row_is_absent<H: Harness>(h: &mut H) {
    let store = h.store();
    assert_eq!(
        store.read_row(b"nope", &KeyRange::all(), LATEST).unwrap(),
        None
    );
    assert!(
        store
            .scan(&KeyRange::all(), LATEST, &ScanOptions::default())
            .unwrap()
            .is_empty()
    );
}

/// A read at `ts` sees the newest version at or below `ts`.
pub fn reads_see_the_newest_version_at_or_below_their_timestamp<H: Harness>(h: &mut H) {
    let store = h.store();
    write(store, set(b"r", b"c", 10, b"ten"));
    write(store, set(b"r", b"c", 20, b"twenty"));
    assert_eq!(value_at(store, b"r", b"c", 9), None);
    assert_eq!(
        value_at(store, b"r", b"c", 10).as_deref(),
        Some(&b"ten"[..])
    );
    assert_eq!(
        value_at(store, b"r", b"c", 19).as_deref(),
        Some(&b"ten"[..])
    );
    assert_eq!(
        value_at(store, b"r", b"c", LATEST).as_deref(),
        Some(&b"twenty"[..])
    );
    let cell = store.read_cell(b"r", b"c", 15).unwrap().unwrap();
    assert_eq!(
        cell,
        Cell {
            timestamp: 10,
            value: b"ten".to_vec()
        }
    );
}

/// Setting a version at an existing timestamp replaces it.
pub fn a_set_at_the_same_timestamp_replaces_the_version<H: Harness>(h: &mut H) {
    let store = h.store();
    write(store, set(b"r", b"c", 3, b"a"));
    write(store, set(b"r", b"c", 3, b"b"));
    assert_eq!(value_at(store, b"r", b"c", 3).as_deref(), Some(&b"b"[..]));
}

/// `DeleteColumn` hides the column from its timestamp on, not before.
pub fn delete_column_hides_from_its_timestamp_on<H: Harness>(h: &mut H) {
    let store = h.store();
    write(
        store,
        set(b"r", b"c", 1, b"v1").set(b"other".to_vec(), 1, b"x".to_vec()),
    );
    write(
        store,
        RowMutation::new(&b"r"[..]).delete_column(b"c".to_vec(), 5),
    );
    assert_eq!(value_at(store, b"r", b"c", 4).as_deref(), Some(&b"v1"[..]));
    assert_eq!(value_at(store, b"r", b"c", 5), None);
    assert_eq!(value_at(store, b"r", b"c", LATEST), None);
    // The row lives on through its other column.
    let row = store
        .read_row(b"r", &KeyRange::all(), LATEST)
        .unwrap()
        .unwrap();
    assert_eq!(
        row.cells.keys().cloned().collect::<Vec<_>>(),
        vec![b"other".to_vec()]
    );
    // A newer version shows again.
    write(store, set(b"r", b"c", 7, b"v7"));
    assert_eq!(
        value_at(store, b"r", b"c", LATEST).as_deref(),
        Some(&b"v7"[..])
    );
    assert_eq!(value_at(store, b"r", b"c", 6), None);
}

/// `DeleteCell` removes exactly one version; a row whose cells are all gone is absent.
pub fn delete_cell_removes_exactly_one_version<H: Harness>(h: &mut H) {
    let store = h.store();
    write(
        store,
        set(b"r", b"c", 1, b"one").set(b"c".to_vec(), 2, b"two".to_vec()),
    );
    write(
        store,
        RowMutation::new(&b"r"[..]).delete_cell(b"c".to_vec(), 2),
    );
    assert_eq!(
        value_at(store, b"r", b"c", LATEST).as_deref(),
        Some(&b"one"[..])
    );
    write(
        store,
        RowMutation::new(&b"r"[..]).delete_cell(b"c".to_vec(), 1),
    );
    assert_eq!(
        store.read_row(b"r", &KeyRange::all(), LATEST).unwrap(),
        None
    );
    // Deleting a version that does not exist is harmless.
    write(
        store,
        RowMutation::new(&b"r"[..]).delete_cell(b"c".to_vec(), 99),
    );
}

/// A range deletion removes every version (tombstones too) of every column in its
/// range, of its row only, in order with the mutations around it, and durably.
pub fn delete_columns_removes_every_version_in_the_range<H: Harness>(h: &mut H) {
    let columns = |row: &[u8], store: &H::Store| -> Vec<Vec<u8>> {
        store
            .export_rows(&KeyRange::single(row.to_vec()), 100)
            .expect("export")
            .into_iter()
            .flat_map(|r| r.versions.into_iter().map(|v| v.column))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    {
        let store = h.store();
        for column in [&b"a"[..], b"log:\x01", b"log:\x02", b"log:\x03", b"log;"] {
            write(
                store,
                set(b"r", column, 0, b"v").set(column.to_vec(), 5, b"w".to_vec()),
            );
            // A row whose key extends this one's, and the same columns there.
            write(store, set(b"r\0", column, 0, b"v"));
        }
        write(
            store,
            RowMutation::new(&b"r"[..]).delete_column(b"log:\x02".to_vec(), 9),
        );
        // The range, then a set inside it: the set, later in order, stays.
        store
            .mutate_row(
                &RowMutation::new(&b"r"[..])
                    .delete_columns(KeyRange::between(&b"log:\x01"[..], &b"log:\x03"[..]))
                    .set(b"log:\x02".to_vec(), 7, b"after".to_vec()),
                None,
                Durability::Synced,
            )
            .expect("write");
        // An empty range removes nothing.
        write(
            store,
            RowMutation::new(&b"r"[..]).delete_columns(KeyRange::between(&b"z"[..], &b"a"[..])),
        );
    }
    h.restart();
    let store = h.store();
    let names = |names: &[&[u8]]| names.iter().map(|n| n.to_vec()).collect::<Vec<_>>();
    assert_eq!(
        columns(b"r", store),
        names(&[b"a", b"log:\x02", b"log:\x03", b"log;"])
    );
    assert_eq!(
        value_at(store, b"r", b"log:\x02", LATEST).as_deref(),
        Some(&b"after"[..])
    );
    assert_eq!(value_at(store, b"r", b"log:\x02", 6), None);
    assert_eq!(
        columns(b"r\0", store),
        names(&[b"a", b"log:\x01", b"log:\x02", b"log:\x03", b"log;"])
    );
    // Up to the row's end: every column but the first goes, and the row with it once
    // the last is gone.
    write(
        store,
        RowMutation::new(&b"r"[..]).delete_columns(KeyRange {
            start: b"b".to_vec(),
            end: None,
        }),
    );
    assert_eq!(columns(b"r", store), names(&[b"a"]));
    write(
        store,
        RowMutation::new(&b"r"[..]).delete_columns(KeyRange::all()),
    );
    assert_eq!(
        store.read_row(b"r", &KeyRange::all(), LATEST).unwrap(),
        None
    );
    assert_eq!(columns(b"r\0", store).len(), 5);
}

/// Mutations of one row apply in order: the last one at a (column, timestamp) wins.
pub fn mutations_in_one_row_apply_in_order<H: Harness>(h: &mut H) {
    let store = h.store();
    write(
        store,
        set(b"r", b"c", 4, b"first").delete_column(b"c".to_vec(), 4),
    );
    assert_eq!(value_at(store, b"r", b"c", LATEST), None);
    write(
        store,
        RowMutation::new(&b"r"[..])
            .delete_column(b"d".to_vec(), 4)
            .set(b"d".to_vec(), 4, b"last".to_vec()),
    );
    assert_eq!(
        value_at(store, b"r", b"d", LATEST).as_deref(),
        Some(&b"last"[..])
    );
}

/// A batch that changes one row twice applies its mutations in order: the last one
/// at a (column, timestamp) wins (a log entry combining transactions writes a cell
/// once per transaction that sets it, at one timestamp).
pub fn a_batch_changing_a_row_twice_applies_in_order<H: Harness>(h: &mut H) {
    let store = h.store();
    let range = KeyRange::prefix(&b"eg1/"[..]);
    let batch = vec![
        set(b"eg1/r", b"c", 7, b"first"),
        set(b"eg1/r", b"d", 7, b"kept"),
        set(b"eg1/r", b"c", 7, b"second"),
        set(b"eg1/s", b"c", 7, b"gone"),
        RowMutation::new(&b"eg1/s"[..]).delete_column(b"c".to_vec(), 7),
    ];
    store
        .mutate_rows(&range, &batch, Durability::Synced)
        .unwrap();
    assert_eq!(
        value_at(store, b"eg1/r", b"c", LATEST).as_deref(),
        Some(&b"second"[..])
    );
    assert_eq!(
        value_at(store, b"eg1/r", b"d", LATEST).as_deref(),
        Some(&b"kept"[..])
    );
    assert_eq!(value_at(store, b"eg1/s", b"c", LATEST), None);
}

/// A batch's outcome is its mutations applied in the order given, whatever order
/// the store inserts them in: rows come unsorted, one row's mutations are split by
/// another's, a range deletion falls between writes of the columns it covers, and a
/// cell is deleted and then set again at one timestamp.
pub fn a_batch_applies_in_order_across_rows_and_range_deletions<H: Harness>(h: &mut H) {
    let store = h.store();
    let range = KeyRange::prefix(&b"eg1/"[..]);
    let batch = vec![
        set(b"eg1/t", b"c", 3, b"t"),
        set(b"eg1/r", b"log:2", 5, b"covered")
            .set(b"log:4".to_vec(), 5, b"outside".to_vec())
            .set(b"log:1".to_vec(), 5, b"covered"),
        set(b"eg1/q", b"c", 3, b"q"),
        RowMutation::new(&b"eg1/r"[..])
            .delete_columns(KeyRange::between(&b"log:1"[..], &b"log:3"[..]))
            .set(b"log:2".to_vec(), 6, b"after".to_vec()),
        RowMutation::new(&b"eg1/r"[..])
            .delete_cell(b"log:4".to_vec(), 5)
            .set(b"log:4".to_vec(), 5, b"again".to_vec()),
        RowMutation::new(&b"eg1/t"[..]).delete_column(b"c".to_vec(), 3),
    ];
    store
        .mutate_rows(&range, &batch, Durability::Synced)
        .unwrap();
    assert_eq!(value_at(store, b"eg1/r", b"log:1", LATEST), None);
    assert_eq!(value_at(store, b"eg1/r", b"log:2", 5), None);
    assert_eq!(
        value_at(store, b"eg1/r", b"log:2", LATEST).as_deref(),
        Some(&b"after"[..])
    );
    assert_eq!(
        value_at(store, b"eg1/r", b"log:4", LATEST).as_deref(),
        Some(&b"again"[..])
    );
    assert_eq!(
        value_at(store, b"eg1/q", b"c", LATEST).as_deref(),
        Some(&b"q"[..])
    );
    assert_eq!(value_at(store, b"eg1/t", b"c", LATEST), None);
}

/// A column range restricts a row read.
pub fn row_reads_honour_the_column_range<H: Harness>(h: &mut H) {
    let store = h.store();
    write(
        store,
        set(b"r", b"log:1", 0, b"a")
            .set(b"log:2".to_vec(), 0, b"b".to_vec())
            .set(b"meta".to_vec(), 0, b"m".to_vec())
            .set(b"lo".to_vec(), 0, b"x".to_vec()),
    );
    let row = store
        .read_row(b"r", &KeyRange::prefix(&b"log:"[..]), LATEST)
        .unwrap()
        .unwrap();
    let columns: Vec<_> = row.cells.keys().cloned().collect();
    assert_eq!(columns, vec![b"log:1".to_vec(), b"log:2".to_vec()]);
    assert_eq!(
        store
            .read_row(b"r", &KeyRange::prefix(&b"zzz"[..]), LATEST)
            .unwrap(),
        None
    );
}

/// Keys and columns with zero and 0xFF bytes, and keys that prefix each other, keep
/// plain byte order.
pub fn binary_keys_sort_in_byte_order<H: Harness>(h: &mut H) {
    let store = h.store();
    let rows: Vec<&[u8]> = vec![
        b"",
        b"\x00",
        b"\x00\x00",
        b"\x00\x01",
        b"a",
        b"a\x00",
        b"a\x00\xff",
        b"a\x01",
        b"ab",
        b"\xff",
        b"\xff\xff",
    ];
    for row in &rows {
        write(
            store,
            set(row, b"c\x00x", 1, row).set(b"c".to_vec(), 1, b"plain".to_vec()),
        );
    }
    let mut sorted: Vec<Vec<u8>> = rows.iter().map(|r| r.to_vec()).collect();
    sorted.sort();
    assert_eq!(
        scan_keys(store, &KeyRange::all(), LATEST, &ScanOptions::default()),
        sorted
    );
    let prefix_a = scan_keys(
        store,
        &KeyRange::prefix(&b"a"[..]),
        LATEST,
        &ScanOptions::default(),
    );
    assert_eq!(
        prefix_a,
        vec![
            b"a".to_vec(),
            b"a\x00".to_vec(),
            b"a\x00\xff".to_vec(),
            b"a\x01".to_vec(),
            b"ab".to_vec()
        ]
    );
    for row in &rows {
        assert_eq!(
            value_at(store, row, b"c\x00x", LATEST).as_deref(),
            Some(*row)
        );
        let read = store
            .read_row(row, &KeyRange::all(), LATEST)
            .unwrap()
            .unwrap();
        assert_eq!(
            read.cells.keys().cloned().collect::<Vec<_>>(),
            vec![b"c".to_vec(), b"c\x00x".to_vec()]
        );
    }
}

/// Scans return rows of the range in order, honour limit and reverse, and skip rows
/// with nothing visible at the read timestamp.
pub fn scans_honour_range_limit_reverse_and_timestamp<H: Harness>(h: &mut H) {
    let store = h.store();
    for (i, row) in [b"k1", b"k2", b"k3", b"k4", b"k5"].iter().enumerate() {
        write(store, set(*row, b"c", 10 + i as u64, b"v"));
    }
    write(store, set(b"j", b"c", 1, b"outside"));
    write(store, set(b"l", b"c", 1, b"outside"));
    let range = KeyRange::between(&b"k1"[..], &b"k5"[..]);
    let all = ScanOptions::default();
    assert_eq!(
        scan_keys(store, &range, LATEST, &all),
        vec![
            b"k1".to_vec(),
            b"k2".to_vec(),
            b"k3".to_vec(),
            b"k4".to_vec()
        ]
    );
    let limited = ScanOptions {
        limit: Some(2),
        ..ScanOptions::default()
    };
    assert_eq!(
        scan_keys(store, &range, LATEST, &limited),
        vec![b"k1".to_vec(), b"k2".to_vec()]
    );
    let reverse = ScanOptions {
        limit: Some(3),
        reverse: true,
        ..ScanOptions::default()
    };
    assert_eq!(
        scan_keys(store, &range, LATEST, &reverse),
        vec![b"k4".to_vec(), b"k3".to_vec(), b"k2".to_vec()]
    );
    // At timestamp 11 only k1 (ts 10) and k2 (ts 11) exist.
    assert_eq!(
        scan_keys(store, &range, 11, &all),
        vec![b"k1".to_vec(), b"k2".to_vec()]
    );
    let reverse_all = ScanOptions {
        reverse: true,
        ..ScanOptions::default()
    };
    assert_eq!(
        scan_keys(store, &range, 11, &reverse_all),
        vec![b"k2".to_vec(), b"k1".to_vec()]
    );
    // A deleted row disappears from scans at and after the deletion.
    write(
        store,
        RowMutation::new(&b"k2"[..]).delete_column(b"c".to_vec(), 20),
    );
    assert_eq!(
        scan_keys(store, &range, 25, &limited),
        vec![b"k1".to_vec(), b"k3".to_vec()]
    );
    assert_eq!(
        scan_keys(store, &range, 19, &limited),
        vec![b"k1".to_vec(), b"k2".to_vec()]
    );
    assert!(
        scan_keys(
            store,
            &KeyRange::between(&b"k5"[..], &b"k1"[..]),
            LATEST,
            &all
        )
        .is_empty()
    );
    assert!(
        scan_keys(
            store,
            &range,
            LATEST,
            &ScanOptions {
                limit: Some(0),
                ..ScanOptions::default()
            }
        )
        .is_empty()
    );
}

/// A reverse scan returns exactly the forward scan's rows, cells and versions, in
/// reverse order, at every timestamp — also for rows with many versions and deletions.
pub fn reverse_scans_mirror_forward_scans<H: Harness>(h: &mut H) {
    let store = h.store();
    for row in [&b"a"[..], b"b", b"c"] {
        let mut m = RowMutation::new(row);
        for ts in [2, 4, 6, 8] {
            m = m.set(b"x".to_vec(), ts, [row, &ts.to_be_bytes()[..]].concat());
        }
        m = m
            .set(b"y".to_vec(), 3, b"y3".to_vec())
            .delete_column(b"y".to_vec(), 5)
            .set(b"y".to_vec(), 7, b"y7".to_vec());
        write(store, m);
    }
    write(
        store,
        RowMutation::new(&b"b"[..]).delete_column(b"x".to_vec(), 5),
    );
    for at in 0..10 {
        let forward = store
            .scan(&KeyRange::all(), at, &ScanOptions::default())
            .unwrap();
        let mut reverse = store
            .scan(
                &KeyRange::all(),
                at,
                &ScanOptions {
                    reverse: true,
                    ..ScanOptions::default()
                },
            )
            .unwrap();
        reverse.reverse();
        assert_eq!(forward, reverse, "at {at}");
        if at >= 2 {
            let a = forward.iter().find(|r| r.key == b"a").unwrap();
            let newest_x = [2, 4, 6, 8]
                .into_iter()
                .filter(|ts| *ts <= at)
                .max()
                .unwrap();
            assert_eq!(a.cells[&b"x".to_vec()].timestamp, newest_x, "at {at}");
        }
    }
}

/// Reads pick the right version among many, in every column and row, in both
/// directions (stores may skip old versions; this checks they skip correctly).
pub fn reads_pick_the_right_version_among_many<H: Harness>(h: &mut H) {
    const VERSIONS: u64 = 40;
    let store = h.store();
    for row in [&b"r"[..], b"s"] {
        let mut m = RowMutation::new(row);
        for ts in 1..=VERSIONS {
            m = m.set(b"a".to_vec(), ts, ts.to_be_bytes().to_vec());
            // Column b is deleted at every tenth version.
            m = if ts % 10 == 0 {
                m.delete_column(b"b".to_vec(), ts)
            } else {
                m.set(b"b".to_vec(), ts, (ts * 100).to_be_bytes().to_vec())
            };
        }
        write(store, m.set(b"c".to_vec(), 5, b"c5".to_vec()));
    }
    for at in 0..=VERSIONS + 1 {
        for reverse in [false, true] {
            let rows = store
                .scan(
                    &KeyRange::all(),
                    at,
                    &ScanOptions {
                        reverse,
                        ..ScanOptions::default()
                    },
                )
                .unwrap();
            if at == 0 {
                assert!(rows.is_empty());
                continue;
            }
            assert_eq!(keys(&rows).len(), 2, "at {at}");
            let newest = at.min(VERSIONS);
            for row in &rows {
                assert_eq!(
                    row.cells[&b"a".to_vec()],
                    Cell {
                        timestamp: newest,
                        value: newest.to_be_bytes().to_vec()
                    },
                    "at {at}"
                );
                let b = row.cells.get(b"b".as_slice());
                if newest % 10 == 0 {
                    assert_eq!(b, None, "at {at}: b is deleted at {newest}");
                } else {
                    assert_eq!(
                        b.unwrap().value,
                        (newest * 100).to_be_bytes().to_vec(),
                        "at {at}"
                    );
                }
                assert_eq!(row.cells.contains_key(b"c".as_slice()), at >= 5, "at {at}");
            }
        }
        let only_b = KeyRange::single(&b"b"[..]);
        let row = store.read_row(b"s", &only_b, at).unwrap();
        assert_eq!(
            row.is_some(),
            at >= 1 && at.min(VERSIONS) % 10 != 0,
            "at {at}"
        );
    }
}

/// A scan's column range filters cells, and rows left with none are skipped, in both
/// directions.
pub fn scans_honour_the_column_range<H: Harness>(h: &mut H) {
    let store = h.store();
    write(
        store,
        set(b"a", b"x.1", 1, b"a1").set(b"y.1".to_vec(), 1, b"a2".to_vec()),
    );
    write(store, set(b"b", b"y.1", 1, b"b1"));
    write(
        store,
        set(b"c", b"x.2", 1, b"c1").set(b"z".to_vec(), 1, b"c2".to_vec()),
    );
    for reverse in [false, true] {
        let options = ScanOptions {
            columns: KeyRange::prefix(&b"x."[..]),
            limit: None,
            reverse,
        };
        let rows = store.scan(&KeyRange::all(), LATEST, &options).unwrap();
        let mut expected = vec![b"a".to_vec(), b"c".to_vec()];
        if reverse {
            expected.reverse();
        }
        assert_eq!(keys(&rows), expected);
        assert!(
            rows.iter()
                .all(|r| r.cells.keys().all(|c| c.starts_with(b"x.")))
        );
    }
}

/// A condition on an absent cell lets exactly the first writer in.
pub fn condition_on_absence_admits_the_first_writer_only<H: Harness>(h: &mut H) {
    let store = h.store();
    let cond = Condition {
        column: b"grant".to_vec(),
        expected: None,
    };
    let first = set(b"root", b"grant", 0, b"writer-1");
    let second = set(b"root", b"grant", 0, b"writer-2");
    assert_eq!(
        store
            .mutate_row(&first, Some(&cond), Durability::Synced)
            .unwrap(),
        MutateOutcome::Applied
    );
    let outcome = store
        .mutate_row(&second, Some(&cond), Durability::Synced)
        .unwrap();
    assert_eq!(
        outcome,
        MutateOutcome::ConditionFailed {
            current: Some(Cell {
                timestamp: 0,
                value: b"writer-1".to_vec()
            })
        }
    );
    assert_eq!(
        value_at(store, b"root", b"grant", LATEST).as_deref(),
        Some(&b"writer-1"[..])
    );
}

/// A condition on a value compares the newest version; a failed check writes nothing,
/// not even to other columns.
pub fn condition_on_a_value_checks_the_newest_version<H: Harness>(h: &mut H) {
    let store = h.store();
    write(
        store,
        set(b"r", b"v", 1, b"old").set(b"v".to_vec(), 2, b"new".to_vec()),
    );
    let stale = Condition {
        column: b"v".to_vec(),
        expected: Some(b"old".to_vec()),
    };
    let m = set(b"r", b"v", 3, b"x").set(b"other".to_vec(), 3, b"y".to_vec());
    let outcome = store
        .mutate_row(&m, Some(&stale), Durability::Buffered)
        .unwrap();
    assert!(matches!(
        outcome,
        MutateOutcome::ConditionFailed {
            current: Some(Cell { timestamp: 2, .. })
        }
    ));
    assert_eq!(value_at(store, b"r", b"other", LATEST), None);
    let fresh = Condition {
        column: b"v".to_vec(),
        expected: Some(b"new".to_vec()),
    };
    assert_eq!(
        store
            .mutate_row(&m, Some(&fresh), Durability::Buffered)
            .unwrap(),
        MutateOutcome::Applied
    );
    assert_eq!(
        value_at(store, b"r", b"other", LATEST).as_deref(),
        Some(&b"y"[..])
    );
}

/// A deleted cell counts as absent for a condition.
pub fn condition_treats_a_deleted_cell_as_absent<H: Harness>(h: &mut H) {
    let store = h.store();
    write(store, set(b"r", b"v", 1, b"x"));
    write(
        store,
        RowMutation::new(&b"r"[..]).delete_column(b"v".to_vec(), 2),
    );
    let absent = Condition {
        column: b"v".to_vec(),
        expected: None,
    };
    let m = set(b"r", b"v", 3, b"again");
    assert_eq!(
        store
            .mutate_row(&m, Some(&absent), Durability::Buffered)
            .unwrap(),
        MutateOutcome::Applied
    );
}

/// A batch within its range lands whole; a batch with a row outside it fails and
/// writes nothing.
pub fn batches_are_atomic_and_stay_in_their_range<H: Harness>(h: &mut H) {
    let store = h.store();
    let range = KeyRange::prefix(&b"eg1/"[..]);
    let batch = vec![
        set(b"eg1/root", b"applied", 0, b"7"),
        set(b"eg1/photo/1", b"Photo.url", 7, b"u1"),
        set(b"eg1/photo/2", b"Photo.url", 7, b"u2"),
    ];
    store
        .mutate_rows(&range, &batch, Durability::Synced)
        .unwrap();
    assert_eq!(
        scan_keys(store, &range, LATEST, &ScanOptions::default()).len(),
        3
    );

    let escaping = vec![
        set(b"eg1/photo/3", b"Photo.url", 8, b"u3"),
        set(b"eg2/root", b"applied", 0, b"1"),
    ];
    let err = store
        .mutate_rows(&range, &escaping, Durability::Synced)
        .unwrap_err();
    assert!(
        err.to_string().contains("eg2/root"),
        "error names the row: {err}"
    );
    assert_eq!(value_at(store, b"eg1/photo/3", b"Photo.url", LATEST), None);
    assert_eq!(value_at(store, b"eg2/root", b"applied", LATEST), None);
}

/// A snapshot sees neither later writes nor later deletions, in reads and scans, while
/// writes go on.
pub fn snapshots_never_see_later_writes<H: Harness>(h: &mut H) {
    let store = h.store();
    for i in 0..10u8 {
        write(store, set(&[b'r', i], b"c", 1, &[i]));
    }
    let snapshot = store.snapshot();
    let first_page = snapshot
        .scan(
            &KeyRange::prefix(&b"r"[..]),
            LATEST,
            &ScanOptions {
                limit: Some(5),
                ..ScanOptions::default()
            },
        )
        .unwrap();
    for i in 0..10u8 {
        write(store, set(&[b'r', i], b"c", 1, b"changed"));
        write(
            store,
            RowMutation::new(vec![b'r', i]).delete_column(b"d".to_vec(), 1),
        );
    }
    write(store, set(b"r\x05\x00", b"c", 1, b"inserted"));
    write(
        store,
        RowMutation::new(&b"r\x07"[..]).delete_column(b"c".to_vec(), 2),
    );
    let resume_after = first_page.last().unwrap().key.clone();
    let mut resume = resume_after.clone();
    resume.push(0);
    let second_page = snapshot
        .scan(
            &KeyRange {
                start: resume,
                end: Some(b"s".to_vec()),
            },
            LATEST,
            &ScanOptions::default(),
        )
        .unwrap();
    let all: Vec<Row> = first_page.into_iter().chain(second_page).collect();
    assert_eq!(all.len(), 10);
    for (i, row) in all.iter().enumerate() {
        assert_eq!(row.value(b"c"), Some(&[i as u8][..]));
    }
    assert_eq!(
        snapshot
            .read_cell(b"r\x07", b"c", LATEST)
            .unwrap()
            .unwrap()
            .value,
        vec![7]
    );
    assert_eq!(
        value_at(store, b"r\x01", b"c", LATEST).as_deref(),
        Some(&b"changed"[..])
    );
}

/// Synced writes, and buffered writes followed by `sync`, survive a restart.
pub fn synced_writes_survive_a_restart<H: Harness>(h: &mut H) {
    let range = KeyRange::prefix(&b"eg/"[..]);
    {
        let store = h.store();
        store
            .mutate_row(&set(b"a", b"c", 1, b"synced"), None, Durability::Synced)
            .unwrap();
        store
            .mutate_rows(
                &range,
                &[set(b"eg/1", b"c", 1, b"x"), set(b"eg/2", b"c", 1, b"y")],
                Durability::Synced,
            )
            .unwrap();
        store
            .mutate_row(
                &set(b"b", b"c", 1, b"buffered-then-synced"),
                None,
                Durability::Buffered,
            )
            .unwrap();
        store.sync().unwrap();
    }
    h.restart();
    let store = h.store();
    assert_eq!(
        value_at(store, b"a", b"c", LATEST).as_deref(),
        Some(&b"synced"[..])
    );
    assert_eq!(
        value_at(store, b"b", b"c", LATEST).as_deref(),
        Some(&b"buffered-then-synced"[..])
    );
    assert_eq!(
        scan_keys(store, &range, LATEST, &ScanOptions::default()).len(),
        2
    );
}

/// Garbage collection removes only what no read at or above the watermark can see.
pub fn garbage_collection_keeps_everything_visible_at_or_above_the_watermark<H: Harness>(
    h: &mut H,
) {
    let store = h.store();
    write(
        store,
        set(b"r", b"c", 1, b"v1")
            .set(b"c".to_vec(), 5, b"v5")
            .set(b"c".to_vec(), 9, b"v9"),
    );
    write(
        store,
        set(b"r", b"gone", 2, b"g").delete_column(b"gone".to_vec(), 4),
    );
    write(store, set(b"s", b"c", 1, b"outside the range"));
    write(store, set(b"s", b"c", 2, b"newer"));
    let before: Vec<_> = (6..12)
        .map(|ts| store.read_row(b"r", &KeyRange::all(), ts).unwrap())
        .collect();
    let stats = store
        .collect_garbage(&KeyRange::prefix(&b"r"[..]), 6)
        .unwrap();
    // c@1 (shadowed by c@5), and gone@4 (a tombstone anchor) with gone@2 beneath it.
    assert_eq!(stats.cells_removed, 3);
    let after: Vec<_> = (6..12)
        .map(|ts| store.read_row(b"r", &KeyRange::all(), ts).unwrap())
        .collect();
    assert_eq!(before, after);
    assert_eq!(value_at(store, b"r", b"c", 4), None, "c@1 was collected");
    assert_eq!(
        value_at(store, b"r", b"gone", 3),
        None,
        "gone@2 was collected"
    );
    assert_eq!(
        value_at(store, b"s", b"c", 1).as_deref(),
        Some(&b"outside the range"[..])
    );
    // Nothing more to collect at the same watermark.
    assert_eq!(
        store
            .collect_garbage(&KeyRange::prefix(&b"r"[..]), 6)
            .unwrap()
            .cells_removed,
        0
    );

    // A column with many versions above the watermark and several below, between
    // columns with none to collect: every version below the newest at or below it
    // goes, everything above stays.
    let history = RowMutation::new(&b"h"[..]).set(b"a".to_vec(), 3, b"a3".to_vec());
    let history = (1..=40).fold(history, |m, ts| {
        m.set(b"b".to_vec(), ts, format!("b{ts}").into_bytes())
    });
    write(store, history.set(b"c".to_vec(), 50, b"c50".to_vec()));
    let stats = store
        .collect_garbage(&KeyRange::prefix(&b"h"[..]), 30)
        .unwrap();
    assert_eq!(stats.cells_removed, 29, "b@1..=29");
    for ts in 30..=40 {
        assert_eq!(
            value_at(store, b"h", b"b", ts),
            Some(format!("b{ts}").into_bytes()),
            "b@{ts}"
        );
    }
    assert_eq!(value_at(store, b"h", b"b", 29), None);
    assert_eq!(value_at(store, b"h", b"a", 30).as_deref(), Some(&b"a3"[..]));
    assert_eq!(
        value_at(store, b"h", b"c", 60).as_deref(),
        Some(&b"c50"[..])
    );
}

/// Concurrent check-and-mutate on one cell is linearizable: every increment lands once.
pub fn concurrent_check_and_mutate_is_atomic<H: Harness>(h: &mut H) {
    const THREADS: u64 = 4;
    const INCREMENTS: u64 = 50;
    let store = h.store();
    store
        .mutate_row(
            &set(b"ctr", b"n", 0, &0u64.to_be_bytes()),
            None,
            Durability::Buffered,
        )
        .unwrap();
    let winners = std::sync::Mutex::new(BTreeSet::new());
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                let mut done = 0;
                while done < INCREMENTS {
                    let current = store
                        .read_cell(b"ctr", b"n", LATEST)
                        .unwrap()
                        .unwrap()
                        .value;
                    let n = u64::from_be_bytes(current.clone().try_into().unwrap());
                    let cond = Condition {
                        column: b"n".to_vec(),
                        expected: Some(current),
                    };
                    // Interleave an unconditional write to the same row.
                    let m = set(b"ctr", b"n", 0, &(n + 1).to_be_bytes()).set(
                        b"noise".to_vec(),
                        0,
                        b"x".to_vec(),
                    );
                    if store
                        .mutate_row(&m, Some(&cond), Durability::Buffered)
                        .unwrap()
                        == MutateOutcome::Applied
                    {
                        assert!(
                            winners.lock().unwrap().insert(n + 1),
                            "value {} won twice",
                            n + 1
                        );
                        done += 1;
                    }
                    store
                        .mutate_row(&set(b"ctr", b"noise", 0, b"y"), None, Durability::Buffered)
                        .unwrap();
                }
            });
        }
    });
    let last = store
        .read_cell(b"ctr", b"n", LATEST)
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(
        u64::from_be_bytes(last.try_into().unwrap()),
        THREADS * INCREMENTS
    );
}

/// Synced writes from many threads at once are all durable when they return.
pub fn concurrent_synced_writes_are_all_durable<H: Harness>(h: &mut H) {
    const THREADS: u8 = 4;
    const WRITES: u8 = 25;
    {
        let store = h.store();
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                scope.spawn(move || {
                    for i in 0..WRITES {
                        store
                            .mutate_row(&set(&[t, i], b"c", 1, &[t, i]), None, Durability::Synced)
                            .unwrap();
                    }
                });
            }
        });
    }
    h.restart();
    let rows = h
        .store()
        .scan(&KeyRange::all(), LATEST, &ScanOptions::default())
        .unwrap();
    assert_eq!(rows.len(), usize::from(THREADS) * usize::from(WRITES));
}

/// Expands to one `#[test]` per conformance case, each on a fresh harness built by
/// the given expression.
#[macro_export]
macro_rules! rowstore_conformance_tests {
    ($harness:expr) => {
        $crate::rowstore_conformance_tests!(@cases $harness;
            missing_row_is_absent,
            reads_see_the_newest_version_at_or_below_their_timestamp,
            a_set_at_the_same_timestamp_replaces_the_version,
            delete_column_hides_from_its_timestamp_on,
            delete_cell_removes_exactly_one_version,
            delete_columns_removes_every_version_in_the_range,
            mutations_in_one_row_apply_in_order,
            a_batch_changing_a_row_twice_applies_in_order,
            a_batch_applies_in_order_across_rows_and_range_deletions,
            row_reads_honour_the_column_range,
            binary_keys_sort_in_byte_order,
            scans_honour_range_limit_reverse_and_timestamp,
            reverse_scans_mirror_forward_scans,
            reads_pick_the_right_version_among_many,
            scans_honour_the_column_range,
            condition_on_absence_admits_the_first_writer_only,
            condition_on_a_value_checks_the_newest_version,
            condition_treats_a_deleted_cell_as_absent,
            batches_are_atomic_and_stay_in_their_range,
            snapshots_never_see_later_writes,
            synced_writes_survive_a_restart,
            garbage_collection_keeps_everything_visible_at_or_above_the_watermark,
            concurrent_check_and_mutate_is_atomic,
            concurrent_synced_writes_are_all_durable,
            export_carries_every_version_and_tombstone,
            a_copy_makes_the_span_exactly_the_sources_and_leaves_the_rest,
            a_synced_copy_survives_a_restart,
            clearing_a_span_removes_all_of_it_and_nothing_else,
            pages_are_bounded_by_bytes_and_still_copy_exactly,
        );
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let mut harness = $harness;
                $crate::conformance::$case(&mut harness);
            }
        )*
    };
}
