//! The row key space: which rows belong to which entity group, and what is reserved.
//!
//! Every group id (its *prefix*) is self-delimiting, so no group's key range contains
//! another group's: a row starts with at most one group's prefix. The first byte of a
//! row key says whose it is:
//!
//! | first byte | what |
//! |---|---|
//! | `0x00` | never used |
//! | `0x01`–`0xF8` | the schema's root tables ([`encode_object_id`](crate::mapping::keys::encode_object_id)): their groups, `id(table) ‖ [scatter2] ‖ key(root key)` |
//! | `0xF9`–`0xFC` | never used |
//! | `0xFD` ([`GLOBAL_INDEX_TAG`]) | global index entries, `0xFD ‖ id(index) ‖ key(values) ‖ key(primary key)`: outside every group, copies of the groups' mirrors |
//! | `0xFE` ([`UNTYPED_GROUP_TAG`]) | untyped groups: `0xFE ‖ escape(name)` |
//! | `0xFF` ([`SYSTEM_TAG`]) | the system: a replica's registry of the groups it holds ([`SYSTEM_GROUPS_PREFIX`]), its open index of the groups with work left (`0xFF 0xFF megastore/open/…`) and its row-layout marker ([`SYSTEM_LAYOUT_ROW`]) |
//!
//! Inside a group with prefix `G`: `G ‖ 0x00` is the root row (the log and replication
//! state), `G ‖ 0x01`–`G ‖ 0xF7 …` are data rows (an untyped group's key `k` is the
//! row `G ‖ 0x01 ‖ k`; a typed group's rows start with a table or index id), and
//! `G ‖ 0xF8 FFFFFFFF …` ([`VERSIONED_KEYS_OBJECT`]) holds the versioned primitives'
//! keys, `G ‖ 0xF8 FFFFFFFE ‖ global key` ([`GLOBAL_MIRROR_OBJECT`]) the group's
//! mirror of the global index entries it owns, `G ‖ 0xF8 FFFFFFFD ‖ …`
//! ([`QUEUE_OBJECT`]) its queues' outbox, inbox and delivery marks, and
//! `G ‖ 0xF8 FFFFFFFC ‖ …` ([`TWO_PHASE_OBJECT`]) its two-phase commit records (object
//! ids no schema hands out: ids count up from 1).
//!
//! A group name is any non-empty byte string up to
//! [`GROUP_NAME_BYTES_MAX`]: escaping
//! (the key codec's, for `bytes`) is what makes it self-delimiting, so no name is
//! reserved and none can reach into a schema group or the system's rows.

use megastore_rowstore::KeyRange;
use megastore_rowstore::ordered::{escape_into, unescape};
use megastore_types::limits::{GROUP_NAME_BYTES_MAX, KEY_BYTES_MAX, LimitError};

use crate::catalog::{Catalog, TableKind};
use crate::key::{decode_tuple_prefix, scatter_prefix};
use crate::mapping::keys::decode_object_id;

/// Every reserved byte and range of the key space is named here, and only here (the
/// two the protocol core must also know, [`GLOBAL_INDEX_TAG`] and
/// [`GLOBAL_MIRROR_OBJECT`], are defined in `megastore_types::reserved`, below both
/// crates, and re-exported here).
///
/// Object ids below this byte take one byte; larger ones take this byte and the id as a
/// big-endian u32 ([`encode_object_id`](crate::mapping::keys::encode_object_id)).
pub const LONG_OBJECT_ID: u8 = 0xF8;
/// Inside a group, the object id no schema hands out (`u32::MAX` in its long form): the
/// versioned primitives' keys live under it (`G ‖ 0xF8 FFFFFFFF ‖ escape(key)`).
pub const VERSIONED_KEYS_OBJECT: [u8; 5] = [LONG_OBJECT_ID, 0xFF, 0xFF, 0xFF, 0xFF];
pub use megastore_types::reserved::{
    GLOBAL_INDEX_TAG, GLOBAL_MIRROR_OBJECT, QUEUE_OBJECT, SYSTEM_TAG, TWO_PHASE_OBJECT,
    UNTYPED_GROUP_TAG,
};
const _: () = assert!(
    GLOBAL_MIRROR_OBJECT[0] == LONG_OBJECT_ID
        && QUEUE_OBJECT[0] == LONG_OBJECT_ID
        && TWO_PHASE_OBJECT[0] == LONG_OBJECT_ID
);

