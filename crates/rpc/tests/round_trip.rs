//! Every protocol value survives the wire unchanged, and malformed messages are
//! errors naming the field.

use std::collections::BTreeMap;

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_paxos::cells::SlotRecord;
use megastore_paxos::entry::{JoinedTxn, TwoPhaseRecord};
use megastore_paxos::messages::{
    AcceptResult, ChosenTxn, GrantRefusal, LogState, PrepareResult, ReplicaError,
};
use megastore_paxos::{
    CellWrite, CommitResult, DataQuery, LogEntry, Prepared, ReadAt, ReadSet, RelayedCommit,
    ReplicaReply, ReplicaRequest, RowWrite,
};
use megastore_rowstore::{Cell, KeyRange, Row};
use megastore_rpc::pb::{coordinator as cpb, replication as pb};
use megastore_rpc::{
    WireError, coordinator_reply_from_wire, coordinator_reply_to_wire, entry_from_wire,
    entry_to_wire, relayed_outcome_from_wire, relayed_outcome_to_wire,
};
use megastore_types::{Ballot, ClientId, EgId, Epoch, Position, ProposerId, ReplicaId, TxnId};
use proptest::prelude::*;

fn txn(seq: u64) -> TxnId {
    TxnId {
        client: ClientId(7),
        seq,
    }
}

fn eg() -> EgId {
    EgId(b"\x00\x01user\x00".to_vec())
}

fn ballot() -> Ballot {
    Ballot {
        round: 3,
        proposer: ProposerId(u64::MAX),
    }
}

fn entry() -> LogEntry {
    LogEntry {
        txn: Some(txn(9)),
        schema: 0xfeed,
        next_leader: Some(ReplicaId(u16::MAX)),
        writes: vec![RowWrite {
            row: b"row\x00\xff".to_vec(),
            cells: vec![
                CellWrite::Set {
                    column: b"T.p".to_vec(),
                    value: Vec::new(),
                },
                CellWrite::Delete {
                    column: b"T.q".to_vec(),
                },
            ],
        }],
        joined: vec![JoinedTxn {
            txn: txn(10),
            first_write: 1,
        }],
        two_phase: vec![
            TwoPhaseRecord::Prepared {
                txn: txn(1),
                coordinator: eg(),
                participants: vec![eg(), EgId(b"b".to_vec())],
            },
            TwoPhaseRecord::Decided {
                txn: txn(1),
                commit: true,
            },
        ],
    }
}

fn slot(visible: bool) -> SlotRecord {
    SlotRecord {
        ballot: ballot(),
        entry: entry(),
        visible,
    }
}

fn rows() -> Vec<Row> {
    vec![Row {
        key: b"k".to_vec(),
        cells: BTreeMap::from([(
            b"c".to_vec(),
            Cell {
                timestamp: 12,
                value: b"v".to_vec(),
            },
        )]),
    }]
}

