//! A relay's own commits — a gateway's, for the public API's transactions — follow the
//! position leader while relays duel (docs/protocol.md, "Relayed commits", step 7).
//! Two sites' gateways writing one group race for every position, and the one beside
//! the leader wins each grant; without this, the other site's writers lost every
//! position of their span, attempt after attempt, for as long as the first site's
//! kept writing. Driven message by message against scripted replicas: positions
//! through [`CHOSEN_THROUGH`] hold another client's entries, naming replica 2 the next
//! leader.

mod support;

use std::time::Duration;

use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{
    Basis, ClientCore, ClientInput, ClientOutput, CommitResult, DataQuery, Message, OpId, OpResult,
    ReadSet, RelayRole, RelayedCommit, ReplicaReply, ReplicaRequest,
};
use megastore_types::{ClientId, NodeId, Position, ReplicaId, Time, TxnId};
use support::Driven;

/// Every position through here holds another client's entry, visible.
const CHOSEN_THROUGH: Position = Position(10);
/// The leader the chosen entries name: the other site's full replica.
const OTHER_LEADER: ReplicaId = ReplicaId(2);
/// The gateway's own full replica (site 1).
const LOCAL: ReplicaId = ReplicaId(1);

fn txn(client: u32, seq: u64) -> TxnId {
    TxnId {
        client: ClientId(client),
        seq,
    }
}

/// Scripted replicas: positions through [`CHOSEN_THROUGH`] answer with another
/// client's entry; later ones accept. A snapshot read finds `applied`.
fn answer(request: &ReplicaRequest, applied: Position) -> Option<ReplicaReply> {
    let id = request.id();
    match request {
        ReplicaRequest::Accept { position, .. } if *position <= CHOSEN_THROUGH => Some(
            support::chosen_by_another_client(id, *position, OTHER_LEADER),
        ),
        ReplicaRequest::Accept { .. } => Some(ReplicaReply::Accept {
            id,
            result: AcceptResult::Accepted,
        }),
        ReplicaRequest::MarkVisible { position, .. } => Some(ReplicaReply::MarkedVisible {
            id,
            applied: *position,
        }),
        ReplicaRequest::Read { .. } => Some(ReplicaReply::Data {
            id,
            at: Some(applied),
            rows: Vec::new(),
            pending: Vec::new(),
            next_leader: Some(LOCAL),
        }),
        _ => None,
    }
}

/// Carries `outputs` out against the scripted replicas, whose snapshot reads find
/// [`CHOSEN_THROUGH`], until operation `op` is done or a commit is relayed.
fn drive(client: &mut ClientCore, now: &mut Time, op: OpId, outputs: Vec<ClientOutput>) -> Driven {
    drive_from(client, now, op, outputs, CHOSEN_THROUGH)
}

/// [`drive`], with snapshot reads finding `applied`.
fn drive_from(
    client: &mut ClientCore,
    now: &mut Time,
    op: OpId,
    outputs: Vec<ClientOutput>,
    applied: Position,
) -> Driven {
    support::drive_scripted(client, now, op, outputs, |request| answer(request, applied))
}

/// Commits the gateway's own `txn` after a read at `read_position` that named `leader`.
fn commit(
    client: &mut ClientCore,
    now: &mut Time,
    txn: TxnId,
    read_position: u64,
    leader: ReplicaId,
) -> Driven {
    let (op, outputs) = client.commit(
        *now,
        txn,
        support::eg(),
        Position(read_position),
        Some(leader),
        support::row_writes(),
        ReadSet::default(),
    );
    drive(client, now, op, outputs)
}

fn committed(ended: &Driven) -> bool {
    matches!(
        ended,
        Driven::Done(OpResult::Commit {
            result: CommitResult::Committed { .. },
            ..
        })
    )
}

fn lost_its_span(ended: &Driven) -> bool {
    matches!(
        ended,
        Driven::Done(OpResult::Commit {
            result: CommitResult::Conflict { keys },
            ..
        }) if keys.is_empty()
    )
}

fn start(role: RelayRole) -> (ClientCore, Time) {
    let client = support::client_core_in_role(support::topology(), role);
    (client, Time::ZERO + Duration::from_secs(1))
}

/// A gateway's commit that lost every position of its span (3..=7) to the other
/// site's entries.
fn lose_a_span(client: &mut ClientCore, now: &mut Time) {
    let ended = commit(client, now, txn(1, 1), 2, OTHER_LEADER);
    assert!(lost_its_span(&ended), "{ended:?}");
}

