//! How the Bigtable model is laid out in RocksDB's flat key space.
//!
//! One RocksDB key per cell version: `escape(row) ‖ escape(column) ‖ !timestamp`
//! (big-endian, complemented so that newer versions sort first). Escaping keeps plain
//! byte order and makes each component self-delimiting, so all cells of a row are one
//! contiguous key range, ordered by column and then newest-first.
//!
//! Value: one tag byte, [`VALUE_TAG`] followed by the cell's bytes, or [`TOMBSTONE_TAG`]
//! alone for a deletion.

use megastore_rowstore::Timestamp;
use megastore_rowstore::ordered::{KeyRange, escape_into, prefix_successor, unescape};

/// Tag of a stored value.
pub(crate) const VALUE_TAG: u8 = 0;
/// Tag of a deletion tombstone.
pub(crate) const TOMBSTONE_TAG: u8 = 1;

/// The RocksDB key of one cell version.
pub(crate) fn cell_key(row: &[u8], column: &[u8], timestamp: Timestamp) -> Vec<u8> {
    let mut key = Vec::with_capacity(row.len() + column.len() + 12);
    escape_into(row, &mut key);
    escape_into(column, &mut key);
    key.extend_from_slice(&(!timestamp).to_be_bytes());
    key
}

/// The RocksDB key prefix shared by every cell of `row`.
pub(crate) fn row_prefix(row: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(row.len() + 2);
    escape_into(row, &mut key);
    key
}

/// The RocksDB key prefix shared by every version of `row`'s `column`.
pub(crate) fn column_prefix(row: &[u8], column: &[u8]) -> Vec<u8> {
    let mut key = row_prefix(row);
    escape_into(column, &mut key);
    key
}

/// The RocksDB keys `[from, to)` holding every version of `row`'s columns in
/// `columns` and nothing else: a column `c` sorts between `columns.start` and
/// `columns.end` exactly when its escaped form does, and no escaped column is a prefix
/// of another, so its versions' keys (escaped column, then timestamp) do too.
pub(crate) fn columns_key_range(row: &[u8], columns: &KeyRange) -> (Vec<u8>, Vec<u8>) {
    let from = column_prefix(row, &columns.start);
    let to = match &columns.end {
        Some(end) => column_prefix(row, end),
        None => prefix_successor(&row_prefix(row))
            .expect("an escaped row ends in its terminator, below 0xFF"),
    };
    (from, to)
}

/// A decoded cell key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CellKey {
    pub(crate) row: Vec<u8>,
    pub(crate) column: Vec<u8>,
    pub(crate) timestamp: Timestamp,
}

/// Decodes a cell key; the error says what is malformed.
pub(crate) fn parse_cell_key(key: &[u8]) -> Result<CellKey, String> {
    let mut rest = key;
    let row = unescape(&mut rest, false).map_err(|e| format!("cell key row: {e}"))?;
    let column = unescape(&mut rest, false).map_err(|e| format!("cell key column: {e}"))?;
    let ts: [u8; 8] = rest.try_into().map_err(|_| {
        format!(
            "cell key ends in {} bytes, not an 8-byte timestamp",
            rest.len()
        )
    })?;
    Ok(CellKey {
        row,
        column,
        timestamp: !u64::from_be_bytes(ts),
    })
}

/// Decodes a stored value: `Some(bytes)` for a value, `None` for a tombstone.
pub(crate) fn parse_value(value: &[u8]) -> Result<Option<&[u8]>, String> {
    match value.split_first() {
        Some((&VALUE_TAG, bytes)) => Ok(Some(bytes)),
        Some((&TOMBSTONE_TAG, [])) => Ok(None),
        Some((tag, _)) => Err(format!("unknown cell value tag {tag}")),
        None => Err("empty cell value (missing tag)".to_string()),
    }
}

/// The stored form of a value.
pub(crate) fn value_bytes(value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(value.len() + 1);
    stored.push(VALUE_TAG);
    stored.extend_from_slice(value);
    stored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_keys_round_trip_and_order_newest_first() {
        let k = cell_key(b"r\0w", b"c\0l", 42);
        assert_eq!(
            parse_cell_key(&k).unwrap(),
            CellKey {
                row: b"r\0w".to_vec(),
                column: b"c\0l".to_vec(),
                timestamp: 42
            }
        );
        assert!(cell_key(b"r", b"c", 9) < cell_key(b"r", b"c", 3));
        assert!(cell_key(b"r", b"c", 0) < cell_key(b"r", b"d", 9));
        assert!(cell_key(b"r", b"zz", 0) < cell_key(b"r\0", b"a", 9));
        assert!(k.starts_with(&column_prefix(b"r\0w", b"c\0l")));
    }

    #[test]
    fn a_column_range_holds_exactly_its_columns_versions() {
        let columns = KeyRange::between(b"log:\x00".to_vec(), b"log:\x05".to_vec());
        let (from, to) = columns_key_range(b"r", &columns);
        let inside = |row: &[u8], column: &[u8], ts| {
            let key = cell_key(row, column, ts);
            from <= key && key < to
        };
        assert!(inside(b"r", b"log:\x00", 0));
        assert!(inside(b"r", b"log:\x00", u64::MAX));
        assert!(inside(b"r", b"log:\x04\xff", 7));
        assert!(!inside(b"r", b"log:", 0));
        assert!(!inside(b"r", b"log:\x05", 0));
        assert!(!inside(b"r\0", b"log:\x01", 0));
        assert!(!inside(b"", b"log:\x01", 0));
        let (from, to) = columns_key_range(b"r", &KeyRange::all());
        for (row, column, held) in [
            (b"r".as_slice(), b"".as_slice(), true),
            (b"r", b"\xff\xff", true),
            (b"r\0", b"", false),
            (b"q", b"z", false),
        ] {
            let key = cell_key(row, column, 3);
            assert_eq!(from <= key && key < to, held, "{row:?} {column:?}");
        }
    }

    #[test]
    fn malformed_keys_and_values_are_errors() {
        assert!(parse_cell_key(b"abc").is_err());
        assert!(parse_cell_key(&row_prefix(b"r")).is_err());
        assert!(parse_value(&[]).is_err());
        assert!(parse_value(&[7, 1]).is_err());
        assert!(parse_value(&[TOMBSTONE_TAG, 1]).is_err());
        assert_eq!(parse_value(&[TOMBSTONE_TAG]).unwrap(), None);
    }
}