fn requests() -> Vec<ReplicaRequest> {
    let (id, eg, position) = (u64::MAX, eg(), Position(41));
    vec![
        ReplicaRequest::Prepare {
            id,
            eg: eg.clone(),
            position,
            ballot: ballot(),
            voters_at: megastore_placement::Version(7),
        },
        ReplicaRequest::Accept {
            id,
            eg: eg.clone(),
            position,
            ballot: Ballot::ZERO,
            entry: entry(),
            grant: true,
            previous_visible: Some(ballot()),
            voters_at: megastore_placement::Version(0),
        },
        ReplicaRequest::Accept {
            id,
            eg: eg.clone(),
            position,
            ballot: ballot(),
            entry: LogEntry::noop(),
            grant: false,
            previous_visible: None,
            voters_at: megastore_placement::Version(0),
        },
        ReplicaRequest::MarkVisible {
            id,
            eg: eg.clone(),
            position,
            ballot: ballot(),
            entry: entry(),
        },
        ReplicaRequest::LogState { id, eg: eg.clone() },
        ReplicaRequest::ReadLog {
            id,
            eg: eg.clone(),
            position,
        },
        ReplicaRequest::AwaitVisible {
            id,
            eg: eg.clone(),
            past: position,
            wait: std::time::Duration::from_millis(750),
        },
        ReplicaRequest::Read {
            id,
            eg: eg.clone(),
            at: ReadAt::Position(position),
            query: DataQuery::Rows(vec![b"a".to_vec(), Vec::new()]),
        },
        ReplicaRequest::Read {
            id,
            eg: eg.clone(),
            at: ReadAt::Applied,
            query: DataQuery::Scan {
                range: KeyRange::prefix(b"p".to_vec()),
                limit: Some(10),
                reverse: true,
            },
        },
        ReplicaRequest::Read {
            id,
            eg: eg.clone(),
            at: ReadAt::Settled,
            query: DataQuery::Rows(Vec::new()),
        },
        ReplicaRequest::Read {
            id,
            eg: eg.clone(),
            at: ReadAt::Latest,
            query: DataQuery::Scan {
                range: KeyRange::all(),
                limit: None,
                reverse: false,
            },
        },
        ReplicaRequest::Snapshot { id, eg },
        ReplicaRequest::ScanGlobal {
            id,
            range: megastore_paxos::global_index_range(),
            limit: Some(10),
            reverse: true,
            server: Some(megastore_placement::ServerId(11)),
            routed_by: Some(megastore_placement::Version(7)),
        },
        ReplicaRequest::ScanGlobal {
            id,
            range: megastore_paxos::global_index_range(),
            limit: None,
            reverse: false,
            server: None,
            routed_by: None,
        },
        ReplicaRequest::ListGroups {
            id,
            after: Some(EgId(b"g\x00".to_vec())),
            limit: 256,
            server: Some(megastore_placement::ServerId(12)),
        },
        ReplicaRequest::ListGroups {
            id,
            after: None,
            limit: 1,
            server: None,
        },
    ]
}

