//! Row keys of entities and index entries, and decoding a row key back.

use megastore_rowstore::{KeyRange, display_key};

use super::entity::EntityError;
use crate::catalog::{Catalog, Index, ObjectId, Table, TableKind};
use crate::key::{KeyPart, decode_tuple_prefix, encode_tuple_into, scatter_prefix};
use crate::keyspace::{GLOBAL_INDEX_TAG, LONG_OBJECT_ID as LONG_ID_MARKER};
use crate::syntax::ast::IndexKind;
use crate::types::Value;

/// Appends an object id in an order-preserving, self-delimiting form: ids below
/// `0xF8` are one byte; larger ids are `0xF8` followed by the id as big-endian u32.
pub fn encode_object_id(id: ObjectId, out: &mut Vec<u8>) {
    match u8::try_from(id.0) {
        Ok(byte) if byte < LONG_ID_MARKER => out.push(byte),
        _ => {
            out.push(LONG_ID_MARKER);
            out.extend_from_slice(&id.0.to_be_bytes());
        }
    }
}

/// Decodes an object id from the front of `input`, advancing it.
pub fn decode_object_id(input: &mut &[u8]) -> Option<ObjectId> {
    let (&first, rest) = input.split_first()?;
    if first < LONG_ID_MARKER {
        *input = rest;
        return Some(ObjectId(u32::from(first)));
    }
    if first != LONG_ID_MARKER || rest.len() < 4 {
        return None;
    }
    let id = u32::from_be_bytes(rest[..4].try_into().expect("four bytes"));
    if id < u32::from(LONG_ID_MARKER) {
        return None; // not the canonical form
    }
    *input = &rest[4..];
    Some(ObjectId(id))
}

/// What a row key holds.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodedKey {
    /// An entity's row.
    Entity {
        /// Its table.
        table: ObjectId,
        /// Its full primary key.
        primary_key: Vec<Value>,
    },
    /// An index entry's row.
    IndexEntry {
        /// The index.
        index: ObjectId,
        /// The indexed values (all of them, group key included).
        values: Vec<Value>,
        /// The indexed entity's full primary key.
        primary_key: Vec<Value>,
    },
}

fn key_error(object: &str) -> impl Fn(crate::key::KeyError) -> EntityError + '_ {
    move |source| EntityError::Key {
        object: object.to_string(),
        source,
    }
}

impl Catalog {
    /// The table named `name`, or an error naming it.
    pub fn require_table(&self, name: &str) -> Result<&Table, EntityError> {
        self.table(name)
            .ok_or_else(|| EntityError::UnknownTable(name.to_string()))
    }

    /// The index named `name`, or an error naming it.
    pub fn require_index(&self, name: &str) -> Result<&Index, EntityError> {
        self.index(name)
            .ok_or_else(|| EntityError::UnknownIndex(name.to_string()))
    }

    /// The key prefix shared by every row of the entity group whose root (of table
    /// `root`) has primary key `root_key`.
    pub fn group_prefix(&self, root: &Table, root_key: &[Value]) -> Result<Vec<u8>, EntityError> {
        let root = self.root_of(root);
        let mut encoded_key = Vec::new();
        encode_tuple_into(&root.key_parts(), root_key, &mut encoded_key)
            .map_err(key_error(&root.name))?;
        let mut prefix = Vec::with_capacity(encoded_key.len() + 3);
        encode_object_id(root.id, &mut prefix);
        if root.is_scattered() {
            prefix.extend_from_slice(&scatter_prefix(&encoded_key));
        }
        prefix.extend_from_slice(&encoded_key);
        Ok(prefix)
    }

    /// The key range holding exactly the rows of one entity group (entities, local
    /// and inline index entries, and the root row with its log).
    pub fn group_range(&self, root: &Table, root_key: &[Value]) -> Result<KeyRange, EntityError> {
        Ok(KeyRange::prefix(self.group_prefix(root, root_key)?))
    }

    /// The row key of the entity of `table` with primary key `primary_key`.
    pub fn entity_row_key(
        &self,
        table: &Table,
        primary_key: &[Value],
    ) -> Result<Vec<u8>, EntityError> {
        let parts = table.key_parts();
        if primary_key.len() != parts.len() {
            let source = crate::key::KeyError::Arity {
                expected: parts.len(),
                found: primary_key.len(),
            };
            return Err(EntityError::Key {
                object: table.name.clone(),
                source,
            });
        }
        let g = self.group_key_len(table);
        let mut key = self.group_prefix(table, &primary_key[..g])?;
        encode_object_id(table.id, &mut key);
        encode_tuple_into(&parts[g..], &primary_key[g..], &mut key)
            .map_err(key_error(&table.name))?;
        Ok(key)
    }

