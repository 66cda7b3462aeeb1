//! Arbitrary input on the wire: every message a peer or a client can send, decoded from
//! generated protobuf — random fields, numbers and nesting, so that oneofs and nested
//! messages are reached, not only rejected at the first byte — then converted to the
//! pure types as the servers do. A conversion may refuse (naming the field), never
//! panic. proptest turns a panic into a failure with the input that caused it.

use megastore_rpc::entry_from_wire;
use megastore_rpc::pb::{client as api, coordinator as cpb, lock as lpb, replication as rpb};
use megastore_rpc::public::{
    IndexQueryWire, entity_from_wire, index_query_from_wire, key_range_from_wire, query_from_wire,
    read_mode_from_wire, txn_id_from_wire, values_from_wire,
};
use proptest::prelude::*;
use prost::Message;

/// One protobuf field: a number, and a varint or a length-delimited payload.
#[derive(Debug, Clone)]
enum Field {
    Varint(u32, u64),
    Bytes(u32, Vec<u8>),
    Nested(u32, Vec<Field>),
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Encodes fields as a protobuf message would be.
fn encode(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for field in fields {
        match field {
            Field::Varint(number, value) => {
                put_varint(&mut out, u64::from(*number) << 3);
                put_varint(&mut out, *value);
            }
            Field::Bytes(number, bytes) => {
                put_varint(&mut out, (u64::from(*number) << 3) | 2);
                put_varint(&mut out, bytes.len() as u64);
                out.extend_from_slice(bytes);
            }
            Field::Nested(number, inner) => {
                let inner = encode(inner);
                put_varint(&mut out, (u64::from(*number) << 3) | 2);
                put_varint(&mut out, inner.len() as u64);
                out.extend_from_slice(&inner);
            }
        }
    }
    out
}

/// Field numbers the schemas use (and a few past them), values near the edges.
fn arb_field() -> impl Strategy<Value = Field> {
    let number = 1u32..20;
    let value = prop_oneof![Just(0u64), Just(1), Just(u64::MAX), any::<u64>(), 0u64..300];
    let leaf = prop_oneof![
        (number.clone(), value).prop_map(|(n, v)| Field::Varint(n, v)),
        (
            number.clone(),
            proptest::collection::vec(any::<u8>(), 0..24)
        )
            .prop_map(|(n, b)| Field::Bytes(n, b)),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        (1u32..20, proptest::collection::vec(inner, 0..6)).prop_map(|(n, f)| Field::Nested(n, f))
    })
}

fn arb_message() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(arb_field(), 0..8).prop_map(|fields| encode(&fields))
}

/// Decodes `bytes` as `M`, if it is one.
fn decoded<M: Message + Default>(bytes: &[u8]) -> Option<M> {
    M::decode(bytes).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Between servers: replication, coordinator and lock messages, and log entries.
    #[test]
    fn peer_messages_are_refused_or_converted_never_panic(bytes in arb_message()) {
        if let Some(m) = decoded::<rpb::ReplicaRequest>(&bytes) {
            let _ = megastore_paxos::ReplicaRequest::try_from(m);
        }
        if let Some(m) = decoded::<rpb::ReplicaReply>(&bytes) {
            let _ = megastore_paxos::ReplicaReply::try_from(m);
        }
        if let Some(m) = decoded::<rpb::LogEntry>(&bytes) {
            let _ = entry_from_wire(Some(m));
        }
        if let Some(m) = decoded::<rpb::RelayedCommit>(&bytes) {
            let _ = megastore_paxos::RelayedCommit::try_from(m);
        }
        if let Some(m) = decoded::<rpb::RelayedOutcome>(&bytes) {
            let _ = megastore_rpc::relayed_outcome_from_wire(m);
        }
        if let Some(m) = decoded::<cpb::CoordinatorRequest>(&bytes) {
            let _ = megastore_coordinator::CoordinatorRequest::try_from(m);
        }
        if let Some(m) = decoded::<lpb::LockRequest>(&bytes) {
            let _ = megastore_lock::LockRequest::try_from(m);
        }
        if let Some(m) = decoded::<lpb::LockResponse>(&bytes) {
            let _ = megastore_lock::LockResponse::try_from(m);
        }
    }

    /// From clients of the public API: the conversions the gateway makes.
    #[test]
    fn client_requests_are_refused_or_converted_never_panic(bytes in arb_message()) {
        if let Some(m) = decoded::<api::ReadRequest>(&bytes) {
            let _ = read_mode_from_wire(m.mode);
            let _ = query_from_wire(m.query);
        }
        if let Some(m) = decoded::<api::RowQuery>(&bytes)
            && let Some(api::row_query::Query::Range(range)) = m.query
        {
            let _ = key_range_from_wire("query.range", range);
        }
        if let Some(m) = decoded::<api::ResolveRequest>(&bytes) {
            let _ = txn_id_from_wire("id", m.id);
        }
        if let Some(m) = decoded::<api::PutEntityRequest>(&bytes) {
            let _ = entity_from_wire("entity", m.entity);
        }
        if let Some(m) = decoded::<api::GetEntityRequest>(&bytes) {
            let _ = values_from_wire("key", m.key);
        }
        if let Some(m) = decoded::<api::ScanIndexRequest>(&bytes) {
            let _ = index_query_from_wire(IndexQueryWire {
                index: m.index,
                leading: m.leading,
                lower: m.lower,
                upper: m.upper,
                reverse: m.reverse,
                limit: m.limit,
                page_token: m.page_token,
            });
        }
    }
}

/// The generator reaches deep: some generated messages decode as each kind and carry
/// the nested parts the conversions look into (else the properties above would test
/// little).
#[test]
fn the_generator_reaches_nested_fields() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut requests, mut entries, mut entities) = (0, 0, 0);
    for _ in 0..2_000 {
        let bytes = arb_message().new_tree(&mut runner).unwrap().current();
        if decoded::<rpb::ReplicaRequest>(&bytes).is_some_and(|m| m.request.is_some()) {
            requests += 1;
        }
        if decoded::<rpb::LogEntry>(&bytes).is_some_and(|m| !m.writes.is_empty()) {
            entries += 1;
        }
        if decoded::<api::PutEntityRequest>(&bytes).is_some_and(|m| m.entity.is_some()) {
            entities += 1;
        }
    }
    assert!(
        requests > 20 && entries > 20 && entities > 20,
        "{requests} {entries} {entities}"
    );
}