fn replies() -> Vec<ReplicaReply> {
    let id = 3;
    let mut replies = vec![
        ReplicaReply::MarkedVisible {
            id,
            applied: Position(5),
        },
        ReplicaReply::LogState {
            id,
            state: LogState {
                highest: Position(9),
                visible: Position(8),
                applied: Position(7),
                truncated: Position(2),
                next_leader: Some(ReplicaId(2)),
            },
        },
        ReplicaReply::LogState {
            id,
            state: LogState::default(),
        },
        ReplicaReply::Log {
            id,
            slot: Some(slot(true)),
        },
        ReplicaReply::Log { id, slot: None },
        ReplicaReply::Data {
            id,
            at: Some(Position(4)),
            rows: rows(),
            pending: rows(),
            next_leader: Some(ReplicaId(2)),
        },
        ReplicaReply::Data {
            id,
            at: None,
            rows: Vec::new(),
            pending: Vec::new(),
            next_leader: None,
        },
        ReplicaReply::Snapshot {
            id,
            at: Position(4),
            slot: slot(true),
            rows: rows(),
        },
        ReplicaReply::Groups {
            id,
            groups: vec![EgId(b"a".to_vec()), EgId(Vec::new()), EgId(vec![0xff, 0])],
        },
        ReplicaReply::Groups {
            id,
            groups: Vec::new(),
        },
    ];
    replies.extend(
        [
            PrepareResult::Promised(None),
            PrepareResult::Promised(Some((ballot(), entry()))),
            PrepareResult::Rejected { promised: ballot() },
            PrepareResult::Visible(Ballot::ZERO, entry()),
            PrepareResult::Truncated,
        ]
        .map(|result| ReplicaReply::Prepare { id, result }),
    );
    replies.extend(
        [
            AcceptResult::Accepted,
            AcceptResult::Rejected { promised: ballot() },
            AcceptResult::GrantRefused(GrantRefusal::NotLeader),
            AcceptResult::GrantRefused(GrantRefusal::Taken(txn(2))),
            AcceptResult::Visible(ballot(), LogEntry::noop()),
            AcceptResult::Truncated,
        ]
        .map(|result| ReplicaReply::Accept { id, result }),
    );
    replies.extend(
        [
            ReplicaError::NotVoter,
            ReplicaError::NotServing,
            ReplicaError::NotApplied {
                applied: Position(1),
            },
            ReplicaError::Truncated {
                truncated: Position(2),
                chosen: None,
            },
            ReplicaError::Truncated {
                truncated: Position(2),
                chosen: Some(ChosenTxn::NoOp),
            },
            ReplicaError::Truncated {
                truncated: Position(2),
                chosen: Some(ChosenTxn::Txn(TxnId {
                    client: ClientId(4),
                    seq: 9,
                })),
            },
            ReplicaError::Truncated {
                truncated: Position(2),
                chosen: Some(ChosenTxn::of([
                    TxnId {
                        client: ClientId(4),
                        seq: 9,
                    },
                    TxnId {
                        client: ClientId(5),
                        seq: 1,
                    },
                ])),
            },
            ReplicaError::BadEntry("e".into()),
            ReplicaError::BadQuery("q".into()),
            ReplicaError::Storage("s".into()),
            ReplicaError::Conflict(Position(3)),
            ReplicaError::Rejoining,
            ReplicaError::HistoryFrom {
                installed: Position(4),
            },
            ReplicaError::NoSnapshot,
            ReplicaError::WrongServer {
                range: megastore_placement::RangeId(5),
                epoch: megastore_placement::Version(6),
            },
            ReplicaError::Frozen {
                range: megastore_placement::RangeId(7),
                move_id: megastore_placement::Version(8),
            },
            ReplicaError::PlacementNewer {
                version: megastore_placement::Version(9),
            },
        ]
        .map(|error| ReplicaReply::Error { id, error }),
    );
    replies
}

/// Through the protobuf encoding too, not only the generated structs.
fn through_bytes<M: prost::Message + Default>(message: M) -> M {
    M::decode(message.encode_to_vec().as_slice()).expect("decodes what it encoded")
}

#[test]
fn every_replica_request_survives_the_wire() {
    for request in requests() {
        let wire = through_bytes(pb::ReplicaRequest::from(request.clone()));
        assert_eq!(ReplicaRequest::try_from(wire), Ok(request));
    }
}

#[test]
fn every_replica_reply_survives_the_wire() {
    for reply in replies() {
        let wire = through_bytes(pb::ReplicaReply::from(reply.clone()));
        assert_eq!(ReplicaReply::try_from(wire), Ok(reply));
    }
}

#[test]
fn a_relayed_commit_and_every_outcome_survive_the_wire() {
    let prepared = Prepared {
        txn: txn(4),
        coordinator: EgId(b"other".to_vec()),
        participants: vec![EgId(b"other".to_vec()), eg()],
        prepared_ms: 1_700_000_000_000,
        writes: [b"w".to_vec()].into(),
        read_rows: [b"r".to_vec(), b"s".to_vec()].into(),
        read_ranges: vec![(b"a".to_vec(), Some(b"b".to_vec())), (b"c".to_vec(), None)],
    };
    for (leader, reads) in [
        (None, ReadSet::default()),
        (
            Some(ReplicaId(2)),
            ReadSet {
                rows: [b"k".to_vec()].into(),
                ranges: vec![KeyRange {
                    start: b"a".to_vec(),
                    end: None,
                }],
                prepared: vec![prepared],
            },
        ),
    ] {
        let commit = RelayedCommit {
            txn: txn(11),
            eg: eg(),
            read_position: Position(41),
            leader,
            writes: entry().writes,
            reads,
        };
        let wire = through_bytes(pb::RelayedCommit::from(commit.clone()));
        assert_eq!(RelayedCommit::try_from(wire), Ok(commit));
    }
    for outcome in [
        CommitResult::Committed {
            position: Position(42),
            fast: true,
        },
        CommitResult::Conflict {
            keys: vec![b"k".to_vec()],
        },
        CommitResult::Unknown {
            position: Position(43),
        },
        CommitResult::UnknownInSpan {
            first: Position(44),
        },
        CommitResult::Aborted,
    ] {
        let wire = through_bytes(relayed_outcome_to_wire(outcome.clone()));
        assert_eq!(relayed_outcome_from_wire(wire), Ok(outcome));
    }
    assert!(matches!(
        relayed_outcome_from_wire(pb::RelayedOutcome { outcome: None }),
        Err(WireError::Missing("outcome"))
    ));
}

