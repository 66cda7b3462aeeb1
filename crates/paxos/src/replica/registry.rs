//! Two lists of groups a replica keeps in its store, in the system's part of the key
//! space where no group's prefix starts (the schema crate's `keyspace` reserves it):
//!
//! - the **registry**, `0xFF 0xFF "megastore/groups/" ‖ eg`: every group it holds. The
//!   replica writes a group's row with the group's first persisted state, in the same
//!   batch (so under the same sync), and walks the registry a few groups at a time to
//!   look after groups nobody asks about — what lets it keep only some in memory.
//! - the **open index**, `0xFF 0xFF "megastore/open/" ‖ eg`: the groups that may have
//!   work left (a position above `visible`, or one visible and not applied). A group's
//!   row is written before the state that gives it work, in the same batch, so after a
//!   crash every group with work left is listed (invariant *open-is-indexed*); a
//!   restarted replica with a bounded cache loads only these. A row can outlive the
//!   work (it is deleted when the group leaves memory quiescent, unsynced): such a
//!   group is loaded once more at the next start, found quiescent, and unlisted.

use megastore_rowstore::{KeyRange, LATEST, RowMutation, RowRead, RowStoreError, ScanOptions};
use megastore_types::EgId;

/// Where the registry's rows start.
pub const REGISTRY_PREFIX: &[u8] = b"\xff\xffmegastore/groups/";
/// Where the open index's rows start.
pub const OPEN_PREFIX: &[u8] = b"\xff\xffmegastore/open/";
const COLUMN: &[u8] = b"g";

/// Which list of groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupList {
    /// Every group the replica holds.
    Registered,
    /// The groups that may have work left.
    Open,
}

impl GroupList {
    fn prefix(self) -> &'static [u8] {
        match self {
            Self::Registered => REGISTRY_PREFIX,
            Self::Open => OPEN_PREFIX,
        }
    }

    fn row(self, eg: &EgId) -> Vec<u8> {
        [self.prefix(), &eg.0[..]].concat()
    }

    /// The rows of this list that name the groups whose keys lie in `groups`.
    pub fn rows_of(self, groups: &KeyRange) -> KeyRange {
        let prefix = self.prefix();
        KeyRange {
            start: [prefix, &groups.start[..]].concat(),
            end: match &groups.end {
                Some(end) => Some([prefix, &end[..]].concat()),
                None => KeyRange::prefix(prefix.to_vec()).end,
            },
        }
    }

    /// The group a row of either list names (`None`: the row is in neither).
    pub fn group_of_row(row: &[u8]) -> Option<&[u8]> {
        [Self::Registered, Self::Open]
            .into_iter()
            .find_map(|list| row.strip_prefix(list.prefix()))
    }

    /// The mutation that lists `eg`.
    pub fn listing(self, eg: &EgId) -> RowMutation {
        RowMutation::new(self.row(eg)).set(COLUMN.to_vec(), 0, Vec::new())
    }

    /// The mutation that unlists `eg`.
    pub fn unlisting(self, eg: &EgId) -> RowMutation {
        RowMutation::new(self.row(eg)).delete_cell(COLUMN.to_vec(), 0)
    }
}

/// The mutation that registers `eg`.
pub fn register_group(eg: &EgId) -> RowMutation {
    GroupList::Registered.listing(eg)
}

/// Up to `limit` registered groups after `after` (from the first with `None`), in key
/// order.
pub fn list_groups<S: RowRead>(
    store: &S,
    after: Option<&EgId>,
    limit: usize,
) -> Result<Vec<EgId>, RowStoreError> {
    list(store, GroupList::Registered, after, limit)
}

/// Up to `limit` groups of `which` list after `after` (from the first with `None`), in
/// key order.
pub fn list<S: RowRead>(
    store: &S,
    which: GroupList,
    after: Option<&EgId>,
    limit: usize,
) -> Result<Vec<EgId>, RowStoreError> {
    let start = match after {
        // The least group key above `after`.
        Some(after) => [&after.0[..], &[0]].concat(),
        None => Vec::new(),
    };
    listed_in(store, which, &KeyRange { start, end: None }, limit)
}

/// Up to `limit` registered groups whose keys lie in `groups` (a range of group keys,
/// not of rows), in key order.
pub fn registered_in<S: RowRead>(
    store: &S,
    groups: &KeyRange,
    limit: usize,
) -> Result<Vec<EgId>, RowStoreError> {
    listed_in(store, GroupList::Registered, groups, limit)
}

fn listed_in<S: RowRead>(
    store: &S,
    which: GroupList,
    groups: &KeyRange,
    limit: usize,
) -> Result<Vec<EgId>, RowStoreError> {
    let prefix = which.prefix();
    let rows = which.rows_of(groups);
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
        .map(|r| EgId(r.key[prefix.len()..].to_vec()))
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
