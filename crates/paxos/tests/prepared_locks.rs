//! *locks-known*: a replica follows which prepared records (two-phase commit's locks)
//! each of its groups holds, from its store at load and from every data write since,
//! and a read at a position looks for them only where some may be — while every read
//! still returns exactly the records pending at its position.

mod support;

use megastore_paxos::two_phase::{locks_column, record_row};
use megastore_paxos::{
    CellWrite, DataQuery, LogEntry, Prepared, ProtocolBugs, ReadAt, ReplicaReply, ReplicaRequest,
    RowWrite,
};
use megastore_types::{ClientId, Position, TxnId};
use support::{Node, accept, accept_result, ballot, eg, mark, with_visible_first_entry};

fn txn(seq: u64) -> TxnId {
    TxnId {
        client: ClientId(9),
        seq,
    }
}

/// The entry preparing `seq` in the test group (its record: the locks cell only).
fn prepare(seq: u64) -> LogEntry {
    let prepared = Prepared {
        txn: txn(seq),
        coordinator: megastore_types::EgId(b"g0".to_vec()),
        participants: vec![megastore_types::EgId(b"g0".to_vec()), eg()],
        prepared_ms: 0,
        writes: [[&eg().0[..], b"\x01k"].concat()].into(),
        read_rows: Default::default(),
        read_ranges: Vec::new(),
    };
    let write = megastore_paxos::two_phase::prepare_write(&eg(), &prepared, &[]).unwrap();
    LogEntry {
        txn: Some(txn(seq)),
        writes: vec![write],
        ..LogEntry::noop()
    }
}

/// The entry finishing `seq` as aborted: its record's removal.
fn finish(seq: u64) -> LogEntry {
    LogEntry {
        txn: Some(TxnId {
            client: ClientId(9),
            seq: 100 + seq,
        }),
        writes: vec![RowWrite {
            row: record_row(&eg(), txn(seq)),
            cells: vec![CellWrite::Delete {
                column: locks_column().start,
            }],
        }],
        ..LogEntry::noop()
    }
}

/// Chooses `entry` at `p` at `node` and marks it visible (so applied).
fn choose(node: &mut Node, p: u64, entry: LogEntry) {
    let accepted = accept_result(node.ask(accept(p, ballot(1), entry.clone(), false)));
    assert_eq!(
        accepted,
        megastore_paxos::messages::AcceptResult::Accepted,
        "{p}"
    );
    let marked = node.ask(mark(p, ballot(1), entry));
    assert!(
        matches!(marked, ReplicaReply::MarkedVisible { .. }),
        "{p}: {marked:?}"
    );
}

/// The transactions whose records a read at `p` returns as pending.
fn pending_at(node: &mut Node, p: u64) -> Vec<u64> {
    let reply = node.ask(ReplicaRequest::Read {
        id: 7,
        eg: eg(),
        at: ReadAt::Position(Position(p)),
        query: DataQuery::Rows(Vec::new()),
    });
    let ReplicaReply::Data { pending, .. } = reply else {
        panic!("{p}: {reply:?}");
    };
    pending
        .iter()
        .map(|row| {
            let seq = (1..10).find(|seq| record_row(&eg(), txn(*seq)) == row.key);
            seq.expect("a record of the test's transactions")
        })
        .collect()
}

fn looks_at(node: &Node, p: u64) -> bool {
    node.replica
        .group(&eg())
        .expect("loaded")
        .may_hold_locks_at(Position(p))
}

/// Positions: 1 a write, 2 prepares A, 3 prepares B, 4 finishes A, 5 finishes B.
fn two_overlapping_transactions(node: &mut Node) {
    with_visible_first_entry(node);
    choose(node, 2, prepare(1));
    choose(node, 3, prepare(2));
    choose(node, 4, finish(1));
}

#[test]
fn a_read_returns_the_records_pending_at_its_position_and_looks_only_where_some_may_be() {
    let mut node = Node::new(1);
    with_visible_first_entry(&mut node);
    assert!(!looks_at(&node, 1), "a new group holds no record");
    choose(&mut node, 2, prepare(1));
    choose(&mut node, 3, prepare(2));
    choose(&mut node, 4, finish(1));
    assert!(looks_at(&node, 4), "B is still pending");
    assert_eq!(pending_at(&mut node, 1), Vec::<u64>::new());
    assert_eq!(pending_at(&mut node, 2), vec![1]);
    assert_eq!(pending_at(&mut node, 3), vec![1, 2]);
    assert_eq!(pending_at(&mut node, 4), vec![2]);
    choose(&mut node, 5, finish(2));
    assert!(!looks_at(&node, 5), "none pending from the last finish on");
    assert!(looks_at(&node, 4), "below it, the history holds records");
    assert_eq!(pending_at(&mut node, 4), vec![2]);
    assert_eq!(pending_at(&mut node, 5), Vec::<u64>::new());
}

#[test]
fn a_restarted_replica_learns_the_records_its_store_holds() {
    let mut node = Node::new(1);
    two_overlapping_transactions(&mut node);
    node.restart();
    // The first request loads the group: B's record is read from the store.
    assert_eq!(pending_at(&mut node, 4), vec![2]);
    assert!(looks_at(&node, 4));
    choose(&mut node, 5, finish(2));
    assert_eq!(pending_at(&mut node, 5), Vec::<u64>::new());
    assert!(!looks_at(&node, 5));
    node.restart();
    assert_eq!(pending_at(&mut node, 5), Vec::<u64>::new());
    assert!(
        !looks_at(&node, 5),
        "loaded with none: none from its applied position"
    );
    assert!(
        looks_at(&node, 4),
        "older history is not known without a look"
    );
    assert_eq!(pending_at(&mut node, 3), vec![1, 2]);
}

#[test]
#[should_panic(expected = "locks-known")]
fn a_replica_that_frees_every_record_with_one_finish_is_caught_by_its_own_read() {
    let bugs = ProtocolBugs {
        finish_frees_every_lock: true,
        ..ProtocolBugs::NONE
    };
    let mut node = Node::with_bugs(1, bugs);
    two_overlapping_transactions(&mut node);
    pending_at(&mut node, 4);
}