#[test]
fn every_coordinator_message_survives_the_wire() {
    let requests = [
        CoordinatorRequest::Query { id: 1, eg: eg() },
        CoordinatorRequest::Validate {
            eg: eg(),
            position: Position(3),
            epoch: Epoch(4),
        },
        CoordinatorRequest::Invalidate {
            id: 2,
            eg: eg(),
            position: Position(5),
        },
    ];
    for request in requests {
        let wire = through_bytes(cpb::CoordinatorRequest::from(request.clone()));
        assert_eq!(CoordinatorRequest::try_from(wire), Ok(request));
    }
    let replies = [
        Some(CoordinatorReply::Query {
            id: 1,
            vouched: true,
            epoch: Some(Epoch(7)),
            retired: false,
        }),
        Some(CoordinatorReply::Query {
            id: 1,
            vouched: false,
            epoch: None,
            retired: true,
        }),
        Some(CoordinatorReply::Invalidated { id: 9 }),
        Some(CoordinatorReply::NotServed { id: 10 }),
        None,
    ];
    for reply in replies {
        let wire = through_bytes(coordinator_reply_to_wire(reply.clone()));
        assert_eq!(coordinator_reply_from_wire(wire), Ok(reply));
    }
}

#[test]
fn malformed_messages_are_errors_naming_the_field() {
    assert_eq!(
        ReplicaRequest::try_from(pb::ReplicaRequest::default()),
        Err(WireError::Missing("request"))
    );
    let mut accept = pb::ReplicaRequest::from(requests()[1].clone());
    if let Some(pb::replica_request::Request::Accept(a)) = &mut accept.request {
        a.entry.as_mut().unwrap().next_leader = Some(70_000);
    }
    assert_eq!(
        ReplicaRequest::try_from(accept),
        Err(WireError::OutOfRange {
            field: "entry.next_leader",
            value: 70_000
        })
    );
    let mut prepare = pb::ReplicaRequest::from(requests()[0].clone());
    if let Some(pb::replica_request::Request::Prepare(p)) = &mut prepare.request {
        p.ballot = None;
    }
    assert_eq!(
        ReplicaRequest::try_from(prepare),
        Err(WireError::Missing("prepare.ballot"))
    );
    assert_eq!(
        ReplicaReply::try_from(pb::ReplicaReply {
            id: 1,
            reply: Some(pb::replica_reply::Reply::Error(pb::ReplicaError {
                error: None
            })),
        }),
        Err(WireError::Missing("error"))
    );
    let mut joined = pb::ReplicaRequest::from(requests()[1].clone());
    if let Some(pb::replica_request::Request::Accept(a)) = &mut joined.request {
        a.entry.as_mut().unwrap().joined[0].txn = None;
    }
    assert_eq!(
        ReplicaRequest::try_from(joined),
        Err(WireError::Missing("entry.joined.txn"))
    );
    // Joined transactions follow a first one.
    let chosen_without_first = pb::ReplicaReply {
        id: 1,
        reply: Some(pb::replica_reply::Reply::Error(pb::ReplicaError {
            error: Some(pb::replica_error::Error::TruncatedChosen(
                pb::TruncatedChosen {
                    truncated: 4,
                    txn: None,
                    joined: vec![pb::TxnId { client: 1, seq: 2 }],
                },
            )),
        })),
    };
    assert_eq!(
        ReplicaReply::try_from(chosen_without_first),
        Err(WireError::Missing("truncated_chosen.txn"))
    );
    assert_eq!(
        CoordinatorRequest::try_from(cpb::CoordinatorRequest::default()),
        Err(WireError::Missing("request"))
    );
    // Garbage bytes are a decode error, not a panic.
    assert!(<pb::ReplicaRequest as prost::Message>::decode(&b"\xff\xff\xff"[..]).is_err());
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..8)
}

