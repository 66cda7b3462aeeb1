//! A client resolving its commit at a position the group truncated long ago, driven
//! message by message: the answers that say so end it, however late they come, and
//! what a replica remembers of the position decides it.

mod support;

use std::time::Duration;

use megastore_paxos::messages::{AcceptResult, PrepareResult};
use megastore_paxos::{
    ChosenTxn, ClientCore, ClientInput, ClientOutput, Message, OpResult, ReplicaError,
    ReplicaReply, ReplicaRequest, Resolution,
};
use megastore_types::{
    ClientId, EgId, NodeId, Position, ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Time, Topology,
    TxnId,
};

fn client() -> ClientCore {
    let r = |id, kind| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(id),
    };
    let topology = Topology::new(vec![
        r(1, ReplicaKind::Full),
        r(2, ReplicaKind::Full),
        r(3, ReplicaKind::Witness),
    ])
    .unwrap();
    support::client_core(topology)
}

/// What each replica answers: 1 and 2 truncated the position (remembering `chosen`
/// there), 3 lost its store and is rejoining.
fn answer(to: ReplicaId, request: &ReplicaRequest, chosen: Option<ChosenTxn>) -> ReplicaReply {
    let id = request.id();
    if to == ReplicaId(3) {
        return ReplicaReply::Error {
            id,
            error: ReplicaError::Rejoining,
        };
    }
    match request {
        ReplicaRequest::Prepare { .. } => ReplicaReply::Prepare {
            id,
            result: PrepareResult::Truncated,
        },
        ReplicaRequest::Accept { .. } => ReplicaReply::Accept {
            id,
            result: AcceptResult::Truncated,
        },
        _ => ReplicaReply::Error {
            id,
            error: ReplicaError::Truncated {
                truncated: Position(40),
                chosen,
            },
        },
    }
}

const TXN: TxnId = TxnId {
    client: ClientId(1),
    seq: 3,
};

/// Resolves `TXN` at position 30 against replicas that truncated it (remembering
/// `chosen`); replicas 1 and 3 answer in 1 ms, replica 2 in 30 ms. Returns the
/// resolution and when (ms).
fn resolve_truncated(chosen: Option<ChosenTxn>) -> (Resolution, u64) {
    let mut client = client();
    let at = |ms: u64| Time::ZERO + Duration::from_millis(ms);
    let (op, mut outputs) = client.resolve(at(0), EgId(b"g".to_vec()), Position(30), TXN);
    let mut in_flight: Vec<(u64, ReplicaId, ReplicaReply)> = Vec::new();
    let mut wake: Option<Time> = None;
    let mut now = 0;
    while now < 60_000 {
        for output in outputs.drain(..) {
            match output {
                ClientOutput::Send {
                    to: NodeId::Replica(r),
                    message: Message::ReplicaRequest(request),
                } => {
                    let delay = if r == ReplicaId(2) { 30 } else { 1 };
                    in_flight.push((now + delay, r, answer(r, &request, chosen.clone())));
                }
                ClientOutput::Done {
                    op: done,
                    result: OpResult::Resolve(resolution),
                } => {
                    assert_eq!(done, op);
                    return (resolution, now);
                }
                ClientOutput::WakeAt(t) => wake = Some(wake.map_or(t, |w| w.min(t))),
                other => panic!("unexpected {other:?}"),
            }
        }
        now += 1;
        if let Some(i) = in_flight.iter().position(|(due, _, _)| *due <= now) {
            let (_, from, reply) = in_flight.remove(i);
            outputs = client.step(
                at(now),
                ClientInput::Message {
                    from: NodeId::Replica(from),
                    message: Message::ReplicaReply(reply),
                },
            );
        } else if wake.is_some_and(|w| w <= at(now)) {
            wake = None;
            outputs = client.step(at(now), ClientInput::Tick);
        }
    }
    panic!("still settling a position every voter truncated after 60 s");
}

#[test]
fn a_majority_that_truncated_the_position_ends_the_settle_even_when_one_answers_late() {
    let (resolution, took) = resolve_truncated(None);
    assert_eq!(resolution, Resolution::Undecided, "nobody remembers");
    // Replica 2's late answer to the first round settles it: no more rounds (each
    // backs off longer) once a majority said "truncated".
    assert!(took < 100, "settled only after {took} ms of rounds");
}

#[test]
fn a_position_truncated_long_ago_resolves_by_the_transaction_a_replica_remembers() {
    assert_eq!(
        resolve_truncated(Some(ChosenTxn::Txn(TXN))),
        (Resolution::Committed(Position(30)), 1),
        "the first answer decides"
    );
    let other = TxnId {
        client: ClientId(2),
        seq: 3,
    };
    // A combined entry commits each of its transactions.
    assert_eq!(
        resolve_truncated(Some(ChosenTxn::of([other, TXN]))).0,
        Resolution::Committed(Position(30)),
    );
    let another = TxnId {
        client: ClientId(2),
        seq: 4,
    };
    for chosen in [
        ChosenTxn::Txn(other),
        ChosenTxn::NoOp,
        ChosenTxn::of([other, another]),
    ] {
        assert_eq!(
            resolve_truncated(Some(chosen.clone())).0,
            Resolution::NotCommitted,
            "{chosen:?}"
        );
    }
}
