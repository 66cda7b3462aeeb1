//! A placed client reads the placement again when a replica server's refusal says its
//! own is behind (docs/protocol.md, "Placement", *routes-follow-refusals*): a
//! `WrongServer` naming a newer epoch of the range than the client knows, or a
//! `Frozen`. One read at a time, at most one per round of RPCs, and none for a
//! `WrongServer` at an epoch it already knows (the server is the one behind).

mod support;

use std::time::Duration;

use megastore_paxos::{ClientCore, ClientInput, Message, ReplicaError, ReplicaReply};
use megastore_placement::{Placement, RangeId, ServerId, Version};
use megastore_types::{NodeId, ReplicaId, Time};

/// One range, slot 2 on server 2; and after it, slot 2 moved to server 22.
fn placements() -> (Placement, Placement) {
    let first = Placement::initial(support::servers_22_beside_2(), &support::topology(), 1)
        .expect("a placement");
    let begun = first
        .begin_move(RangeId(0), ReplicaId(2), ServerId(22))
        .expect("a move");
    let id = begun.version();
    let moved = begun
        .record_frozen(RangeId(0), id)
        .and_then(|p| p.finish_move(RangeId(0), id))
        .expect("the move finishes");
    (first, moved)
}

/// Replica 2 answers request 5 with `error`; the placement reads the client sends.
fn refused(client: &mut ClientCore, now: Time, error: ReplicaError) -> Vec<(NodeId, u64)> {
    let outputs = client.step(
        now,
        ClientInput::Message {
            from: NodeId::Replica(ReplicaId(2)),
            message: Message::ReplicaReply(ReplicaReply::Error { id: 5, error }),
        },
    );
    support::placement_reads(&outputs)
}

fn answer(client: &mut ClientCore, now: Time, read: (NodeId, u64), stored: &Placement) {
    support::answer_placement_read(client, now, read, stored);
}

fn version(client: &ClientCore) -> Version {
    client.placement().expect("placed").version()
}

#[test]
fn a_refusal_naming_a_newer_epoch_makes_a_placed_client_read_the_placement_once() {
    let (first, moved) = placements();
    let newer = moved.range(RangeId(0)).expect("range 0").epoch;
    let mut client = support::client_core(support::topology()).placed(first.clone());
    let mut now = Time::ZERO + Duration::from_secs(1);

    // The server knows an epoch of range 0 no newer than the client's: it is behind.
    let behind = ReplicaError::WrongServer {
        range: RangeId(0),
        epoch: first.range(RangeId(0)).expect("range 0").epoch,
    };
    assert!(refused(&mut client, now, behind.clone()).is_empty());

    let wrong = ReplicaError::WrongServer {
        range: RangeId(0),
        epoch: newer,
    };
    let reads = refused(&mut client, now, wrong.clone());
    assert_eq!(reads.len(), 1, "one read of the placement");
    // One at a time: another refusal while it is under way reads nothing more.
    assert!(refused(&mut client, now, wrong.clone()).is_empty());
    now = now + Duration::from_millis(5);
    answer(&mut client, now, reads[0], &moved);
    assert_eq!(
        version(&client),
        moved.version(),
        "it routes by the newer one"
    );
    // Now it knows that epoch: the same refusal again is a server behind.
    now = now + Duration::from_secs(1);
    assert!(refused(&mut client, now, wrong).is_empty());
}

#[test]
fn a_frozen_range_makes_a_placed_client_read_the_placement_at_most_once_a_round() {
    let (first, _) = placements();
    let mut client = support::client_core(support::topology()).placed(first);
    let mut now = Time::ZERO + Duration::from_secs(1);
    let frozen = ReplicaError::Frozen {
        range: RangeId(0),
        move_id: Version(2),
    };
    let reads = refused(&mut client, now, frozen.clone());
    assert_eq!(reads.len(), 1);
    let unchanged = client.placement().expect("placed").clone();
    answer(&mut client, now, reads[0], &unchanged);
    // Within the same round of RPCs: not again.
    now = now + Duration::from_millis(1);
    assert!(refused(&mut client, now, frozen.clone()).is_empty());
    // A round later: again (the move may have ended).
    now = now + client.timeouts().rpc;
    assert_eq!(refused(&mut client, now, frozen).len(), 1);
}

#[test]
fn a_client_that_is_not_placed_reads_no_placement() {
    let mut client = support::client_core(support::topology());
    let now = Time::ZERO + Duration::from_secs(1);
    let wrong = ReplicaError::WrongServer {
        range: RangeId(0),
        epoch: Version(9),
    };
    assert!(refused(&mut client, now, wrong).is_empty());
}