fn arb_cell() -> impl Strategy<Value = CellWrite> {
    prop_oneof![
        (arb_bytes(), arb_bytes()).prop_map(|(column, value)| CellWrite::Set { column, value }),
        arb_bytes().prop_map(|column| CellWrite::Delete { column }),
    ]
}

fn arb_entry() -> impl Strategy<Value = LogEntry> {
    let writes = proptest::collection::vec(
        (arb_bytes(), proptest::collection::vec(arb_cell(), 0..4))
            .prop_map(|(row, cells)| RowWrite { row, cells }),
        0..4,
    );
    (
        proptest::option::of((any::<u32>(), any::<u64>())),
        any::<u64>(),
        proptest::option::of(any::<u16>()),
        writes,
    )
        .prop_map(|(txn, schema, next_leader, writes)| LogEntry {
            txn: txn.map(|(client, seq)| TxnId {
                client: ClientId(client),
                seq,
            }),
            schema,
            next_leader: next_leader.map(ReplicaId),
            writes,
            ..LogEntry::noop()
        })
}

proptest! {
    #[test]
    fn any_log_entry_survives_the_wire(entry in arb_entry()) {
        let wire = through_bytes(entry_to_wire(entry.clone()));
        prop_assert_eq!(entry_from_wire(Some(wire)), Ok(entry));
    }
}

#[test]
fn every_lock_message_survives_the_wire() {
    use megastore_lock::{
        LeasedKey, LockCommand, LockError, LockFile, LockHolder, LockReply, LockRequest,
        LockResponse, Sequencer, SessionId,
    };
    use megastore_rpc::pb::lock as lpb;
    use std::time::Duration;

    let session = SessionId(u64::MAX);
    let commands = [
        LockCommand::OpenSession {
            owner: "coordinator/1".into(),
        },
        LockCommand::KeepAlive { session },
        LockCommand::CloseSession { session },
        LockCommand::Acquire {
            session,
            lock: "l".into(),
        },
        LockCommand::Release {
            session,
            lock: "l".into(),
        },
        LockCommand::Holder { lock: "l".into() },
        LockCommand::RevokeHolder { lock: "l".into() },
        LockCommand::ReadFile { name: "f".into() },
        LockCommand::WriteFile {
            name: "f".into(),
            expected: 3,
            contents: b"x".to_vec(),
        },
        LockCommand::GrantLease {
            owner: "worker".into(),
            ttl: Duration::from_millis(1500),
        },
        LockCommand::PutLeased {
            session,
            name: "app/k".into(),
            contents: b"v".to_vec(),
        },
        LockCommand::ListLeased {
            prefix: "app/".into(),
        },
        LockCommand::RenewLease {
            session,
            owned_by: None,
        },
        LockCommand::RevokeLease {
            session,
            owned_by: Some("user:alice:".into()),
        },
    ];
    for command in commands {
        let request = LockRequest { id: 5, command };
        let wire = through_bytes(lpb::LockRequest::from(request.clone()));
        assert_eq!(LockRequest::try_from(wire), Ok(request));
    }
    let holder = LockHolder {
        session,
        owner: "o".into(),
        sequencer: Sequencer(9),
    };
    let results = [
        Ok(LockReply::Session {
            session,
            lease: Duration::from_millis(2500),
        }),
        Ok(LockReply::Renewed {
            lease: Duration::from_secs(3),
        }),
        Ok(LockReply::Acquired {
            sequencer: Sequencer(4),
        }),
        Ok(LockReply::Holder(Some(holder.clone()))),
        Ok(LockReply::Holder(None)),
        Ok(LockReply::Revoked(true)),
        Ok(LockReply::File(Some(LockFile {
            version: 2,
            contents: Vec::new(),
        }))),
        Ok(LockReply::File(None)),
        Ok(LockReply::Written { version: 7 }),
        Ok(LockReply::Done),
        Ok(LockReply::Leased(vec![LeasedKey {
            name: "app/k".into(),
            session,
            revision: 11,
            contents: b"v".to_vec(),
        }])),
        Ok(LockReply::Leased(Vec::new())),
        Err(LockError::Invalid("ttl".into())),
        Err(LockError::PermissionDenied("token".into())),
        Err(LockError::SessionExpired(session)),
        Err(LockError::SessionRevoked(session)),
        Err(LockError::Held(holder)),
        Err(LockError::NotHolder),
        Err(LockError::VersionMismatch {
            expected: 1,
            current: 2,
        }),
        Err(LockError::NotLeader),
        Err(LockError::Unavailable),
    ];
    for result in results {
        let response = LockResponse { id: 6, result };
        let wire = through_bytes(lpb::LockResponse::from(response.clone()));
        assert_eq!(LockResponse::try_from(wire), Ok(response));
    }
    assert_eq!(
        LockRequest::try_from(lpb::LockRequest::default()),
        Err(WireError::Missing("command"))
    );
}