    /// The rows of `table` in one entity group (all of them, in key order).
    pub fn table_range(&self, table: &Table, root_key: &[Value]) -> Result<KeyRange, EntityError> {
        let mut prefix = self.group_prefix(table, root_key)?;
        encode_object_id(table.id, &mut prefix);
        Ok(KeyRange::prefix(prefix))
    }

    /// The shape of an index's values.
    pub fn index_parts(&self, index: &Index) -> Vec<KeyPart> {
        let table = self
            .table_by_id(index.table)
            .expect("catalog invariant: an index's table exists");
        index
            .columns
            .iter()
            .map(|k| KeyPart {
                ty: table.column_by_id(k.column).ty,
                direction: k.direction,
            })
            .collect()
    }

    /// The row key of one index entry. `values` are all the index's values (group key
    /// included), `primary_key` the entity's full key.
    pub fn index_entry_key(
        &self,
        index: &Index,
        values: &[Value],
        primary_key: &[Value],
    ) -> Result<Vec<u8>, EntityError> {
        let table = self
            .table_by_id(index.table)
            .expect("catalog invariant: an index's table exists");
        let (value_parts, key_parts) = (self.index_parts(index), table.key_parts());
        let mut key = Vec::new();
        let skip = match index.kind {
            IndexKind::Global => {
                key.push(GLOBAL_INDEX_TAG);
                encode_object_id(index.id, &mut key);
                0
            }
            IndexKind::Local | IndexKind::Inline => {
                let g = self.group_key_len(table);
                key = self.group_prefix(table, primary_key.get(..g).unwrap_or(primary_key))?;
                encode_object_id(index.id, &mut key);
                g
            }
        };
        let values = values.get(skip..).unwrap_or_default();
        encode_tuple_into(&value_parts[skip..], values, &mut key)
            .map_err(key_error(&index.name))?;
        let primary_key = primary_key.get(skip..).unwrap_or_default();
        encode_tuple_into(&key_parts[skip..], primary_key, &mut key)
            .map_err(key_error(&index.name))?;
        Ok(key)
    }

    /// The entries of `index` whose leading values are `leading`. A local or inline
    /// index needs at least the group key; for an inline index, the parent's key gives
    /// exactly the parent's entries.
    pub fn index_range(&self, index: &Index, leading: &[Value]) -> Result<KeyRange, EntityError> {
        self.index_prefix(index, leading).map(KeyRange::prefix)
    }

    /// The key prefix every entry of `index` whose leading values are `leading` starts
    /// with (see [`Catalog::index_range`]).
    pub(crate) fn index_prefix(
        &self,
        index: &Index,
        leading: &[Value],
    ) -> Result<Vec<u8>, EntityError> {
        let table = self
            .table_by_id(index.table)
            .expect("catalog invariant: an index's table exists");
        let parts = self.index_parts(index);
        if leading.len() > parts.len() {
            let source = crate::key::KeyError::Arity {
                expected: parts.len(),
                found: leading.len(),
            };
            return Err(EntityError::Key {
                object: index.name.clone(),
                source,
            });
        }
        let mut prefix = Vec::new();
        let skip = match index.kind {
            IndexKind::Global => {
                prefix.push(GLOBAL_INDEX_TAG);
                encode_object_id(index.id, &mut prefix);
                0
            }
            IndexKind::Local | IndexKind::Inline => {
                let g = self.group_key_len(table);
                if leading.len() < g {
                    let source = crate::key::KeyError::Arity {
                        expected: g,
                        found: leading.len(),
                    };
                    return Err(EntityError::Key {
                        object: index.name.clone(),
                        source,
                    });
                }
                prefix = self.group_prefix(table, &leading[..g])?;
                encode_object_id(index.id, &mut prefix);
                g
            }
        };
        encode_tuple_into(&parts[skip..leading.len()], &leading[skip..], &mut prefix)
            .map_err(key_error(&index.name))?;
        Ok(prefix)
    }

