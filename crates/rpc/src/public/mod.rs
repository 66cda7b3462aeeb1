//! The public API's messages (`megastore.client.v1`) and the values they carry:
//! requests become protocol and schema values here, refused with `INVALID_ARGUMENT`
//! naming the field when malformed; answers go back the other way. The gateway (in
//! the replica) only turns the client library's own results — its errors, a
//! commit's attempt — into answers.

mod typed;

use megastore_paxos::{DataQuery, ReadMode, ReadPath, Resolution};
use megastore_rowstore::{KeyRange, Row};
use megastore_types::{ClientId, Position, TxnId};
use tonic::Status;

use crate::pb::client as pb;

pub use typed::{
    IndexQueryWire, entity_from_wire, entity_to_wire, index_entry_to_wire, index_query_from_wire,
    page_token_to_wire, typed_row_to_wire, value_from_wire, value_to_wire, values_from_wire,
};

/// A request's `field` is malformed: `INVALID_ARGUMENT` naming it.
pub fn invalid_argument(field: &str, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {message}"))
}

/// Refuses a key within a group that is empty or over the size limit, naming it.
pub fn check_key(field: &str, key: &[u8]) -> Result<(), Status> {
    megastore_schema::keyspace::check_key(key).map_err(|e| invalid_argument(field, e))
}

/// The read mode a request names (`AT_POSITION` is not a mode a client asks for).
pub fn read_mode_from_wire(mode: i32) -> Result<ReadMode, Status> {
    match pb::ReadMode::try_from(mode) {
        Ok(pb::ReadMode::Current) => Ok(ReadMode::Current),
        Ok(pb::ReadMode::Snapshot) => Ok(ReadMode::Snapshot),
        Ok(pb::ReadMode::Inconsistent) => Ok(ReadMode::Inconsistent),
        _ => Err(invalid_argument(
            "mode",
            "choose READ_MODE_CURRENT, READ_MODE_SNAPSHOT or READ_MODE_INCONSISTENT",
        )),
    }
}

/// The rows a read asks for: keys within the group, or a range and its limit.
pub fn query_from_wire(query: Option<pb::RowQuery>) -> Result<DataQuery, Status> {
    use pb::row_query::Query;
    match query.and_then(|q| q.query) {
        None => Err(invalid_argument("query", "give keys or a range")),
        Some(Query::Keys(keys)) => {
            for (i, k) in keys.keys.iter().enumerate() {
                check_key(&format!("query.keys[{i}]"), k)?;
            }
            Ok(DataQuery::Rows(keys.keys))
        }
        Some(Query::Range(range)) => {
            let (range, limit) = key_range_from_wire("query.range", range)?;
            Ok(DataQuery::Scan {
                range,
                limit,
                reverse: false,
            })
        }
    }
}

/// A client's range of keys within a group (an empty start: the group's first key;
/// an empty end: its last), and its limit.
pub fn key_range_from_wire(
    field: &str,
    range: pb::row_query::Range,
) -> Result<(KeyRange, Option<usize>), Status> {
    if !range.start.is_empty() {
        check_key(&format!("{field}.start"), &range.start)?;
    }
    let end = (!range.end.is_empty()).then_some(range.end);
    if let Some(end) = &end {
        check_key(&format!("{field}.end"), end)?;
        if *end < range.start {
            return Err(invalid_argument(field, "end is before start"));
        }
    }
    let limit = (range.limit > 0).then_some(range.limit as usize);
    Ok((
        KeyRange {
            start: range.start,
            end,
        },
        limit,
    ))
}

/// How a read was served, as the API names it.
pub fn read_path_to_wire(path: ReadPath) -> &'static str {
    match path {
        ReadPath::LocalVouched => "local",
        ReadPath::Majority => "majority",
        ReadPath::Snapshot => "snapshot",
        ReadPath::Inconsistent => "inconsistent",
        ReadPath::AtPosition => "at_position",
    }
}

/// A transaction's id as the API gives it: with the position it commits at.
pub fn txn_id_to_wire(id: TxnId, position: Position) -> pb::TxnId {
    pb::TxnId {
        client: id.client.0,
        seq: id.seq,
        position: position.0,
    }
}

/// A transaction's id from a request (as Begin returned it), and the position it may
/// hold.
pub fn txn_id_from_wire(field: &str, id: Option<pb::TxnId>) -> Result<(TxnId, Position), Status> {
    let id = id.ok_or_else(|| {
        invalid_argument(field, "give the transaction's id, as Begin returned it")
    })?;
    if id.position == 0 || id.seq == 0 {
        return Err(invalid_argument(
            field,
            "not an id Begin returns (position and seq start at 1)",
        ));
    }
    let txn = TxnId {
        client: ClientId(id.client),
        seq: id.seq,
    };
    Ok((txn, Position(id.position)))
}

/// What resolving the transaction that may hold `position` found.
pub fn resolution_to_wire(resolution: Resolution, position: Position) -> pb::ResolveResponse {
    use pb::resolve_response::{Committed, NotCommitted, Outcome, Unknown};
    let outcome = match resolution {
        Resolution::Committed(at) => Outcome::Committed(Committed { position: at.0 }),
        Resolution::NotCommitted => Outcome::NotCommitted(NotCommitted {}),
        Resolution::Undecided => Outcome::Unknown(Unknown {
            reason: format!(
                "position {} of the group could not be settled in time (no majority reachable?); ask again",
                position.0
            ),
        }),
    };
    pb::ResolveResponse {
        outcome: Some(outcome),
    }
}

/// A row as the API returns it: every cell with the position that wrote it.
pub fn row_to_wire(row: Row) -> pb::Row {
    pb::Row {
        key: row.key,
        cells: row
            .cells
            .into_iter()
            .map(|(column, cell)| pb::Cell {
                column,
                value: cell.value,
                position: cell.timestamp,
            })
            .collect(),
    }
}
