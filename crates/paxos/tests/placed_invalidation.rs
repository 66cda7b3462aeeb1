//! A placed writer's invalidation step follows the slot to its server
//! (docs/protocol.md, "Placement", *lapse-of-the-holder*): driven message by message
//! against scripted replicas, coordinators and lock service, a commit whose value is
//! chosen without full replica 2 must invalidate the coordinator of the server that
//! holds slot 2 *now*. The writer routes by a placement in which server 2 holds it,
//! but the slot has moved to server 22: server 2's coordinator is gone (its lock
//! lapsed) or fenced (it answers `NotServed`), and only a placement read after that
//! answer shows the move. A writer that counted the lapse without that read would
//! finish with server 22's coordinator — the one that vouches for the group now —
//! never told (knob `trust_unconfirmed_lapse`).

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest, coordinator_lock};
use megastore_lock::{
    LockCommand, LockFile, LockHolder, LockReply, LockResponse, Sequencer, SessionId,
};
use megastore_paxos::entry::CellWrite;
use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{
    ClientInput, ClientOutput, CommitResult, Message, OpResult, ProtocolBugs, ReadSet,
    ReplicaReply, ReplicaRequest, RowWrite,
};
use megastore_placement::{PLACEMENT_FILE, Placement, RangeId, ServerId};
use megastore_types::{ClientId, NodeId, Position, ReplicaId, Time, TxnId};

/// Replica 2's slot starts on server 2 and moves to server 22, both at site 2.
const FIRST: ServerId = ServerId(2);
const SECOND: ServerId = ServerId(22);

/// One range; slot 2 on server 2.
fn before_move() -> Placement {
    let placement = Placement::initial(support::servers_22_beside_2(), &support::topology(), 1)
        .expect("a valid placement");
    assert_eq!(holder(&placement), FIRST);
    placement
}

/// Slot 2 moved to server 22 (frozen, fenced and copied: finished).
fn after_move() -> Placement {
    let range = RangeId(0);
    let begun = before_move()
        .begin_move(range, ReplicaId(2), SECOND)
        .expect("a valid move");
    let move_id = begun.version();
    let moved = begun
        .record_frozen(range, move_id)
        .and_then(|p| p.finish_move(range, move_id))
        .expect("the move finishes");
    assert_eq!(holder(&moved), SECOND);
    moved
}

fn holder(placement: &Placement) -> ServerId {
    placement
        .range_of(&support::eg().0)
        .slot(ReplicaId(2))
        .expect("slot 2")
        .server
}

/// What server 2's coordinator does.
#[derive(Debug, Clone, Copy)]
enum FirstServer {
    /// Down, its lock lapsed.
    Gone,
    /// Up, fenced by the move: it answers every invalidate `NotServed`.
    Fenced,
}

/// What the scripted world saw.
#[derive(Debug, Default)]
struct Seen {
    /// The servers whose coordinator acknowledged an invalidate.
    acknowledged_by: BTreeSet<ServerId>,
    /// Placement reads the writer made.
    placement_reads: usize,
}

