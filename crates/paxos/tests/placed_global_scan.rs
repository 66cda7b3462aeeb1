//! A placed client's global index scan asks every server holding the replica's slot
//! in some range, and merges (docs/protocol.md, "Global indexes",
//! *scan-asks-every-holder*): after a move, a server keeps the global index rows of
//! its own groups only.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use megastore_paxos::{
    ClientCore, ClientInput, ClientOutput, Message, OpResult, ReplicaError, ReplicaReply,
    ReplicaRequest,
};
use megastore_placement::{Placement, RangeId, ServerId};
use megastore_rowstore::{Cell, Row};
use megastore_types::{NodeId, ReplicaId, Time};

/// Two ranges (split at "m"); slot 2 of the second moved to server 22.
fn split_and_moved() -> Placement {
    let first = Placement::initial(support::servers_22_beside_2(), &support::topology(), 1)
        .expect("a placement")
        .split(RangeId(0), b"m")
        .expect("a split");
    let second = first.range_of(b"z").id;
    let begun = first
        .begin_move(second, ReplicaId(2), ServerId(22))
        .expect("a move");
    let id = begun.version();
    begun
        .record_frozen(second, id)
        .and_then(|p| p.finish_move(second, id))
        .expect("the move finishes")
}

fn row(key: &[u8]) -> Row {
    let mut cells = BTreeMap::new();
    cells.insert(
        b"c".to_vec(),
        Cell {
            timestamp: 1,
            value: Vec::new(),
        },
    );
    Row {
        key: key.to_vec(),
        cells,
    }
}

/// The global scans among `outputs`: (replica, server named, request id).
fn scans(outputs: &[ClientOutput]) -> BTreeSet<(ReplicaId, Option<ServerId>, u64)> {
    outputs
        .iter()
        .filter_map(|output| match output {
            ClientOutput::Send {
                to: NodeId::Replica(r),
                message: Message::ReplicaRequest(ReplicaRequest::ScanGlobal { id, server, .. }),
            } => Some((*r, *server, *id)),
            _ => None,
        })
        .collect()
}

fn answer(
    client: &mut ClientCore,
    now: Time,
    from: ReplicaId,
    reply: ReplicaReply,
) -> Vec<ClientOutput> {
    client.step(
        now,
        ClientInput::Message {
            from: NodeId::Replica(from),
            message: Message::ReplicaReply(reply),
        },
    )
}

fn data(id: u64, keys: &[&[u8]]) -> ReplicaReply {
    ReplicaReply::Data {
        id,
        at: None,
        rows: keys.iter().map(|k| row(k)).collect(),
        pending: Vec::new(),
        next_leader: None,
    }
}

fn scanned_keys(outputs: &[ClientOutput]) -> Option<Vec<Vec<u8>>> {
    outputs.iter().find_map(|output| match output {
        ClientOutput::Done {
            result: OpResult::Read(Ok(read)),
            ..
        } => Some(read.rows.iter().map(|r| r.key.clone()).collect()),
        _ => None,
    })
}

/// The request id sent to `server` among `sent`.
fn id_at(sent: &BTreeSet<(ReplicaId, Option<ServerId>, u64)>, server: u16) -> u64 {
    sent.iter()
        .find(|(_, s, _)| *s == Some(ServerId(server)))
        .map(|(_, _, id)| *id)
        .expect("a scan sent to the server")
}

#[test]
fn a_scan_asks_every_server_of_the_slot_and_merges_their_first_rows() {
    let mut client = support::client_core(support::topology()).placed(split_and_moved());
    let now = Time::ZERO + Duration::from_secs(1);
    let range = megastore_paxos::global_index_range();
    let (_, outputs) = client.scan_global(now, range, Some(3), false);

    // The local replica first: its slot is on one server in both ranges.
    let sent = scans(&outputs);
    assert_eq!(sent.len(), 1);
    let (replica, server, id) = *sent.first().expect("one scan");
    assert_eq!((replica, server), (ReplicaId(1), Some(ServerId(1))));

    // It refuses: replica 2 next, at both its servers.
    let refusal = ReplicaReply::Error {
        id,
        error: ReplicaError::NotServing,
    };
    let sent = scans(&answer(&mut client, now, ReplicaId(1), refusal));
    let servers: BTreeSet<_> = sent.iter().map(|(r, s, _)| (*r, *s)).collect();
    assert_eq!(
        servers,
        BTreeSet::from([
            (ReplicaId(2), Some(ServerId(2))),
            (ReplicaId(2), Some(ServerId(22))),
        ])
    );

    // One server's answer is not the scan's.
    let moved = answer(
        &mut client,
        now,
        ReplicaId(2),
        data(id_at(&sent, 22), &[b"b", b"d"]),
    );
    assert_eq!(
        scanned_keys(&moved),
        None,
        "answered before every server did"
    );

    // Both: merged in key order, the first three.
    let home = answer(
        &mut client,
        now,
        ReplicaId(2),
        data(id_at(&sent, 2), &[b"a", b"c", b"e"]),
    );
    assert_eq!(
        scanned_keys(&home),
        Some(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()])
    );
}

