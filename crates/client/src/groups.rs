//! Untyped entity groups as the public API shows them: a group is named by any bytes,
//! and its rows by keys within it. The row key space itself (where a group's rows
//! live, and why no two groups overlap) is the schema crate's
//! [`keyspace`](megastore_schema::keyspace); this module only translates between a
//! caller's keys and the row store's, and refuses what does not fit.

use megastore_paxos::DataQuery;
use megastore_rowstore::{KeyRange, Row};
use megastore_schema::keyspace;
use megastore_types::EgId;
use megastore_types::limits::{COLUMN_BYTES_MAX, LimitError, VALUE_BYTES_MAX};

use crate::client::ClientError;

fn invalid(field: &str, message: impl std::fmt::Display) -> ClientError {
    ClientError::InvalidArgument(format!("{field}: {message}"))
}

/// The id of the untyped entity group named `name` (any non-empty bytes, up to
/// [`GROUP_NAME_BYTES_MAX`](megastore_types::limits::GROUP_NAME_BYTES_MAX)). Its rows
/// never overlap another group's, typed or untyped.
pub fn group(name: &[u8]) -> Result<EgId, ClientError> {
    keyspace::untyped_group_prefix(name)
        .map(EgId)
        .map_err(|e| invalid("eg", e))
}

/// The name of an untyped group, if `eg` is one.
pub fn group_name(eg: &EgId) -> Option<Vec<u8>> {
    keyspace::untyped_group_name(&eg.0)
}

/// Refuses a group that is not untyped: row calls take keys of untyped groups only
/// (a typed group's rows are entities, written through the schema).
pub(crate) fn require_untyped(eg: &EgId) -> Result<(), ClientError> {
    if group_name(eg).is_some() {
        Ok(())
    } else {
        Err(invalid(
            "eg",
            format!(
                "{eg} is not an untyped group (name one with megastore_client::group); a typed group's rows are read and written as entities"
            ),
        ))
    }
}

/// Checks one cell write of key `key` of an untyped group against the size limits:
/// what [`Transaction::set`](crate::Transaction::set) and
/// [`delete`](crate::Transaction::delete) check before they stage anything.
pub fn check_cell_write(
    key: &[u8],
    column: &[u8],
    value: Option<&[u8]>,
) -> Result<(), ClientError> {
    keyspace::check_key(key).map_err(|e| invalid("key", e))?;
    if column.is_empty() {
        return Err(invalid("column", "must not be empty"));
    }
    if column.len() > COLUMN_BYTES_MAX {
        return Err(invalid(
            "column",
            LimitError::Column {
                found: column.len(),
            },
        ));
    }
    if let Some(value) = value
        && value.len() > VALUE_BYTES_MAX
    {
        return Err(invalid("value", LimitError::Value { found: value.len() }));
    }
    Ok(())
}

/// The row of key `key` of the untyped group `eg`.
pub(crate) fn row_of_key(eg: &EgId, key: &[u8]) -> Result<Vec<u8>, ClientError> {
    require_untyped(eg)?;
    keyspace::check_key(key).map_err(|e| invalid("key", e))?;
    Ok(keyspace::untyped_row(&eg.0, key))
}

/// The rows of the untyped group `eg` whose keys lie in `range` (an empty start: from
/// the first key; no end: to the last).
pub(crate) fn rows_of_range(eg: &EgId, range: &KeyRange) -> Result<KeyRange, ClientError> {
    require_untyped(eg)?;
    for (field, bound) in [
        ("range.start", Some(&range.start)),
        ("range.end", range.end.as_ref()),
    ] {
        if let Some(bound) = bound.filter(|b| !b.is_empty()) {
            keyspace::check_key(bound).map_err(|e| invalid(field, e))?;
        }
    }
    if let Some(end) = &range.end
        && *end < range.start
    {
        return Err(invalid("range", "end is before start"));
    }
    Ok(keyspace::untyped_range(
        &eg.0,
        &range.start,
        range.end.as_deref(),
    ))
}

/// A query of keys of the untyped group `eg`, as a query of its rows.
pub(crate) fn rows_of_query(eg: &EgId, query: DataQuery) -> Result<DataQuery, ClientError> {
    Ok(match query {
        DataQuery::Rows(keys) => DataQuery::Rows(
            keys.iter()
                .enumerate()
                .map(|(i, key)| {
                    keyspace::check_key(key).map_err(|e| invalid(&format!("keys[{i}]"), e))?;
                    Ok(keyspace::untyped_row(&eg.0, key))
                })
                .collect::<Result<_, ClientError>>()?,
        ),
        DataQuery::Scan {
            range,
            limit,
            reverse,
        } => DataQuery::Scan {
            range: rows_of_range(eg, &range)?,
            limit,
            reverse,
        },
    })
}

/// A row of the untyped group `eg`, named by its key within the group.
pub(crate) fn relative_row(eg: &EgId, row: Row) -> Row {
    match keyspace::untyped_key(&eg.0, &row.key) {
        Some(key) => Row {
            key: key.to_vec(),
            cells: row.cells,
        },
        None => row,
    }
}

/// A conflict's rows as the caller named them: keys within an untyped group; a typed
/// group's row keys as they are.
pub(crate) fn relative_conflicts(eg: &EgId, rows: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    if group_name(eg).is_none() {
        return rows;
    }
    rows.into_iter()
        .map(|row| match keyspace::untyped_key(&eg.0, &row) {
            Some(key) => key.to_vec(),
            None => row,
        })
        .collect()
}
