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