/// Commits one transaction as a client routing by `known`, while the stored placement
/// is `stored`; returns the result and what was seen.
fn commit(
    known: Placement,
    stored: &Placement,
    first: FirstServer,
    bugs: ProtocolBugs,
) -> (CommitResult, Seen) {
    let mut client =
        support::client_core_with(support::topology(), false, bugs).placed(known.clone());
    let mut now = Time::ZERO + Duration::from_secs(1);
    let txn = TxnId {
        client: ClientId(1),
        seq: 1,
    };
    let writes = vec![RowWrite {
        row: [&support::eg().0[..], b"\x01k"].concat(),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    }];
    let (op, mut outputs) = client.commit(
        now,
        txn,
        support::eg(),
        Position(0),
        Some(ReplicaId(1)),
        writes,
        ReadSet::default(),
    );
    let mut seen = Seen::default();
    for _ in 0..10_000 {
        let mut inputs = Vec::new();
        for output in outputs.drain(..) {
            match output {
                ClientOutput::Send {
                    to: NodeId::Replica(r),
                    message: Message::ReplicaRequest(request),
                } => inputs.extend(
                    replica_answer(r, &request)
                        .map(|reply| (NodeId::Replica(r), Message::ReplicaReply(reply))),
                ),
                ClientOutput::Send {
                    to: NodeId::Coordinator(r),
                    message: Message::CoordinatorRequest(CoordinatorRequest::Invalidate { id, .. }),
                } => {
                    // Routed as its host does: by the client's placement.
                    let server = client
                        .placement()
                        .map(holder)
                        .expect("the client is placed");
                    assert_eq!(r, ReplicaId(2), "only replica 2 lacks the value");
                    let reply = match (server, first) {
                        (FIRST, FirstServer::Gone) => None,
                        (FIRST, FirstServer::Fenced) => Some(CoordinatorReply::NotServed { id }),
                        _ => {
                            seen.acknowledged_by.insert(server);
                            Some(CoordinatorReply::Invalidated { id })
                        }
                    };
                    inputs.extend(
                        reply.map(|reply| {
                            (NodeId::Coordinator(r), Message::CoordinatorReply(reply))
                        }),
                    );
                }
                ClientOutput::Send {
                    to: to @ NodeId::LockNode(_),
                    message: Message::LockRequest(request),
                } => {
                    let result = match request.command {
                        LockCommand::Holder { lock } => {
                            let held = lock != coordinator_lock(FIRST)
                                || matches!(first, FirstServer::Fenced);
                            Ok(LockReply::Holder(held.then_some(LockHolder {
                                session: SessionId(9),
                                owner: lock,
                                sequencer: Sequencer(1),
                            })))
                        }
                        LockCommand::ReadFile { name } if name == PLACEMENT_FILE => {
                            seen.placement_reads += 1;
                            Ok(LockReply::File(Some(LockFile {
                                version: stored.version().0,
                                contents: stored.encode(),
                            })))
                        }
                        other => panic!("unexpected lock command {other:?}"),
                    };
                    inputs.push((
                        to,
                        Message::LockResponse(LockResponse {
                            id: request.id,
                            result,
                        }),
                    ));
                }
                ClientOutput::Done {
                    op: done,
                    result: OpResult::Commit { result, .. },
                } if done == op => return (result, seen),
                _ => {}
            }
        }
        now = now + Duration::from_millis(5);
        for (from, message) in inputs {
            outputs.extend(client.step(now, ClientInput::Message { from, message }));
        }
        outputs.extend(client.step(now, ClientInput::Tick));
    }
    panic!("the commit did not end");
}

/// Replicas 1 and 3 accept (a majority of the voters 1, 2, 3); replica 2 is silent, so
/// the value is chosen without it.
fn replica_answer(r: ReplicaId, request: &ReplicaRequest) -> Option<ReplicaReply> {
    if r == ReplicaId(2) {
        return None;
    }
    let id = request.id();
    match request {
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

fn committed(result: &CommitResult) -> bool {
    matches!(
        result,
        CommitResult::Committed {
            position: Position(1),
            ..
        }
    )
}

#[test]
fn a_lapsed_lock_counts_only_for_the_server_that_still_holds_the_slot() {
    let (result, seen) = commit(
        before_move(),
        &after_move(),
        FirstServer::Gone,
        ProtocolBugs::NONE,
    );
    assert!(committed(&result), "{result:?}");
    assert_eq!(
        seen.acknowledged_by,
        BTreeSet::from([SECOND]),
        "the slot's new server's coordinator was invalidated"
    );
    assert!(seen.placement_reads >= 1);
}

#[test]
fn a_coordinator_that_does_not_serve_the_group_sends_the_writer_to_the_one_that_does() {
    let (result, seen) = commit(
        before_move(),
        &after_move(),
        FirstServer::Fenced,
        ProtocolBugs::NONE,
    );
    assert!(committed(&result), "{result:?}");
    assert_eq!(seen.acknowledged_by, BTreeSet::from([SECOND]));
}

#[test]
fn a_lapsed_lock_of_the_slots_server_needs_no_other_invalidate() {
    // Nothing moved: the read confirms server 2, whose coordinator cannot vouch.
    let (result, seen) = commit(
        before_move(),
        &before_move(),
        FirstServer::Gone,
        ProtocolBugs::NONE,
    );
    assert!(committed(&result), "{result:?}");
    assert!(seen.acknowledged_by.is_empty());
    assert_eq!(seen.placement_reads, 1);
}

#[test]
fn the_knob_trust_unconfirmed_lapse_finishes_without_telling_the_new_server() {
    for first in [FirstServer::Gone, FirstServer::Fenced] {
        let (result, seen) = commit(
            before_move(),
            &after_move(),
            first,
            ProtocolBugs {
                trust_unconfirmed_lapse: true,
                ..ProtocolBugs::NONE
            },
        );
        assert!(committed(&result), "{result:?}");
        assert!(
            seen.acknowledged_by.is_empty(),
            "{first:?}: with the knob the writer never reaches server 22"
        );
    }
}