#[test]
fn a_server_that_does_not_answer_sends_the_scan_to_the_next_replica() {
    let mut client = support::client_core(support::topology()).placed(split_and_moved());
    let mut now = Time::ZERO + Duration::from_secs(1);
    let (_, outputs) = client.scan_global(now, megastore_paxos::global_index_range(), None, true);
    let (_, _, id) = *scans(&outputs).first().expect("one scan");
    let refusal = ReplicaReply::Error {
        id,
        error: ReplicaError::NotServing,
    };
    let sent = scans(&answer(&mut client, now, ReplicaId(1), refusal));
    answer(
        &mut client,
        now,
        ReplicaId(2),
        data(id_at(&sent, 2), &[b"a"]),
    );

    // Server 22 stays silent: after an RPC timeout, the read-only replica.
    now = now + client.timeouts().rpc;
    let outputs = client.step(now, ClientInput::Tick);
    let sent = scans(&outputs);
    let servers: Vec<_> = sent.iter().map(|(r, s, _)| (*r, *s)).collect();
    assert_eq!(servers, [(ReplicaId(4), Some(ServerId(4)))]);
    let (_, _, id) = *sent.first().expect("one scan");
    let done = answer(&mut client, now, ReplicaId(4), data(id, &[b"y", b"x"]));
    assert_eq!(
        scanned_keys(&done),
        Some(vec![b"y".to_vec(), b"x".to_vec()])
    );
}

#[test]
fn an_unplaced_client_asks_each_slots_first_server() {
    let mut client = support::client_core(support::topology());
    let now = Time::ZERO + Duration::from_secs(1);
    let (_, outputs) = client.scan_global(now, megastore_paxos::global_index_range(), None, false);
    let sent = scans(&outputs);
    let servers: Vec<_> = sent.iter().map(|(r, s, _)| (*r, *s)).collect();
    assert_eq!(servers, [(ReplicaId(1), None)]);
}

/// A server whose placement is newer than the scan's refuses; the scan reads the
/// placement and asks that replica's servers again, by the one it read.
#[test]
fn a_server_with_a_newer_placement_makes_the_scan_read_it_and_ask_again() {
    let unsplit = Placement::initial(support::servers_22_beside_2(), &support::topology(), 1)
        .expect("a placement");
    let newer = split_and_moved();
    // The client routes by the placement before the split and the move; replica 1,
    // its local one, is asked first and knows the newer one.
    let mut client = support::client_core(support::topology()).placed(unsplit.clone());
    let now = Time::ZERO + Duration::from_secs(1);
    let (_, outputs) = client.scan_global(now, megastore_paxos::global_index_range(), None, false);
    let (_, _, id) = *scans(&outputs).first().expect("one scan");
    let routed_by: Vec<_> = outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send {
                message: Message::ReplicaRequest(ReplicaRequest::ScanGlobal { routed_by, .. }),
                ..
            } => Some(*routed_by),
            _ => None,
        })
        .collect();
    assert_eq!(routed_by, [Some(unsplit.version())]);
    let refusal = ReplicaReply::Error {
        id,
        error: ReplicaError::PlacementNewer {
            version: newer.version(),
        },
    };
    let outputs = answer(&mut client, now, ReplicaId(1), refusal);
    assert!(scans(&outputs).is_empty(), "nothing asked before the read");
    let reads = support::placement_reads(&outputs);
    assert_eq!(reads.len(), 1, "the placement is read");
    let outputs = support::answer_placement_read(&mut client, now, reads[0], &newer);
    assert_eq!(
        client.placement().map(Placement::version),
        Some(newer.version())
    );
    // Replica 1 again (its slot is on server 1 in both ranges), routed by the newer.
    let again: Vec<_> = outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send {
                to: NodeId::Replica(r),
                message:
                    Message::ReplicaRequest(ReplicaRequest::ScanGlobal {
                        server, routed_by, ..
                    }),
            } => Some((*r, *server, *routed_by)),
            _ => None,
        })
        .collect();
    assert_eq!(
        again,
        [(ReplicaId(1), Some(ServerId(1)), Some(newer.version()))]
    );
}
