//! The driver holds a batch's writes and makes them one store write (invariant *reads
//! see the batch*, `paxos::replica::driver`): nothing reaches the store while steps
//! go on, and a read in the same batch sees every write before it.

mod support;

use megastore_paxos::messages::{DataQuery, ReadAt};
use megastore_paxos::{Batch, Message, ReplicaInput, ReplicaReply, ReplicaRequest, root_row};
use megastore_rowstore::{KeyRange, LATEST, RowRead};
use megastore_types::{Position, Time};
use support::*;

fn input(request: ReplicaRequest) -> ReplicaInput {
    ReplicaInput::Message {
        from: CLIENT,
        message: Message::ReplicaRequest(request),
    }
}

fn root_row_stored(node: &Node) -> bool {
    node.store
        .read_row(&root_row(&eg()), &KeyRange::all(), LATEST)
        .unwrap()
        .is_some()
}

#[test]
fn a_batch_writes_once_and_its_reads_see_its_writes() {
    let mut node = Node::new(1);
    let first = write(1, Some(1), "one");
    let mut batch = Batch::new();
    let read = ReplicaRequest::Read {
        id: 7,
        eg: eg(),
        at: ReadAt::Position(Position(1)),
        query: DataQuery::Rows(vec![row_writes()[0].row.clone()]),
    };
    for request in [
        accept(1, ballot(1), first.clone(), false),
        mark(1, ballot(1), first),
    ] {
        node.replica
            .step_into(Time::ZERO, input(request), &node.store, &mut batch)
            .unwrap();
        assert!(!root_row_stored(&node), "held, not written, between steps");
    }
    node.replica
        .step_into(Time::ZERO, input(read), &node.store, &mut batch)
        .unwrap();
    assert_eq!(
        node.store.unsynced_writes(),
        1,
        "the accept, the mark and the apply are one store write"
    );
    let released = batch.release(&node.store).unwrap();
    assert!(released.synced);
    let answer = released.sends.into_iter().find_map(|(to, m)| match m {
        Message::ReplicaReply(ReplicaReply::Data { id: 7, rows, .. }) if to == CLIENT => Some(rows),
        _ => None,
    });
    let rows = answer.expect("the read is answered");
    assert_eq!(rows.len(), 1, "the read saw the batch's apply: {rows:?}");
    assert_eq!(rows[0].cells[&b"v".to_vec()].value, b"one");
}

/// An entry of transaction `txn` writing about 1 MB: ten rows of 100,000-byte values.
fn large_entry(txn: u64) -> megastore_paxos::LogEntry {
    let mut entry = write(txn, Some(1), "");
    entry.writes = (0..10u8)
        .map(|i| megastore_paxos::RowWrite {
            row: [&eg().0[..], b"\x01k", &[i]].concat(),
            cells: vec![megastore_paxos::CellWrite::Set {
                column: b"v".to_vec(),
                value: vec![i; 100_000],
            }],
        })
        .collect();
    entry
}

#[test]
fn a_batch_of_large_entries_writes_them_before_its_end() {
    let mut node = Node::new(1);
    let mut batch = Batch::new();
    for p in 1..=6 {
        let request = accept(p, ballot(1), large_entry(p), false);
        node.replica
            .step_into(Time::ZERO, input(request), &node.store, &mut batch)
            .unwrap();
    }
    // About 6 MB accepted: what passed the bound was written, the rest is held.
    assert_eq!(
        node.store.unsynced_writes(),
        1,
        "a batch holds about 4 MiB at most"
    );
    let released = batch.release(&node.store).unwrap();
    assert!(released.synced);
    assert_eq!(released.sends.len(), 6);
}
