//! A blind write's basis is a snapshot read of the local full replica, without the
//! coordinator (docs/protocol.md, "A blind write's basis"). A stale one costs a rebase
//! over the entries chosen after it, and makes the group's next blind write read
//! current once; it does not make the group hot, as the same lost positions do after
//! a current read. Driven message by message against scripted replicas.

mod support;

use std::time::Duration;

use megastore_paxos::messages::{AcceptResult, ReadAt};
use megastore_paxos::{
    Basis, ClientCore, ClientOutput, CommitResult, DataQuery, OpId, OpResult, ReadMode, ReadSet,
    ReplicaReply, ReplicaRequest,
};
use megastore_types::{ClientId, NodeId, Position, ReplicaId, Time, TxnId};

/// The replicas have applied through here (and the local one answers a snapshot read
/// at its own `applied`).
const CHOSEN_THROUGH: Position = Position(4);

fn txn(client: u32, seq: u64) -> TxnId {
    TxnId {
        client: ClientId(client),
        seq,
    }
}

/// Scripted replicas: every position through [`CHOSEN_THROUGH`] holds another
/// client's entry, visible; later ones accept. The local replica (1) has applied
/// through `local_applied`.
fn answer(request: &ReplicaRequest, local_applied: Position) -> Option<ReplicaReply> {
    let id = request.id();
    match request {
        ReplicaRequest::Accept { position, .. } if *position <= CHOSEN_THROUGH => Some(
            support::chosen_by_another_client(id, *position, ReplicaId(1)),
        ),
        ReplicaRequest::Accept { .. } => Some(ReplicaReply::Accept {
            id,
            result: AcceptResult::Accepted,
        }),
        ReplicaRequest::MarkVisible { position, .. } => Some(ReplicaReply::MarkedVisible {
            id,
            applied: *position,
        }),
        ReplicaRequest::Read {
            at: ReadAt::Applied,
            ..
        } => Some(ReplicaReply::Data {
            id,
            at: Some(local_applied),
            rows: Vec::new(),
            pending: Vec::new(),
            next_leader: Some(ReplicaId(1)),
        }),
        _ => None,
    }
}

/// Carries `outputs` out against the scripted replicas until operation `op` is done;
/// `None` if the client relayed a commit instead.
fn drive(
    client: &mut ClientCore,
    now: &mut Time,
    op: OpId,
    outputs: Vec<ClientOutput>,
    local_applied: Position,
) -> Option<OpResult> {
    let answer = |request: &ReplicaRequest| answer(request, local_applied);
    match support::drive_scripted(client, now, op, outputs, answer) {
        support::Driven::Done(result) => Some(result),
        support::Driven::Relayed(..) => None,
    }
}

/// A blind write's basis as `read_basis` finds it, from a local replica applied
/// through `local_applied`; asserts it was a snapshot read of the local replica.
fn snapshot_basis(client: &mut ClientCore, now: &mut Time, local_applied: Position) -> Basis {
    let (op, mode, outputs) = client.read_basis(*now, support::eg(), DataQuery::Rows(Vec::new()));
    assert_eq!(
        mode,
        ReadMode::Snapshot,
        "a blind write's basis is a snapshot"
    );
    let asked: Vec<_> = outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send { to, .. } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(
        asked,
        vec![NodeId::Replica(ReplicaId(1))],
        "one request, to the local full replica, and none to a coordinator"
    );
    match drive(client, now, op, outputs, local_applied) {
        Some(OpResult::Read(Ok(read))) => Basis::of_read(&read),
        other => panic!("the basis read ended {other:?}"),
    }
}

/// Commits `txn` after `basis`; its result, or `None` if it was relayed.
fn commit(
    client: &mut ClientCore,
    now: &mut Time,
    txn: TxnId,
    basis: &Basis,
) -> Option<CommitResult> {
    let (op, outputs) = client.commit(
        *now,
        txn,
        support::eg(),
        basis.read_position,
        basis.leader,
        support::row_writes(),
        ReadSet::default(),
    );
    match drive(client, now, op, outputs, CHOSEN_THROUGH)? {
        OpResult::Commit { result, .. } => Some(result),
        other => panic!("a commit ended {other:?}"),
    }
}

fn start() -> (ClientCore, Time) {
    let client = support::client_core_relaying(support::topology(), true);
    (client, Time::ZERO + Duration::from_secs(1))
}

#[test]
fn a_stale_snapshot_basis_rebases_and_makes_the_next_basis_current_not_the_group_hot() {
    let (mut client, mut now) = start();
    let stale = snapshot_basis(&mut client, &mut now, Position(2));
    assert_eq!(stale.read_position, Position(2));
    let result = commit(&mut client, &mut now, txn(1, 1), &stale)
        .expect("a cold group's commit is proposed directly");
    assert!(
        matches!(
            result,
            CommitResult::Committed {
                position: Position(5),
                ..
            }
        ),
        "rebased over the two positions chosen after its basis: {result:?}"
    );
    let (_, mode, _) = client.read_basis(now, support::eg(), DataQuery::Rows(Vec::new()));
    assert_eq!(
        mode,
        ReadMode::Current,
        "after a stale basis: a current read, once"
    );
    let fresh = snapshot_basis(&mut client, &mut now, CHOSEN_THROUGH);
    assert!(
        commit(&mut client, &mut now, txn(1, 2), &fresh).is_some(),
        "the lost positions were a stale basis, not contention: the group is not hot"
    );
}

#[test]
fn the_same_lost_positions_after_a_read_that_was_not_a_snapshot_basis_make_the_group_hot() {
    let (mut client, mut now) = start();
    // The same position, as a current read or a lent basis would have found it.
    let read = Basis {
        read_position: Position(2),
        leader: Some(ReplicaId(1)),
        prepared: Vec::new(),
    };
    let result = commit(&mut client, &mut now, txn(1, 1), &read).expect("proposed directly");
    assert!(
        matches!(result, CommitResult::Committed { .. }),
        "{result:?}"
    );
    let (_, mode, _) = client.read_basis(now, support::eg(), DataQuery::Rows(Vec::new()));
    assert_eq!(mode, ReadMode::Snapshot, "hot: a snapshot at the relay");
    let next = Basis {
        read_position: Position(5),
        ..read
    };
    assert!(
        commit(&mut client, &mut now, txn(1, 2), &next).is_none(),
        "it lost positions to another client's entries: the group is hot, its commits relayed"
    );
}
