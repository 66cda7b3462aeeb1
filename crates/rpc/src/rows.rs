//! Rows, key ranges and data queries on the wire.

use megastore_paxos::{DataQuery, ReadAt};
use megastore_rowstore::{Cell, KeyRange, Row};

use crate::error::{WireError, narrow, required};
use crate::pb::replication as pb;

pub(crate) fn row_to_wire(row: Row) -> pb::Row {
    pb::Row {
        key: row.key,
        cells: row
            .cells
            .into_iter()
            .map(|(column, cell)| pb::Cell {
                column,
                timestamp: cell.timestamp,
                value: cell.value,
            })
            .collect(),
    }
}

pub(crate) fn row_from_wire(row: pb::Row) -> Row {
    Row {
        key: row.key,
        cells: row
            .cells
            .into_iter()
            .map(|c| {
                (
                    c.column,
                    Cell {
                        timestamp: c.timestamp,
                        value: c.value,
                    },
                )
            })
            .collect(),
    }
}

pub(crate) fn range_to_wire(range: KeyRange) -> pb::KeyRange {
    pb::KeyRange {
        start: range.start,
        end: range.end,
    }
}

pub(crate) fn range_from_wire(range: pb::KeyRange) -> KeyRange {
    KeyRange {
        start: range.start,
        end: range.end,
    }
}

pub(crate) fn query_to_wire(query: DataQuery) -> pb::DataQuery {
    let query = match query {
        DataQuery::Rows(rows) => pb::data_query::Query::Rows(pb::data_query::Rows { rows }),
        DataQuery::Scan {
            range,
            limit,
            reverse,
        } => pb::data_query::Query::Scan(pb::data_query::Scan {
            range: Some(range_to_wire(range)),
            limit: limit.map(|l| l as u64),
            reverse,
        }),
    };
    pb::DataQuery { query: Some(query) }
}

pub(crate) fn query_from_wire(query: Option<pb::DataQuery>) -> Result<DataQuery, WireError> {
    let query = required(query.and_then(|q| q.query), "read.query")?;
    Ok(match query {
        pb::data_query::Query::Rows(rows) => DataQuery::Rows(rows.rows),
        pb::data_query::Query::Scan(scan) => {
            let range = required(scan.range, "read.query.scan.range")?;
            DataQuery::Scan {
                range: range_from_wire(range),
                limit: scan
                    .limit
                    .map(|l| narrow(l, "read.query.scan.limit"))
                    .transpose()?,
                reverse: scan.reverse,
            }
        }
    })
}

pub(crate) fn read_at_to_wire(at: ReadAt) -> pb::ReadAt {
    let at = match at {
        ReadAt::Position(p) => pb::read_at::At::Position(p.0),
        ReadAt::Applied => pb::read_at::At::Applied(true),
        ReadAt::Latest => pb::read_at::At::Latest(true),
        ReadAt::Settled => pb::read_at::At::Settled(true),
    };
    pb::ReadAt { at: Some(at) }
}

pub(crate) fn read_at_from_wire(at: Option<pb::ReadAt>) -> Result<ReadAt, WireError> {
    Ok(match required(at.and_then(|a| a.at), "read.at")? {
        pb::read_at::At::Position(p) => ReadAt::Position(megastore_types::Position(p)),
        pb::read_at::At::Applied(_) => ReadAt::Applied,
        pb::read_at::At::Latest(_) => ReadAt::Latest,
        pb::read_at::At::Settled(_) => ReadAt::Settled,
    })
}
