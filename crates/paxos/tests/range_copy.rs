//! A range of groups copied to another server's store with `copy_range`, exactly as
//! stored: a replica core started over the copy answers every request about the
//! range's groups as the source does — promises, grants, log, marks, data and the
//! global index rows their mirrors name — so Paxos cannot tell the move from a slow
//! disk (docs/protocol.md, "Placement"), while the target's own groups stay its own, no
//! other group of the source comes along, and `retire_range` then leaves the source
//! nothing of the range.

mod support;

use megastore_paxos::entry::{CellWrite, mirror_row_of};
use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{
    GroupList, LogEntry, ReplicaReply, ReplicaRequest, RowWrite, copy_range, register_group,
    registered_in, retire_range,
};
use megastore_rowstore::{Durability, KeyRange, MemoryStore, RowMutation, RowStore};
use megastore_types::{EgId, Position};
use support::{Node, accept, accept_result, ballot, with_visible_first, write};

/// Groups each replica keeps in memory: bounded, so each keeps an open index.
const CACHE: usize = 8;

fn group(name: &str) -> EgId {
    EgId(name.as_bytes().to_vec())
}

/// An accept of `entry` (rewritten into group `eg`) at `p`.
fn accept_in(eg: &EgId, p: u64, round: u64, entry: LogEntry) -> ReplicaRequest {
    let mut entry = entry;
    for w in &mut entry.writes {
        w.row = [&eg.0[..], b"\x01k"].concat();
    }
    ReplicaRequest::Accept {
        id: 1,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(round),
        entry,
        grant: false,
        previous_visible: None,
        voters_at: megastore_placement::Version(0),
    }
}

/// The global index row the moved group's first entry writes through its mirror.
const GLOBAL: &[u8] = b"\xfd\x01by-name";
/// A global index row an older copy of the moved group at the target named, which the
/// source no longer does.
const STALE_GLOBAL: &[u8] = b"\xfd\x01stale";

fn mirror_write(eg: &EgId, global: &[u8], value: &[u8]) -> RowWrite {
    RowWrite {
        row: mirror_row_of(eg, global),
        cells: vec![CellWrite::Set {
            column: b"G".to_vec(),
            value: value.to_vec(),
        }],
    }
}

/// Every global index row, as a replica answers it.
fn scan_global() -> ReplicaRequest {
    ReplicaRequest::ScanGlobal {
        id: 6,
        range: megastore_paxos::global_index_range(),
        limit: None,
        reverse: false,
        server: None,
        routed_by: None,
    }
}

/// The questions asked of both servers, mutating ones included, in order.
fn questions(eg: &EgId) -> Vec<ReplicaRequest> {
    let log = |p| ReplicaRequest::ReadLog {
        id: 3,
        eg: eg.clone(),
        position: Position(p),
    };
    vec![
        ReplicaRequest::LogState {
            id: 3,
            eg: eg.clone(),
        },
        log(1),
        log(2),
        log(3),
        ReplicaRequest::Snapshot {
            id: 4,
            eg: eg.clone(),
        },
        scan_global(),
        // Below the promise at 2 (round 3) and at 3 (round 5): refused, naming them.
        accept_in(eg, 2, 2, write(7, None, "late")),
        ReplicaRequest::Prepare {
            id: 5,
            eg: eg.clone(),
            position: Position(3),
            ballot: ballot(4),
            voters_at: megastore_placement::Version(0),
        },
        // At the promise: accepted.
        accept_in(eg, 3, 5, write(8, Some(1), "three")),
        log(3),
        ReplicaRequest::LogState {
            id: 3,
            eg: eg.clone(),
        },
    ]
}

