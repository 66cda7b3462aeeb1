//! The registry of the groups a replica holds: one row per group, `0xFF 0xFF
//! "megastore/groups/" ‖ eg`, in the system's part of the key space where no group's
//! prefix starts (the schema crate's `keyspace` reserves it). The replica writes a
//! group's row with the group's first persisted state, in the same batch (so under the
//! same sync), and walks the registry a few groups at a time
//! ([`super::Output::ListGroups`]) to look after groups nobody asks about — what lets it
//! keep only some groups in memory.

use megastore_rowstore::{KeyRange, LATEST, RowMutation, RowRead, RowStoreError, ScanOptions};
use megastore_types::EgId;

/// Where the registry's rows start.
pub const REGISTRY_PREFIX: &[u8] = b"\xff\xffmegastore/groups/";
const COLUMN: &[u8] = b"g";

fn row(eg: &EgId) -> Vec<u8> {
    let mut row = REGISTRY_PREFIX.to_vec();
    row.extend_from_slice(&eg.0);
    row
}

/// The mutation that registers `eg`.
pub fn register_group(eg: &EgId) -> RowMutation {
    RowMutation::new(row(eg)).set(COLUMN.to_vec(), 0, Vec::new())
}

/// Up to `limit` registered groups after `after` (from the first with `None`), in key
/// order.
pub fn list_groups<S: RowRead>(
    store: &S,
    after: Option<&EgId>,
    limit: usize,
) -> Result<Vec<EgId>, RowStoreError> {
    let start = match after {
        // The least group key above `after`.
        Some(after) => [&after.0[..], &[0]].concat(),
        None => Vec::new(),
    };
    registered_in(store, &KeyRange { start, end: None }, limit)
}

/// Up to `limit` registered groups whose keys lie in `groups` (a range of group keys,
/// not of rows), in key order.
pub fn registered_in<S: RowRead>(
    store: &S,
    groups: &KeyRange,
    limit: usize,
) -> Result<Vec<EgId>, RowStoreError> {
    let within = KeyRange::prefix(REGISTRY_PREFIX.to_vec());
    let rows = KeyRange {
        start: [REGISTRY_PREFIX, &groups.start[..]].concat(),
        end: match &groups.end {
            Some(end) => Some([REGISTRY_PREFIX, &end[..]].concat()),
            None => within.end,
        },
    };
    let found = store.scan(
        &rows,
        LATEST,
        &ScanOptions {
            limit: Some(limit),
            ..ScanOptions::default()
        },
    )?;
    Ok(found
        .into_iter()
        .map(|r| EgId(r.key[REGISTRY_PREFIX.len()..].to_vec()))
        .collect())
}

#[cfg(test)]
mod tests {
    use megastore_rowstore::{Durability, MemoryStore, RowStore};

    use super::*;

    #[test]
    fn registered_groups_are_listed_in_order_from_any_point() {
        let store = MemoryStore::new();
        let groups = [
            b"a".to_vec(),
            b"a\x00".to_vec(),
            b"b\x00c".to_vec(),
            b"c".to_vec(),
        ];
        for eg in groups.iter().rev() {
            store
                .mutate_row(&register_group(&EgId(eg.clone())), None, Durability::Synced)
                .unwrap();
        }
        let all = list_groups(&store, None, 10).unwrap();
        assert_eq!(all, groups.iter().cloned().map(EgId).collect::<Vec<_>>());
        let page = list_groups(&store, Some(&EgId(b"a".to_vec())), 2).unwrap();
        assert_eq!(
            page,
            vec![EgId(b"a\x00".to_vec()), EgId(b"b\x00c".to_vec())]
        );
        assert!(
            list_groups(&store, Some(&EgId(b"c".to_vec())), 2)
                .unwrap()
                .is_empty()
        );
        let range = KeyRange {
            start: b"a\x00".to_vec(),
            end: Some(b"c".to_vec()),
        };
        let within = registered_in(&store, &range, 10).unwrap();
        assert_eq!(
            within,
            vec![EgId(b"a\x00".to_vec()), EgId(b"b\x00c".to_vec())]
        );
    }
}