#[test]
fn a_relay_whose_own_commit_lost_its_span_relays_its_next_to_the_leader_and_takes_its_answer() {
    let (mut client, mut now) = start(RelayRole::Relay);
    lose_a_span(&mut client, &mut now);
    let ended = commit(&mut client, &mut now, txn(1, 2), 10, OTHER_LEADER);
    let Driven::Relayed(to, id, relayed) = ended else {
        panic!("the next commit is relayed to the leader: {ended:?}");
    };
    assert_eq!(to, OTHER_LEADER);
    assert_eq!(relayed.txn, txn(1, 2), "under the gateway's own id");
    assert_eq!(relayed.read_position, Position(10));
    // The leader's relay answers: that is the commit's outcome.
    let result = CommitResult::Committed {
        position: Position(11),
        fast: true,
    };
    let outputs = client.step(
        now,
        ClientInput::Message {
            from: NodeId::Replica(OTHER_LEADER),
            message: Message::RelayOutcome {
                id,
                txn: txn(1, 2),
                result: result.clone(),
            },
        },
    );
    let reported = outputs.iter().find_map(|o| match o {
        ClientOutput::Done {
            result: OpResult::Commit { txn, result },
            ..
        } => Some((*txn, result.clone())),
        _ => None,
    });
    assert_eq!(reported, Some((txn(1, 2), result)));
    // Each answer keeps the group hot, and following.
    now = now + Duration::from_secs(3);
    let ended = commit(&mut client, &mut now, txn(1, 3), 11, OTHER_LEADER);
    assert!(
        matches!(ended, Driven::Relayed(OTHER_LEADER, ..)),
        "{ended:?}"
    );
}

#[test]
fn a_relay_follows_no_one_after_a_rebase_it_won_or_when_it_is_the_leader_itself() {
    // Lost two positions (9, 10), won the third: a race, not a duel.
    let (mut client, mut now) = start(RelayRole::Relay);
    let ended = commit(&mut client, &mut now, txn(1, 1), 8, OTHER_LEADER);
    assert!(committed(&ended), "{ended:?}");
    let ended = commit(&mut client, &mut now, txn(1, 2), 10, OTHER_LEADER);
    assert!(committed(&ended), "proposed itself: {ended:?}");

    // Lost a span, but its read names this relay's own replica the leader.
    let (mut client, mut now) = start(RelayRole::Relay);
    lose_a_span(&mut client, &mut now);
    let ended = commit(&mut client, &mut now, txn(1, 2), 10, LOCAL);
    assert!(
        committed(&ended),
        "its own lane is the local relay: {ended:?}"
    );

    // Following cools with the group.
    let (mut client, mut now) = start(RelayRole::Relay);
    lose_a_span(&mut client, &mut now);
    now = now + megastore_paxos::RELAY_HOT_FOR;
    let ended = commit(&mut client, &mut now, txn(1, 2), 10, OTHER_LEADER);
    assert!(committed(&ended), "cooled: {ended:?}");
}

#[test]
fn what_was_relayed_to_a_relay_is_never_relayed_again() {
    let (mut client, mut now) = start(RelayRole::Relay);
    lose_a_span(&mut client, &mut now);
    let (op, outputs) = client.commit_relayed(
        now,
        RelayedCommit {
            txn: txn(3, 1),
            eg: support::eg(),
            read_position: Position(10),
            leader: Some(OTHER_LEADER),
            writes: support::row_writes(),
            reads: ReadSet::default(),
        },
    );
    let ended = drive(&mut client, &mut now, op, outputs);
    assert!(
        committed(&ended),
        "a writer's relayed commit is committed here: {ended:?}"
    );
}

#[test]
fn a_client_that_commits_directly_never_relays_and_a_stale_basis_is_no_duel() {
    let (mut client, mut now) = start(RelayRole::Direct);
    lose_a_span(&mut client, &mut now);
    let ended = commit(&mut client, &mut now, txn(1, 2), 10, OTHER_LEADER);
    assert!(committed(&ended), "{ended:?}");

    // A relay's commit on a stale snapshot basis (its replica at 2) loses its span:
    // a replica left behind, not a duel.
    let (mut client, mut now) = start(RelayRole::Relay);
    let (op, _, outputs) = client.read_basis(now, support::eg(), DataQuery::Rows(Vec::new()));
    let basis = match drive_from(&mut client, &mut now, op, outputs, Position(2)) {
        Driven::Done(OpResult::Read(Ok(read))) => Basis::of_read(&read),
        other => panic!("the basis read ended {other:?}"),
    };
    assert_eq!(basis.read_position, Position(2));
    let ended = commit(&mut client, &mut now, txn(1, 1), 2, OTHER_LEADER);
    assert!(lost_its_span(&ended), "{ended:?}");
    let ended = commit(&mut client, &mut now, txn(1, 2), 10, OTHER_LEADER);
    assert!(committed(&ended), "{ended:?}");
}
