//! A client's settle of a position the group truncated long ago, driven message by
//! message: the answers that say so must end it, however late they come.

use std::time::Duration;

use megastore_paxos::messages::{AcceptResult, PrepareResult};
use megastore_paxos::{
    ClientConfig, ClientCore, ClientInput, ClientOutput, Message, OpResult, ProposerConfig,
    ProtocolBugs, ReplicaError, ReplicaReply, ReplicaRequest, Resolution, Timeouts,
};
use megastore_types::{
    ClientId, EgId, LockNodeId, NodeId, Position, ProposerId, ReplicaId, ReplicaInfo, ReplicaKind,
    SiteId, Time, Topology, TxnId,
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
    let ms = Duration::from_millis;
    ClientCore::new(ClientConfig {
        id: ClientId(1),
        site: SiteId(1),
        proposer: ProposerConfig {
            topology,
            proposer: ProposerId(1 << 32 | 1),
            lock_nodes: vec![LockNodeId(0)],
            timeouts: Timeouts {
                rpc: ms(100),
                leader: ms(50),
                invalidate: ms(100),
                backoff: ms(20),
                lock_attempt: ms(100),
                max_rounds: 10,
                invalidate_patience: ms(3000),
            },
            bugs: ProtocolBugs::default(),
        },
        seed: 7,
    })
}

/// What each replica answers: 1 and 2 truncated the position, 3 lost its store and is
/// rejoining.
fn answer(to: ReplicaId, request: &ReplicaRequest) -> ReplicaReply {
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
            },
        },
    }
}

#[test]
fn a_majority_that_truncated_the_position_ends_the_settle_even_when_one_answers_late() {
    let mut client = client();
    let at = |ms: u64| Time::ZERO + Duration::from_millis(ms);
    let txn = TxnId {
        client: ClientId(1),
        seq: 3,
    };
    let (op, mut outputs) = client.resolve(at(0), EgId(b"g".to_vec()), Position(30), txn);
    // Replicas 1 and 3 answer in 1 ms; replica 2 in 30 ms — after the round that asked
    // it has already given up on 1's and 3's refusals.
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
                    in_flight.push((now + delay, r, answer(r, &request)));
                }
                ClientOutput::Done { op: done, result } => {
                    assert_eq!(done, op);
                    assert_eq!(result, OpResult::Resolve(Resolution::Undecided));
                    // Replica 2's late answer to the first round settles it: no more
                    // rounds (each backs off longer) once a majority said "truncated".
                    assert!(now < 100, "settled only after {now} ms of rounds");
                    return;
                }
                ClientOutput::WakeAt(t) => wake = Some(wake.map_or(t, |w| w.min(t))),
                ClientOutput::Send { .. } => {}
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
