//! A proposer counts every majority over one voter set, the newest its placement shows
//! (docs/protocol.md, "Voter changes"): when a placement that removes a voter arrives
//! while its accept round is under way, that voter's acceptance no longer counts, or a
//! majority of the smaller set could be made up with it. With the
//! `count-votes-of-removed` knob it counts, and the writer acknowledges a value that a
//! single voter of the new set holds. (The simulator found this at seed 335.)

mod support;

use std::time::Duration;

use megastore_coordinator::CoordinatorRequest;
use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{
    ClientInput, ClientOutput, CommitResult, Message, OpResult, ProtocolBugs, ReadSet,
    ReplicaReply, ReplicaRequest,
};
use megastore_placement::Placement;
use megastore_types::{ClientId, NodeId, Position, ReplicaId, Time, TxnId};

const WITNESS: ReplicaId = ReplicaId(3);

fn accepted(id: u64) -> Message {
    Message::ReplicaReply(ReplicaReply::Accept {
        id,
        result: AcceptResult::Accepted,
    })
}

/// The accepts among `outputs`: (replica, request id).
fn accepts(outputs: &[ClientOutput]) -> Vec<(ReplicaId, u64)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send {
                to: NodeId::Replica(r),
                message: Message::ReplicaRequest(request @ ReplicaRequest::Accept { .. }),
            } => Some((*r, request.id())),
            _ => None,
        })
        .collect()
}

/// Whether `outputs` show the value chosen: write step 5 under way (an invalidation
/// of the coordinator of a full replica not known to hold it), visible marks, or the
/// commit acknowledged.
fn chosen(outputs: &[ClientOutput]) -> bool {
    outputs.iter().any(|o| {
        matches!(
            o,
            ClientOutput::Send {
                message: Message::CoordinatorRequest(CoordinatorRequest::Invalidate { .. })
                    | Message::ReplicaRequest(ReplicaRequest::MarkVisible { .. }),
                ..
            } | ClientOutput::Done {
                result: OpResult::Commit {
                    result: CommitResult::Committed { .. },
                    ..
                },
                ..
            }
        )
    })
}

/// Voters {1, 2, 3}. Replica 1 (the position leader) grants; the placement that
/// removes witness 3 arrives; then 3 accepts. Whether that made the commit chosen.
fn chosen_with_the_removed_voters_acceptance(bugs: ProtocolBugs) -> bool {
    let placement = Placement::initial(
        support::servers_0_and_1_at_site_1(),
        &support::topology(),
        1,
    )
    .expect("a placement");
    let range = placement.range_of(&support::eg().0).id;
    let removed = placement
        .remove_replica(WITNESS, &[range])
        .expect("a witness can be removed");
    let mut client = support::client_core_with(support::topology(), false, bugs).placed(placement);
    let mut now = Time::ZERO + Duration::from_secs(1);
    let txn = TxnId {
        client: ClientId(1),
        seq: 1,
    };
    let (_, outputs) = client.commit(
        now,
        txn,
        support::eg(),
        Position(0),
        Some(ReplicaId(1)),
        support::row_writes(),
        ReadSet::default(),
    );
    let grant = accepts(&outputs);
    assert_eq!(
        grant.len(),
        1,
        "the grant request to the leader first: {outputs:?}"
    );
    now = now + Duration::from_millis(1);
    let outputs = client.step(
        now,
        ClientInput::Message {
            from: NodeId::Replica(ReplicaId(1)),
            message: accepted(grant[0].1),
        },
    );
    let others = accepts(&outputs);
    let to_witness = others
        .iter()
        .find(|(r, _)| *r == WITNESS)
        .expect("the witness is asked while it is a voter")
        .1;
    assert!(!chosen(&outputs));
    now = now + Duration::from_millis(1);
    let outputs = client.step(now, ClientInput::Placement(removed));
    assert!(!chosen(&outputs), "the placement alone chooses nothing");
    now = now + Duration::from_millis(1);
    let mut outputs = client.step(
        now,
        ClientInput::Message {
            from: NodeId::Replica(WITNESS),
            message: accepted(to_witness),
        },
    );
    // Replica 2 never answers; within the round's timeout (100 ms), only a value
    // taken as chosen moves on (its invalidation waits a grace period first).
    for _ in 0..60 {
        now = now + Duration::from_millis(1);
        outputs.extend(client.step(now, ClientInput::Tick));
    }
    chosen(&outputs)
}

#[test]
fn an_acceptance_of_a_voter_the_placement_since_removed_does_not_count() {
    assert!(
        !chosen_with_the_removed_voters_acceptance(ProtocolBugs::NONE),
        "the leader alone is one of the two voters left: not a majority"
    );
    let knob = ProtocolBugs {
        count_votes_of_removed: true,
        ..ProtocolBugs::NONE
    };
    assert!(
        chosen_with_the_removed_voters_acceptance(knob),
        "with the knob, leader + removed witness make a 'majority' of neither set"
    );
}
