//! A writer that wins a position its leader refused to another client's transaction is
//! told so (`AcceptResult::GrantedContended`), and its core then relays its next commit
//! of the group like the loser's (docs/protocol.md, "Relayed commits", step 1): driven
//! message by message against scripted replicas, differing only in that one answer.

mod support;

use std::time::Duration;

use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{ClientCore, CommitResult, OpResult, ReadSet, ReplicaReply, ReplicaRequest};
use megastore_types::{ClientId, Position, ReplicaId, Time, TxnId};

fn client() -> ClientCore {
    support::client_core_relaying(support::topology(), true)
}

fn txn(seq: u64) -> TxnId {
    TxnId {
        client: ClientId(1),
        seq,
    }
}

/// What each replica answers: every accept is accepted, the position leader's grant
/// with `grant_answer`; marks apply.
fn answer(request: &ReplicaRequest, grant_answer: &AcceptResult) -> Option<ReplicaReply> {
    let id = request.id();
    match request {
        ReplicaRequest::Accept { grant, .. } => Some(ReplicaReply::Accept {
            id,
            result: if *grant {
                grant_answer.clone()
            } else {
                AcceptResult::Accepted
            },
        }),
        ReplicaRequest::MarkVisible { position, .. } => Some(ReplicaReply::MarkedVisible {
            id,
            applied: *position,
        }),
        _ => None,
    }
}

/// Commits transaction `seq` of the group at read position `seq - 1` (position leader
/// replica 1) against replicas answering at once, the grant with `grant_answer`;
/// returns its result, or `None` if it was sent to a relay rather than proposed.
fn commit(
    client: &mut ClientCore,
    now: &mut Time,
    seq: u64,
    grant_answer: &AcceptResult,
) -> Option<CommitResult> {
    let (op, outputs) = client.commit(
        *now,
        txn(seq),
        support::eg(),
        Position(seq - 1),
        Some(ReplicaId(1)),
        support::row_writes(),
        ReadSet::default(),
    );
    let answer = |request: &ReplicaRequest| answer(request, grant_answer);
    match support::drive_scripted(client, now, op, outputs, answer) {
        support::Driven::Done(OpResult::Commit { result, .. }) => Some(result),
        support::Driven::Done(other) => panic!("commit {seq} ended {other:?}"),
        support::Driven::Relayed(..) => None,
    }
}

/// Two commits in a row; whether the second was relayed.
fn second_commit_relayed(grant_answer: AcceptResult) -> bool {
    let mut client = client();
    let mut now = Time::ZERO + Duration::from_secs(1);
    let first = commit(&mut client, &mut now, 1, &grant_answer)
        .expect("a cold group's commit is proposed directly");
    assert!(
        matches!(
            first,
            CommitResult::Committed {
                position: Position(1),
                ..
            }
        ),
        "{first:?}"
    );
    commit(&mut client, &mut now, 2, &AcceptResult::Accepted).is_none()
}

#[test]
fn a_writer_granted_a_contended_position_relays_its_next_commit_of_the_group() {
    assert!(
        !second_commit_relayed(AcceptResult::Accepted),
        "an uncontended grant leaves the group cold"
    );
    assert!(
        second_commit_relayed(AcceptResult::GrantedContended),
        "a contended grant makes the group hot for the winner too"
    );
}