/// A replica's registry of the groups it holds: one row per group,
/// `0xFF 0xFF ‖ "megastore/groups/" ‖ group prefix`.
pub const SYSTEM_GROUPS_PREFIX: &[u8] = b"\xff\xffmegastore/groups/";
/// The row that records which row layout a replica's store is written in.
pub const SYSTEM_LAYOUT_ROW: &[u8] = b"\xff\xffmegastore/layout";
const _: () = assert!(SYSTEM_GROUPS_PREFIX[0] == SYSTEM_TAG && SYSTEM_LAYOUT_ROW[0] == SYSTEM_TAG);
/// The byte between an untyped group's prefix and a key of the group.
const UNTYPED_DATA: u8 = 0x01;

/// Why a group name or a key within a group is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySpaceError {
    /// A group needs a name.
    #[error("name an entity group (any non-empty bytes)")]
    EmptyName,
    /// A row needs a key.
    #[error("a key within a group must not be empty")]
    EmptyKey,
    /// Over a size limit.
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// The prefix of the untyped group named `name`.
pub fn untyped_group_prefix(name: &[u8]) -> Result<Vec<u8>, KeySpaceError> {
    if name.is_empty() {
        return Err(KeySpaceError::EmptyName);
    }
    if name.len() > GROUP_NAME_BYTES_MAX {
        return Err(LimitError::GroupName { found: name.len() }.into());
    }
    let mut prefix = Vec::with_capacity(name.len() + 3);
    prefix.push(UNTYPED_GROUP_TAG);
    escape_into(name, &mut prefix);
    Ok(prefix)
}

/// The name of the untyped group whose prefix is exactly `prefix`, if it is one.
pub fn untyped_group_name(prefix: &[u8]) -> Option<Vec<u8>> {
    let (name, rest) = split_untyped_prefix(prefix)?;
    rest.is_empty().then_some(name)
}

/// An untyped group's name and what follows its prefix in `row`.
fn split_untyped_prefix(row: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut rest = row.strip_prefix(&[UNTYPED_GROUP_TAG])?;
    let name = unescape(&mut rest, false).ok()?;
    (!name.is_empty()).then_some((name, rest))
}

/// Checks a key within an untyped group.
pub fn check_key(key: &[u8]) -> Result<(), KeySpaceError> {
    if key.is_empty() {
        return Err(KeySpaceError::EmptyKey);
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(LimitError::Key { found: key.len() }.into());
    }
    Ok(())
}

/// The row holding key `key` of the untyped group with prefix `prefix`.
pub fn untyped_row(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut row = Vec::with_capacity(prefix.len() + 1 + key.len());
    row.extend_from_slice(prefix);
    row.push(UNTYPED_DATA);
    row.extend_from_slice(key);
    row
}

/// The key within the untyped group `prefix` that `row` holds, if `row` is one of its
/// data rows.
pub fn untyped_key<'a>(prefix: &[u8], row: &'a [u8]) -> Option<&'a [u8]> {
    row.strip_prefix(prefix)?.strip_prefix(&[UNTYPED_DATA])
}

/// The rows of the untyped group `prefix` whose keys lie in `[start, end)` (`end`
/// `None`: to the group's last key).
pub fn untyped_range(prefix: &[u8], start: &[u8], end: Option<&[u8]>) -> KeyRange {
    let end = match end {
        Some(end) => untyped_row(prefix, end),
        None => {
            let mut end = prefix.to_vec();
            end.push(UNTYPED_DATA + 1);
            end
        }
    };
    KeyRange {
        start: untyped_row(prefix, start),
        end: Some(end),
    }
}

/// Which part of the key space a row is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowOwner {
    /// A row of the untyped group with this name (its root row, a data row or a
    /// versioned key).
    Untyped(Vec<u8>),
    /// A row of a typed entity group: the group's prefix, and its root table.
    Typed {
        /// The group's prefix.
        prefix: Vec<u8>,
        /// Its root table.
        root: String,
    },
    /// A global index's entry.
    GlobalIndex(String),
    /// The system's rows.
    System,
    /// No group of this catalog (or a typed row when no catalog is known).
    Unknown,
}

