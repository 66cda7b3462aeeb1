//! A transaction's later reads (after its first fixed position p): each asks one
//! replica for the state at exactly p, goes on to the next replica when one has not
//! applied p yet, and fails naming the position when none keeps it. And a snapshot
//! read no replica serves fails saying why each did not.

mod support;

use megastore_paxos::{
    ClientCore, ClientInput, ClientOutput, DataQuery, Message, OpResult, ReadAt, ReadError,
    ReadMode, ReadPath, ReplicaError, ReplicaReply, ReplicaRequest,
};
use megastore_types::{EgId, NodeId, Position, ReplicaId, Time};

fn client() -> ClientCore {
    // Full replicas 1 and 2, witness 3, read-only 4, each at its own site.
    support::client_core(support::topology())
}

/// The reads in `outputs`: (replica asked, request id, what state).
fn reads(outputs: &[ClientOutput]) -> Vec<(ReplicaId, u64, ReadAt)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            ClientOutput::Send {
                to: NodeId::Replica(r),
                message: Message::ReplicaRequest(ReplicaRequest::Read { id, at, .. }),
            } => Some((*r, *id, *at)),
            _ => None,
        })
        .collect()
}

fn answer(core: &mut ClientCore, from: ReplicaId, reply: ReplicaReply) -> Vec<ClientOutput> {
    core.step(
        Time::ZERO,
        ClientInput::Message {
            from: NodeId::Replica(from),
            message: Message::ReplicaReply(reply),
        },
    )
}

fn read_result(
    outputs: &[ClientOutput],
) -> Option<&Result<megastore_paxos::ReadResult, ReadError>> {
    outputs.iter().find_map(|o| match o {
        ClientOutput::Done {
            result: OpResult::Read(result),
            ..
        } => Some(result),
        _ => None,
    })
}

#[test]
fn a_read_at_a_position_is_served_at_exactly_it_by_a_replica_that_applied_it() {
    let mut core = client();
    let p = Position(9);
    let eg = EgId(b"g".to_vec());
    let (_, out) = core.read(
        Time::ZERO,
        eg,
        ReadMode::AtPosition(p),
        DataQuery::Rows(vec![b"g\x01k".to_vec()]),
    );
    // The local full replica first, at exactly p.
    let asked = reads(&out);
    assert_eq!(asked, vec![(ReplicaId(1), asked[0].1, ReadAt::Position(p))]);
    // It has not applied p: the next candidate (never the witness) is asked.
    let out = answer(
        &mut core,
        ReplicaId(1),
        ReplicaReply::Error {
            id: asked[0].1,
            error: ReplicaError::NotApplied {
                applied: Position(8),
            },
        },
    );
    let next = reads(&out);
    assert_eq!(next, vec![(ReplicaId(2), next[0].1, ReadAt::Position(p))]);
    let out = answer(
        &mut core,
        ReplicaId(2),
        ReplicaReply::Data {
            id: next[0].1,
            at: Some(p),
            rows: Vec::new(),
            pending: Vec::new(),
            next_leader: None,
        },
    );
    let result = read_result(&out)
        .expect("the read is done")
        .clone()
        .unwrap();
    assert_eq!(
        (result.position, result.replica, result.path),
        (Some(p), ReplicaId(2), ReadPath::AtPosition)
    );
}

#[test]
fn a_read_at_a_position_no_replica_keeps_fails_naming_it() {
    let mut core = client();
    let p = Position(3);
    let (_, mut out) = core.read(
        Time::ZERO,
        EgId(b"g".to_vec()),
        ReadMode::AtPosition(p),
        DataQuery::Rows(Vec::new()),
    );
    let mut asked = Vec::new();
    // Every candidate, each a second time, says its history starts later.
    while let Some((replica, id, at)) = reads(&out).first().copied() {
        assert_eq!(at, ReadAt::Position(p));
        assert_ne!(replica, ReplicaId(3), "a witness serves no reads");
        asked.push(replica);
        out = answer(
            &mut core,
            replica,
            ReplicaReply::Error {
                id,
                error: ReplicaError::HistoryFrom {
                    installed: Position(50),
                },
            },
        );
    }
    assert_eq!(asked.len(), 6, "{asked:?}");
    match read_result(&out) {
        Some(Err(ReadError::Unavailable(why))) => {
            assert!(
                why.contains("position 3") && why.contains("history from 50"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_snapshot_read_no_replica_serves_fails_saying_why_each_did_not() {
    let mut core = client();
    let (_, out) = core.read(
        Time::ZERO,
        EgId(b"g".to_vec()),
        ReadMode::Snapshot,
        DataQuery::Rows(Vec::new()),
    );
    // The local full replica refuses; the other full one never answers (100 ms RPC
    // timeout); the read-only one refuses too.
    let (first, id, _) = reads(&out)[0];
    assert_eq!(first, ReplicaId(1));
    let refusal = |id| ReplicaReply::Error {
        id,
        error: ReplicaError::NotServing,
    };
    let out = answer(&mut core, first, refusal(id));
    let (second, _, _) = reads(&out)[0];
    assert_eq!(second, ReplicaId(2));
    let at = Time::ZERO + std::time::Duration::from_millis(150);
    let out = core.step(at, megastore_paxos::ClientInput::Tick);
    let (third, id, _) = reads(&out)[0];
    assert_eq!(third, ReplicaId(4));
    let reply = megastore_paxos::ClientInput::Message {
        from: NodeId::Replica(third),
        message: Message::ReplicaReply(refusal(id)),
    };
    let out = core.step(at, reply);
    match read_result(&out) {
        Some(Err(ReadError::Unavailable(why))) => assert_eq!(
            why,
            "no replica served the read (replica 1: this replica serves no reads; \
             replica 2: no answer within 100ms; replica 4: this replica serves no reads)"
        ),
        other => panic!("{other:?}"),
    }
}
