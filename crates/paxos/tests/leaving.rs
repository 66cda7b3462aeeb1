//! A client whose local full replica is leaving the group's range (docs/protocol.md,
//! "Removing a full replica") nominates another replica to lead the group's next
//! position, and reads it at a majority instead of asking that replica's coordinator;
//! with the slot still in the range, it nominates and asks its local replica as before.

mod support;

use megastore_paxos::entry::CellWrite;
use megastore_paxos::{
    ClientOutput, DataQuery, Message, ReadMode, ReadSet, ReplicaRequest, RowWrite,
};
use megastore_placement::Placement;
use megastore_types::{ClientId, NodeId, Position, ReplicaId, Time, TxnId};

/// The local replica (the client is at site 1).
const LOCAL: ReplicaId = ReplicaId(1);

/// A commit's first accept names this next leader, and a current read first asks these
/// nodes, for a client placed by `placement`.
fn nominated_and_asked(placement: Placement) -> (Option<ReplicaId>, Vec<NodeId>) {
    let mut client = support::client_core(support::topology()).placed(placement);
    let writes = vec![RowWrite {
        row: [&support::eg().0[..], b"\x01k"].concat(),
        cells: vec![CellWrite::Set {
            column: b"v".to_vec(),
            value: b"x".to_vec(),
        }],
    }];
    let txn = TxnId {
        client: ClientId(1),
        seq: 1,
    };
    let (_, outputs) = client.commit(
        Time::ZERO,
        txn,
        support::eg(),
        Position(0),
        Some(ReplicaId(2)),
        writes,
        ReadSet::default(),
    );
    let nominated = outputs.iter().find_map(|o| match o {
        ClientOutput::Send {
            message: Message::ReplicaRequest(ReplicaRequest::Accept { entry, .. }),
            ..
        } => Some(entry.next_leader),
        _ => None,
    });
    let (_, outputs) = client.read(
        Time::ZERO,
        support::eg(),
        ReadMode::Current,
        DataQuery::Rows(vec![b"k".to_vec()]),
    );
    let asked = outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send { to, .. } => Some(*to),
            _ => None,
        })
        .collect();
    (nominated.expect("an accept"), asked)
}

#[test]
fn a_leaving_local_replica_is_neither_nominated_nor_asked_to_vouch() {
    let placement = Placement::one_server_per_replica(&support::topology());
    let (nominated, asked) = nominated_and_asked(placement.clone());
    assert_eq!(nominated, Some(LOCAL));
    assert_eq!(asked, [NodeId::Coordinator(LOCAL)], "its coordinator first");

    let leaving = placement.begin_removal(LOCAL, &[]).unwrap();
    let (nominated, asked) = nominated_and_asked(leaving);
    assert_eq!(nominated, Some(ReplicaId(2)), "the other full replica");
    assert!(
        !asked.contains(&NodeId::Coordinator(LOCAL)) && asked.len() > 1,
        "a majority, not the leaving replica's coordinator: {asked:?}"
    );
}