/// Whose `row` is: the one group whose prefix it starts with, if any.
pub fn owner_of_row(catalog: Option<&Catalog>, row: &[u8]) -> RowOwner {
    match row.first() {
        Some(&SYSTEM_TAG) => return RowOwner::System,
        Some(&GLOBAL_INDEX_TAG) => {
            let mut rest = &row[1..];
            return match (catalog, decode_object_id(&mut rest)) {
                (Some(catalog), Some(id)) => catalog
                    .index_by_id(id)
                    .filter(|index| index.kind == crate::IndexKind::Global)
                    .map_or(RowOwner::Unknown, |index| {
                        RowOwner::GlobalIndex(index.name.clone())
                    }),
                _ => RowOwner::Unknown,
            };
        }
        Some(&UNTYPED_GROUP_TAG) => {
            return match split_untyped_prefix(row) {
                Some((name, _)) => RowOwner::Untyped(name),
                None => RowOwner::Unknown,
            };
        }
        _ => {}
    }
    let Some(catalog) = catalog else {
        return RowOwner::Unknown;
    };
    match catalog.typed_group_prefix_len(row) {
        Some((len, root)) => RowOwner::Typed {
            prefix: row[..len].to_vec(),
            root: root.to_string(),
        },
        None => RowOwner::Unknown,
    }
}

/// Why the key space may not be split at a key (`megastore range split --at`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitKeyError {
    /// A group's prefix is a proper prefix of the key: the group's root row would lie
    /// left of the split and its later rows (mirrors, queues, two-phase records) right
    /// of it, so a move of either range would separate them.
    #[error(
        "the key lies inside entity group {group}: its rows would be split between two \
         ranges; split at the group's own key ({}) or a key between groups",
        prefix.escape_ascii()
    )]
    InsideGroup {
        /// The group, as a person reads it (`untyped "name"` or `Table prefix`).
        group: String,
        /// The group's prefix: a split there puts the whole group right of it.
        prefix: Vec<u8>,
    },
    /// The key falls among the groups a table with object id `id` would have, and the
    /// schema has no such table: a root table given that id later could have a group
    /// across the split.
    #[error(
        "the key falls among the groups of object id {id}, which is no table of the \
         cluster's schema (a root table added later could have a group across the \
         split); split at a group's key or at the table's start"
    )]
    UnknownTable {
        /// The object id the key starts with.
        id: u32,
    },
}