    /// Says what a row key holds under this catalog.
    pub fn decode_row_key(&self, row: &[u8]) -> Result<DecodedKey, EntityError> {
        let malformed = |detail: String| EntityError::MalformedRow {
            row: display_key(row),
            detail,
        };
        if let Some(mut input) = row.strip_prefix(&[GLOBAL_INDEX_TAG]) {
            let id = decode_object_id(&mut input)
                .ok_or_else(|| malformed("no index id after the global index tag".into()))?;
            let index = self
                .index_by_id(id)
                .ok_or_else(|| malformed(format!("unknown index id {}", id.0)))?;
            if index.kind != IndexKind::Global {
                return Err(malformed(format!(
                    "{} index `{}` outside an entity group",
                    index.kind.keyword(),
                    index.name
                )));
            }
            let table = self
                .table_by_id(index.table)
                .expect("catalog invariant: an index's table exists");
            let values = decode_tuple_prefix(&self.index_parts(index), &mut input)
                .map_err(|e| malformed(e.to_string()))?;
            let primary_key = decode_tuple_prefix(&table.key_parts(), &mut input)
                .map_err(|e| malformed(e.to_string()))?;
            return finish(
                input,
                DecodedKey::IndexEntry {
                    index: index.id,
                    values,
                    primary_key,
                },
            )
            .map_err(malformed);
        }
        let mut input = row;
        let first = decode_object_id(&mut input).ok_or_else(|| malformed("no object id".into()))?;
        let root = self
            .table_by_id(first)
            .ok_or_else(|| malformed(format!("unknown object id {}", first.0)))?;
        let TableKind::Root { scatter } = root.kind else {
            return Err(malformed(format!(
                "child table `{}` outside an entity group",
                root.name
            )));
        };
        let scatter_bytes = if scatter {
            let (bytes, rest) = input
                .split_at_checked(2)
                .ok_or_else(|| malformed("truncated scatter prefix".into()))?;
            input = rest;
            Some([bytes[0], bytes[1]])
        } else {
            None
        };
        let before_key = input;
        let root_key = decode_tuple_prefix(&root.key_parts(), &mut input)
            .map_err(|e| malformed(e.to_string()))?;
        if let Some(found) = scatter_bytes {
            let encoded_key = &before_key[..before_key.len() - input.len()];
            if found != scatter_prefix(encoded_key) {
                return Err(malformed(
                    "scatter prefix does not match the root key".into(),
                ));
            }
        }
        let second = decode_object_id(&mut input)
            .ok_or_else(|| malformed("no table or index id after the group key".into()))?;
        let g = root_key.len();
        if let Some(table) = self.table_by_id(second) {
            if self.root_of(table).id != root.id {
                return Err(malformed(format!(
                    "table `{}` inside a `{}` entity group",
                    table.name, root.name
                )));
            }
            let rest = decode_tuple_prefix(&table.key_parts()[g..], &mut input)
                .map_err(|e| malformed(e.to_string()))?;
            let primary_key = root_key.into_iter().chain(rest).collect();
            return finish(
                input,
                DecodedKey::Entity {
                    table: table.id,
                    primary_key,
                },
            )
            .map_err(malformed);
        }
        let index = self
            .index_by_id(second)
            .ok_or_else(|| malformed(format!("unknown object id {}", second.0)))?;
        let table = self
            .table_by_id(index.table)
            .expect("catalog invariant: an index's table exists");
        if index.kind == IndexKind::Global || self.root_of(table).id != root.id {
            return Err(malformed(format!(
                "index `{}` inside a `{}` entity group",
                index.name, root.name
            )));
        }
        let values_rest = decode_tuple_prefix(&self.index_parts(index)[g..], &mut input)
            .map_err(|e| malformed(e.to_string()))?;
        let key_rest = decode_tuple_prefix(&table.key_parts()[g..], &mut input)
            .map_err(|e| malformed(e.to_string()))?;
        let values = root_key.iter().cloned().chain(values_rest).collect();
        let primary_key = root_key.into_iter().chain(key_rest).collect();
        finish(
            input,
            DecodedKey::IndexEntry {
                index: index.id,
                values,
                primary_key,
            },
        )
        .map_err(malformed)
    }
}

fn finish(rest: &[u8], decoded: DecodedKey) -> Result<DecodedKey, String> {
    if rest.is_empty() {
        Ok(decoded)
    } else {
        Err(format!("{} bytes after the key", rest.len()))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn object_ids_round_trip_in_order(a: u32, b: u32) {
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            encode_object_id(ObjectId(a), &mut ea);
            encode_object_id(ObjectId(b), &mut eb);
            prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
            ea.push(7);
            let mut input = ea.as_slice();
            prop_assert_eq!(decode_object_id(&mut input), Some(ObjectId(a)));
            prop_assert_eq!(input, &[7u8][..]);
        }
    }

    #[test]
    fn non_canonical_long_ids_are_rejected() {
        let mut input: &[u8] = &[LONG_ID_MARKER, 0, 0, 0, 5];
        assert_eq!(decode_object_id(&mut input), None);
        let mut input: &[u8] = &[0xF9];
        assert_eq!(decode_object_id(&mut input), None);
    }
}