/// The public API's typed values: every kind of value, single and repeated, survives
/// entity → wire → bytes → entity; a malformed entity names its field.
#[test]
fn every_entity_value_survives_the_public_api() {
    use megastore_rpc::pb::client as api;
    use megastore_rpc::public::{
        entity_from_wire, entity_to_wire, txn_id_from_wire, txn_id_to_wire,
    };
    use megastore_schema::{Entity, FieldValue, Value};

    let values = [
        Value::Int32(i32::MIN),
        Value::Int64(i64::MAX),
        Value::UInt32(u32::MAX),
        Value::UInt64(u64::MAX),
        Value::Float(1.5),
        Value::Double(-2.25),
        Value::Bool(true),
        Value::String("ünïcode".into()),
        Value::Bytes(vec![0, 0xFF]),
        Value::Timestamp(-1),
    ];
    let mut entity = Entity::new("Photo");
    for (i, value) in values.iter().enumerate() {
        entity
            .fields
            .insert(format!("single{i}"), FieldValue::Single(value.clone()));
    }
    entity
        .fields
        .insert("repeated".into(), FieldValue::Repeated(values.to_vec()));
    entity
        .fields
        .insert("empty".into(), FieldValue::Repeated(Vec::new()));
    let wire = through_bytes(entity_to_wire(entity.clone()));
    assert_eq!(entity_from_wire("entity", Some(wire)).ok(), Some(entity));

    let mut no_kind = api::Entity {
        table: "Photo".into(),
        ..Default::default()
    };
    no_kind.fields.insert(
        "tag".into(),
        api::FieldValue {
            value: Some(api::field_value::Value::Single(api::Value { kind: None })),
        },
    );
    let refused = entity_from_wire("put.entity", Some(no_kind)).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("put.entity.fields[\"tag\"]"),
        "{}",
        refused.message()
    );

    let (id, position) = (txn(7), Position(42));
    let wire = through_bytes(txn_id_to_wire(id, position));
    assert_eq!(
        txn_id_from_wire("id", Some(wire)).ok(),
        Some((id, position))
    );
    let zero = api::TxnId {
        position: 0,
        ..txn_id_to_wire(id, position)
    };
    assert!(txn_id_from_wire("id", Some(zero)).is_err());
}