/// Checks that a split of the key space at `at` falls between entity groups — every
/// group's rows on one side of it (docs/protocol.md, "A split must fall between
/// groups"). Refused: a key that a group's prefix is a proper prefix of, and a key in
/// the schema tables' part of the key space (`0x01`–`0xF8`) after the object id of no
/// table of `catalog` (`None`: no schema applied). A key that is exactly a group's
/// prefix, a table's start, or a point between two groups' keys is accepted, as is
/// any key in the parts no group lives in (global index entries, the system, unused
/// bytes).
pub fn check_split_key(catalog: Option<&Catalog>, at: &[u8]) -> Result<(), SplitKeyError> {
    match at.first() {
        Some(&UNTYPED_GROUP_TAG) => match split_untyped_prefix(at) {
            Some((name, rest)) if !rest.is_empty() => Err(SplitKeyError::InsideGroup {
                group: format!("untyped \"{}\"", name.escape_ascii()),
                prefix: at[..at.len() - rest.len()].to_vec(),
            }),
            _ => Ok(()),
        },
        Some(&first) if (0x01..=LONG_OBJECT_ID).contains(&first) => {
            let mut rest = at;
            let Some(id) = decode_object_id(&mut rest) else {
                return Ok(()); // a partial long id: between two tables' ids
            };
            if rest.is_empty() {
                return Ok(()); // the table's start
            }
            let known = |c: &&Catalog| c.table_by_id(id).is_some() || c.index_by_id(id).is_some();
            let Some(catalog) = catalog.filter(known) else {
                return Err(SplitKeyError::UnknownTable { id: id.0 });
            };
            match catalog.typed_group_prefix_len(at) {
                Some((len, root)) if len < at.len() => Err(SplitKeyError::InsideGroup {
                    group: root.to_string(),
                    prefix: at[..len].to_vec(),
                }),
                // Exactly a group's prefix, a partial key (between two groups), or a
                // child table's or index's id (never the start of a group).
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

impl Catalog {
    /// How long the typed group prefix at the front of `row` is, and its root table.
    fn typed_group_prefix_len(&self, row: &[u8]) -> Option<(usize, &str)> {
        let mut rest = row;
        let id = decode_object_id(&mut rest)?;
        if let Some(table) = self.table_by_id(id) {
            if !matches!(table.kind, TableKind::Root { .. }) {
                return None;
            }
            let mut key = rest;
            if table.is_scattered() {
                key = rest.get(2..)?;
            }
            let before = key.len();
            decode_tuple_prefix(&table.key_parts(), &mut key).ok()?;
            let encoded_key = &rest[rest.len() - before..rest.len() - key.len()];
            if table.is_scattered() && rest[..2] != scatter_prefix(encoded_key) {
                return None;
            }
            return Some((row.len() - key.len(), table.name.as_str()));
        }
        None
    }

    /// Whether `prefix` is exactly the prefix of one of this schema's entity groups.
    pub fn is_group_prefix(&self, prefix: &[u8]) -> bool {
        matches!(self.typed_group_prefix_len(prefix), Some((len, _)) if len == prefix.len())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SCHEMA: &str = "CREATE SCHEMA T;
      CREATE TABLE User { required int64 id; optional string name; }
        PRIMARY KEY(id), ENTITY GROUP ROOT;
      CREATE TABLE Doc { required string path; } PRIMARY KEY(path), ENTITY GROUP ROOT, SCATTER;
      CREATE GLOBAL INDEX UsersByName ON User(name);";

    fn catalog() -> Catalog {
        crate::compile("t.msdl", SCHEMA, None).expect("the test schema compiles")
    }

    fn name() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..12),
            // Bytes the encodings use: escapes, terminators, tags, object ids.
            proptest::collection::vec(
                prop::sample::select(vec![0u8, 1, 2, 0xF7, 0xF8, 0xFE, 0xFF]),
                1..12
            ),
        ]
    }

    proptest! {
        #[test]
        fn untyped_groups_never_overlap(a in name(), b in name(), key in name()) {
            let (pa, pb) = (untyped_group_prefix(&a).unwrap(), untyped_group_prefix(&b).unwrap());
            let row = untyped_row(&pa, &key);
            prop_assert_eq!(owner_of_row(None, &row), RowOwner::Untyped(a.clone()));
            prop_assert_eq!(untyped_key(&pa, &row), Some(&key[..]));
            prop_assert_eq!(untyped_group_name(&pa), Some(a.clone()));
            if a != b {
                prop_assert!(!pb.starts_with(&pa) && !pa.starts_with(&pb));
                prop_assert!(!KeyRange::prefix(pb.clone()).contains(&row));
                prop_assert_eq!(untyped_key(&pb, &row), None);
            }
        }

        #[test]
        fn untyped_and_typed_groups_never_overlap(a in name(), id in any::<i64>(), path in name(), key in name()) {
            let catalog = catalog();
            let user = catalog.group_prefix(catalog.table("User").unwrap(), &[id.into()]).unwrap();
            let path = String::from_utf8_lossy(&path).into_owned();
            let doc = catalog.group_prefix(catalog.table("Doc").unwrap(), &[path.into()]).unwrap();
            let untyped = untyped_group_prefix(&a).unwrap();
            for typed in [&user, &doc] {
                prop_assert!(catalog.is_group_prefix(typed));
                prop_assert!(!typed.starts_with(&untyped) && !untyped.starts_with(typed));
                let mut row = typed.clone();
                row.push(1);
                row.extend_from_slice(&key);
                let owner = owner_of_row(Some(&catalog), &row);
                prop_assert!(matches!(&owner, RowOwner::Typed { prefix, .. } if prefix == typed), "{owner:?}");
            }
            prop_assert!(!catalog.is_group_prefix(&untyped));
            prop_assert_eq!(owner_of_row(Some(&catalog), &untyped_row(&untyped, &key)), RowOwner::Untyped(a));
        }

        #[test]
        fn accepted_split_keys_fall_between_groups(
            a in name(), id in any::<i64>(), path in name(),
            suffix in proptest::collection::vec(any::<u8>(), 0..6), cut in 1usize..24, pick in 0usize..3,
        ) {
            let catalog = catalog();
            let groups = [
                untyped_group_prefix(&a).unwrap(),
                catalog.group_prefix(catalog.table("User").unwrap(), &[id.into()]).unwrap(),
                catalog
                    .group_prefix(catalog.table("Doc").unwrap(), &[String::from_utf8_lossy(&path).into_owned().into()])
                    .unwrap(),
            ];
            let mut at = groups[pick].clone();
            at.extend_from_slice(&suffix);
            at.truncate(cut);
            match check_split_key(Some(&catalog), &at) {
                Ok(()) => for group in &groups {
                    prop_assert!(!(at.len() > group.len() && at.starts_with(group)), "{at:?} inside {group:?}");
                },
                Err(SplitKeyError::InsideGroup { prefix, .. }) => {
                    prop_assert!(at.len() > prefix.len() && at.starts_with(&prefix));
                    prop_assert!(catalog.is_group_prefix(&prefix) || untyped_group_name(&prefix).is_some());
                }
                Err(e) => prop_assert!(false, "{at:?}: {e}"),
            }
        }

        #[test]
        fn any_bytes_have_at_most_one_owner(row in proptest::collection::vec(any::<u8>(), 0..24)) {
            let catalog = catalog();
            match owner_of_row(Some(&catalog), &row) {
                RowOwner::Untyped(name) => {
                    prop_assert!(row.starts_with(&untyped_group_prefix(&name).unwrap()));
                }
                RowOwner::Typed { prefix, .. } => {
                    prop_assert!(catalog.is_group_prefix(&prefix) && row.starts_with(&prefix));
                }
                _ => {}
            }
        }
    }

    #[test]
    fn split_keys_in_a_table_nobody_declared_are_refused() {
        let catalog = catalog();
        let user = catalog.table("User").unwrap().id.0 as u8;
        let index = catalog.index("UsersByName").unwrap().id.0 as u8;
        // A table's start and an index's id are boundaries; no group lives past them.
        assert_eq!(check_split_key(Some(&catalog), &[user]), Ok(()));
        assert_eq!(check_split_key(Some(&catalog), &[index, 7, 7]), Ok(()));
        // Without a schema, or past an id no table has, a later table could straddle it.
        assert_eq!(
            check_split_key(None, &[user, 0x80]),
            Err(SplitKeyError::UnknownTable { id: user.into() })
        );
        assert_eq!(
            check_split_key(Some(&catalog), &[0x30, 1]),
            Err(SplitKeyError::UnknownTable { id: 0x30 })
        );
        // No group lives in the global index, system and unused parts.
        for at in [
            &[GLOBAL_INDEX_TAG, 1, 2][..],
            &[SYSTEM_TAG, 9],
            &[0xF9, 1],
            &[0, 5],
        ] {
            assert_eq!(check_split_key(None, at), Ok(()), "{at:?}");
        }
        let inside = untyped_row(&untyped_group_prefix(b"g2").unwrap(), b"k");
        let error = check_split_key(None, &inside).unwrap_err();
        assert!(error.to_string().contains("untyped \"g2\""), "{error}");
    }

    #[test]
    fn reserved_ranges_lie_outside_every_group() {
        let catalog = catalog();
        let registry = b"\xff\xffmegastore/groups/x";
        assert_eq!(owner_of_row(Some(&catalog), registry), RowOwner::System);
        let global = catalog
            .index_entry_key(
                catalog.index("UsersByName").unwrap(),
                &["ann".into()],
                &[7i64.into()],
            )
            .unwrap();
        assert_eq!(
            owner_of_row(Some(&catalog), &global),
            RowOwner::GlobalIndex("UsersByName".into())
        );
        // The defect of issue 11: an untyped group named 0x01 once held User 42's rows.
        let user = catalog
            .group_prefix(catalog.table("User").unwrap(), &[42i64.into()])
            .unwrap();
        let untyped = untyped_group_prefix(b"\x01").unwrap();
        assert!(!user.starts_with(&untyped));
        assert!(matches!(
            owner_of_row(Some(&catalog), &user),
            RowOwner::Typed { .. }
        ));
    }

    #[test]
    fn names_and_keys_are_checked() {
        assert_eq!(untyped_group_prefix(b""), Err(KeySpaceError::EmptyName));
        assert!(matches!(
            untyped_group_prefix(&[7; GROUP_NAME_BYTES_MAX + 1]),
            Err(KeySpaceError::Limit(LimitError::GroupName { .. }))
        ));
        assert!(untyped_group_prefix(&[0xFF; GROUP_NAME_BYTES_MAX]).is_ok());
        assert_eq!(check_key(b""), Err(KeySpaceError::EmptyKey));
        assert!(check_key(&[0; KEY_BYTES_MAX]).is_ok());
        assert!(check_key(&[0; KEY_BYTES_MAX + 1]).is_err());
        let prefix = untyped_group_prefix(b"g").unwrap();
        let range = untyped_range(&prefix, b"", None);
        assert!(range.contains(&untyped_row(&prefix, b"\xff\xff")));
        assert!(!range.contains(&prefix));
    }
}