#[test]
fn a_server_started_over_a_copy_of_a_ranges_spans_answers_for_its_groups_as_the_source() {
    let moved = support::eg(); // "g1", in the range [g, h)
    let range = KeyRange::between(*b"g", *b"h");
    let stays = group("s1"); // the source's, outside the range
    let targets_own = group("a1"); // the target's own

    // The source: position 1 chosen and visible, 2 accepted at round 3 (work left:
    // listed open), a promise of round 5 at 3; and a group outside the range.
    let mut source = Node::cached_over(1, CACHE, MemoryStore::new());
    let mut first = write(1, Some(1), "one");
    first
        .writes
        .push(mirror_write(&moved, GLOBAL, b"g1's entry"));
    with_visible_first(&mut source, first);
    assert_eq!(
        accept_result(source.ask(accept(2, ballot(3), write(2, Some(1), "two"), false))),
        AcceptResult::Accepted
    );
    assert!(matches!(
        source.ask(ReplicaRequest::Prepare {
            id: 9,
            eg: moved.clone(),
            position: Position(3),
            ballot: ballot(5),
            voters_at: megastore_placement::Version(0),
        }),
        ReplicaReply::Prepare { .. }
    ));
    assert_eq!(
        accept_result(source.ask(accept_in(&stays, 1, 1, write(3, None, "stays")))),
        AcceptResult::Accepted
    );

    // The target holds a group of its own.
    let mut target = Node::cached_over(1, CACHE, MemoryStore::new());
    assert_eq!(
        accept_result(target.ask(accept_in(&targets_own, 1, 1, write(4, None, "own")))),
        AcceptResult::Accepted
    );

    // An older copy of the moved group at the target named a global row the source's
    // no longer does.
    let stale_mirror = mirror_write(&moved, STALE_GLOBAL, b"old");
    let stale = |row: &[u8]| RowMutation::new(row).set(b"G".to_vec(), 1, b"old".to_vec());
    for mutation in [
        register_group(&moved),
        stale(&stale_mirror.row),
        stale(STALE_GLOBAL),
    ] {
        target
            .store
            .mutate_row(&mutation, None, Durability::Synced)
            .unwrap();
    }

    // The move's copy, a page of one row at a time.
    let copied =
        copy_range(&source.store, &target.store, &range, 1, Durability::Synced).expect("copy");
    assert!(
        copied.removed >= 2,
        "the stale mirror and global row: {copied:?}"
    );
    // The target's server starts over the copy (a crash first: only synced state).
    let store = std::mem::replace(&mut target.store, MemoryStore::new());
    store.crash();
    let mut target = Node::cached_over(1, CACHE, store);

    let registered = |node: &Node| registered_in(&node.store, &KeyRange::all(), 10).unwrap();
    assert_eq!(
        registered(&target),
        vec![targets_own.clone(), moved.clone()]
    );
    let open = |node: &Node| {
        megastore_paxos::replica::list(&node.store, GroupList::Open, None, 10).unwrap()
    };
    assert_eq!(
        open(&source),
        vec![moved.clone(), stays.clone()],
        "work left in both"
    );
    assert_eq!(
        open(&target),
        vec![targets_own.clone(), moved.clone()],
        "the open index came along for the range's groups"
    );

    for question in questions(&moved) {
        let (at_source, at_target) = (source.ask(question.clone()), target.ask(question.clone()));
        assert_eq!(at_target, at_source, "{question:?}");
    }
    // Not copied: the source's group outside the range; kept: the target's own.
    let state = |node: &mut Node, eg: &EgId| {
        node.ask(ReplicaRequest::LogState {
            id: 3,
            eg: eg.clone(),
        })
    };
    assert_ne!(state(&mut target, &stays), state(&mut source, &stays));
    assert_ne!(
        state(&mut target, &targets_own),
        state(&mut source, &targets_own)
    );
    let globals = |node: &mut Node| match node.ask(scan_global()) {
        ReplicaReply::Data { rows, .. } => rows.into_iter().map(|r| r.key).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(globals(&mut target), vec![GLOBAL.to_vec()]);

    // The source retires the range: nothing of it is left, and everything else is.
    let removed = retire_range(&source.store, &range, 1, Durability::Synced).expect("retire");
    assert!(removed > 0);
    let store = std::mem::replace(&mut source.store, MemoryStore::new());
    let mut source = Node::cached_over(1, CACHE, store);
    assert_eq!(registered(&source), vec![stays.clone()]);
    assert!(globals(&mut source).is_empty());
    assert!(matches!(
        state(&mut source, &moved),
        ReplicaReply::LogState { state, .. } if state.highest == Position(0)
    ));
    assert!(matches!(
        state(&mut source, &stays),
        ReplicaReply::LogState { state, .. } if state.highest == Position(1)
    ));
}

/// A copy carried a page at a time, as between processes (the source exports each
/// page, the target applies it), while the source still takes writes: the copy holds
/// rows of several moments, and a second copy once the source stops changing makes the
/// target exactly the source over the range, and leaves the rest of the target alone.
#[test]
fn a_copy_a_page_at_a_time_while_the_source_changes_is_made_exact_by_a_second_copy() {
    use megastore_paxos::RangeCopy;
    use megastore_paxos::group_state_spans;
    use megastore_rowstore::{RowRead, export_page};

    let range = KeyRange::between(*b"g", *b"h");
    let row = |n: u32| format!("g{n:03}\x01k").into_bytes();
    let put = |store: &MemoryStore, key: &[u8], value: &str| {
        let mutation = RowMutation::new(key).set(b"v".to_vec(), 1, value.as_bytes().to_vec());
        store
            .mutate_row(&mutation, None, Durability::Synced)
            .unwrap();
    };
    let (source, target) = (MemoryStore::new(), MemoryStore::new());
    for n in 0..10 {
        put(&source, &row(n), "first");
    }
    put(&target, &row(50), "stale");
    put(&target, b"z-outside", "kept");

    let mut copy = RangeCopy::new(&target, &range).unwrap();
    let mut pages = 0;
    while let Some(span) = copy.next_span() {
        let page = export_page(&source, span, 3).unwrap();
        copy.apply(&target, &page, 3, Durability::Synced).unwrap();
        pages += 1;
        if pages == 2 {
            // The source changes behind the copy: a row already copied and one not yet.
            put(&source, &row(0), "second");
            put(&source, &row(9), "second");
        }
    }
    assert!(copy.is_done() && pages > 4, "{pages} pages");
    let value = |store: &MemoryStore, key: &[u8]| {
        store
            .read_cell(key, b"v", megastore_rowstore::LATEST)
            .unwrap()
            .map(|cell| String::from_utf8(cell.value).unwrap())
    };
    assert_eq!(
        value(&target, &row(0)).as_deref(),
        Some("first"),
        "copied before"
    );
    assert_eq!(
        value(&target, &row(9)).as_deref(),
        Some("second"),
        "copied after"
    );
    assert_eq!(value(&target, &row(50)), None, "the source has no such row");

    copy_range(&source, &target, &range, 3, Durability::Synced).unwrap();
    let state = |store: &MemoryStore| {
        group_state_spans(&range)
            .iter()
            .flat_map(|span| store.export_rows(span, usize::MAX).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(state(&target), state(&source));
    assert_eq!(value(&target, b"z-outside").as_deref(), Some("kept"));
}

/// Sets `row`'s cell `G` to `v` in `store`, synced.
fn set(store: &MemoryStore, row: &[u8]) {
    let mutation = RowMutation::new(row).set(b"G".to_vec(), 1, b"v".to_vec());
    store
        .mutate_row(&mutation, None, Durability::Synced)
        .unwrap();
}

/// Registers `eg` in `store`, synced.
fn register(store: &MemoryStore, eg: &EgId) {
    store
        .mutate_row(&register_group(eg), None, Durability::Synced)
        .unwrap();
}

/// A copy interrupted once the group's rows reached the target (its process died), then
/// begun again, still removes the global index row that only the target's older copy
/// of a mirror named: those rows are copied before the mirrors naming them are
/// replaced.
#[test]
fn a_copy_begun_again_still_removes_the_global_rows_an_older_copy_named() {
    use megastore_paxos::RangeCopy;
    use megastore_rowstore::{LATEST, RowRead, export_page};

    let eg = group("g1");
    let range = KeyRange::between(*b"g", *b"h");
    let (source, target) = (MemoryStore::new(), MemoryStore::new());
    for store in [&source, &target] {
        register(store, &eg);
    }
    set(&source, &[&eg.0[..], b"\x01k"].concat());
    let stale_mirror = mirror_write(&eg, STALE_GLOBAL, b"old");
    set(&target, &stale_mirror.row);
    set(&target, STALE_GLOBAL);

    // The first copy gets as far as replacing the group's rows, the stale mirror with
    // them, and dies.
    let mut first = RangeCopy::new(&target, &range).unwrap();
    let mirror_gone = |store: &MemoryStore| {
        store
            .read_cell(&stale_mirror.row, b"G", LATEST)
            .unwrap()
            .is_none()
    };
    while !mirror_gone(&target) {
        let span = first
            .next_span()
            .expect("the mirror's span is copied")
            .clone();
        let page = export_page(&source, &span, 1).unwrap();
        first.apply(&target, &page, 1, Durability::Synced).unwrap();
    }
    drop(first);

    let mut again = RangeCopy::new(&target, &range).unwrap();
    while let Some(span) = again.next_span() {
        let page = export_page(&source, span, 1).unwrap();
        again.apply(&target, &page, 1, Durability::Synced).unwrap();
    }
    assert!(
        target
            .read_cell(STALE_GLOBAL, b"G", LATEST)
            .unwrap()
            .is_none(),
        "the global row only the older copy named is gone"
    );
}

/// A copy whose source loses its store after the copy's first step (the global rows
/// the target's mirrors named, which the source had then) and answers the rest from an
/// empty one: the spans replace the mirrors that named those rows, so only the last
/// step can remove them — it copies the first step's rows again
/// (*copied-globals-resynced*). Else they would outlive the copy and every retirement,
/// which find global rows through the mirrors (simulator seed 8092).
#[test]
fn a_copy_whose_source_lost_its_store_midway_leaves_no_global_row_without_its_mirror() {
    use megastore_paxos::RangeCopy;
    use megastore_rowstore::{LATEST, RowRead, export_page};

    let eg = group("g1");
    let range = KeyRange::between(*b"g", *b"h");
    let (source, target) = (MemoryStore::new(), MemoryStore::new());
    // Both hold the group, its mirror and the global row the mirror names (the
    // target an older copy of them).
    let mirror = mirror_write(&eg, GLOBAL, b"v");
    for store in [&source, &target] {
        register(store, &eg);
        set(store, &[&eg.0[..], b"\x01k"].concat());
        set(store, &mirror.row);
        set(store, GLOBAL);
    }

    let mut copy = RangeCopy::new(&target, &range).unwrap();
    // The first step: the global row, from the source that still has it.
    let span = copy
        .next_span()
        .expect("the global row is copied first")
        .clone();
    assert_eq!(span, KeyRange::single(GLOBAL.to_vec()), "{span:?}");
    let page = export_page(&source, &span, 1).unwrap();
    copy.apply(&target, &page, 1, Durability::Synced).unwrap();
    // Then the source lost its store: the rest comes from an empty one.
    let wiped = MemoryStore::new();
    while let Some(span) = copy.next_span() {
        let page = export_page(&wiped, span, 1).unwrap();
        copy.apply(&target, &page, 1, Durability::Synced).unwrap();
    }
    assert!(
        target
            .read_cell(&mirror.row, b"G", LATEST)
            .unwrap()
            .is_none(),
        "the mirror is the wiped source's: none"
    );
    assert!(
        target.read_cell(GLOBAL, b"G", LATEST).unwrap().is_none(),
        "a global row no mirror names was left at the target"
    );
    // And a retirement leaves the target nothing of the range's global rows.
    retire_range(&target, &range, 1, Durability::Synced).unwrap();
    assert!(target.read_cell(GLOBAL, b"G", LATEST).unwrap().is_none());
}
