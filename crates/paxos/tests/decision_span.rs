//! A two-phase decision's commit span moves on with the group when it rebases
//! (docs/protocol.md, "The commit span"): a commit that writes its own transaction's
//! decision row and read it is not cut off five positions after its read, as long as
//! no entry chosen meanwhile conflicts with it. Any other commit still is. Driven
//! message by message against scripted replicas, through the proposer's rebase loop
//! (a commit proposed directly, not through a lane).

mod support;

use std::time::Duration;

use megastore_paxos::messages::AcceptResult;
use megastore_paxos::two_phase::decision_row;
use megastore_paxos::{
    CellWrite, ClientCore, CommitResult, OpResult, ReadSet, ReplicaReply, ReplicaRequest, RowWrite,
};
use megastore_types::{ClientId, Position, ReplicaId, Time, TxnId};

/// The transaction's read position: its span ends five positions later.
const READ_AT: Position = Position(2);
/// Every position through here holds another client's entry, visible: ten positions
/// past the read, twice the span.
const CHOSEN_THROUGH: Position = Position(12);

/// The decision's transaction (this client's).
fn decided_txn() -> TxnId {
    TxnId {
        client: ClientId(1),
        seq: 1,
    }
}

fn write_of(row: Vec<u8>) -> RowWrite {
    RowWrite {
        row,
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    }
}

/// What the other client's entry at `position` writes: an unrelated row, or at
/// `decision_at` the decision's own row (as an abort recording would).
fn winner_writes(position: Position, decision_at: Option<Position>) -> Vec<RowWrite> {
    match decision_at == Some(position) {
        true => vec![write_of(decision_row(&support::eg(), decided_txn()))],
        false => support::row_writes(),
    }
}

/// Scripted replicas: positions through [`CHOSEN_THROUGH`] hold another client's
/// entries; later ones accept.
fn answer(request: &ReplicaRequest, decision_at: Option<Position>) -> Option<ReplicaReply> {
    let id = request.id();
    match request {
        ReplicaRequest::Accept { position, .. } if *position <= CHOSEN_THROUGH => {
            Some(support::chosen_by_another_client_writing(
                id,
                *position,
                ReplicaId(1),
                winner_writes(*position, decision_at),
            ))
        }
        ReplicaRequest::Accept { .. } => Some(ReplicaReply::Accept {
            id,
            result: AcceptResult::Accepted,
        }),
        ReplicaRequest::MarkVisible { position, .. } => Some(ReplicaReply::MarkedVisible {
            id,
            applied: *position,
        }),
        _ => None,
    }
}

/// Commits `writes` after a read at [`READ_AT`] of `reads`, directly (not relayed).
fn commit(writes: Vec<RowWrite>, reads: ReadSet, decision_at: Option<Position>) -> CommitResult {
    let mut client: ClientCore = support::client_core_relaying(support::topology(), true);
    let mut now = Time::ZERO + Duration::from_secs(1);
    let (op, outputs) = client.commit(
        now,
        decided_txn(),
        support::eg(),
        READ_AT,
        Some(ReplicaId(1)),
        writes,
        reads,
    );
    let answer = |request: &ReplicaRequest| answer(request, decision_at);
    match support::drive_scripted(&mut client, &mut now, op, outputs, answer) {
        support::Driven::Done(OpResult::Commit { result, .. }) => result,
        other => panic!("a cold group's commit is proposed directly, and ends: {other:?}"),
    }
}

fn decision() -> (Vec<RowWrite>, ReadSet) {
    let row = decision_row(&support::eg(), decided_txn());
    let reads = ReadSet {
        rows: [row.clone()].into(),
        ..ReadSet::default()
    };
    (vec![write_of(row)], reads)
}

#[test]
fn a_decision_rebases_past_its_span_while_no_entry_chosen_meanwhile_conflicts() {
    let (writes, reads) = decision();
    let result = commit(writes, reads, None);
    assert!(
        matches!(
            result,
            CommitResult::Committed {
                position: Position(13),
                ..
            }
        ),
        "ten positions past its read, twice its span: {result:?}"
    );
}

#[test]
fn any_other_commit_ends_with_its_span() {
    // The same write without the read of its row, and the read of it without the
    // write: neither is a decision whose outcome is its row's.
    let (writes, reads) = decision();
    for (writes, reads) in [
        (writes.clone(), ReadSet::default()),
        (support::row_writes(), reads),
    ] {
        let result = commit(writes, reads, None);
        assert!(
            matches!(&result, CommitResult::Conflict { keys } if keys.is_empty()),
            "lost every position of its span (or its rebases): {result:?}"
        );
    }
}

#[test]
fn a_decision_conflicts_with_an_entry_that_wrote_its_row_past_its_span() {
    // The abort recording's entry, chosen at a position the unmoved span never reached.
    let (writes, reads) = decision();
    let row = decision_row(&support::eg(), decided_txn());
    let result = commit(writes, reads, Some(Position(10)));
    assert!(
        matches!(&result, CommitResult::Conflict { keys } if keys == &vec![row]),
        "the decision row's other writer landed first: {result:?}"
    );
}
