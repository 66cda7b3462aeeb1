//! Entities to row mutations (with their index entries) and rows back to entities.

use std::collections::{BTreeMap, BTreeSet};

use megastore_rowstore::{Row, RowMutation, Timestamp, display_key};

use super::entity::{Entity, EntityError, FieldValue};
use super::keys::DecodedKey;
use crate::catalog::{Catalog, Column, Index, Table};
use crate::key::{KeyPart, decode_value, encode_value_into};
use crate::syntax::ast::IndexKind;
use crate::types::{Direction, Label, Value};

/// The row mutations one entity write produces.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EntityMutations {
    /// Rows inside the entity group (the entity, local and inline index entries):
    /// applied atomically with the log entry.
    pub group: Vec<RowMutation>,
    /// Global index entries, outside every entity group (`0xFD…`). A writer puts them
    /// in its group's mirror (`megastore_paxos::mirror_row_of`), which every replica
    /// with data copies here as it applies the entry.
    pub global: Vec<RowMutation>,
}

/// An index entry read back from its row.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexEntry {
    /// The index's name.
    pub index: String,
    /// The indexed values, in index order.
    pub values: Vec<Value>,
    /// The indexed entity's full primary key.
    pub primary_key: Vec<Value>,
    /// `STORING` properties that were present.
    pub stored: BTreeMap<String, FieldValue>,
}

/// The cell name of a property: `Table.property`.
pub fn column_name(table: &Table, column: &Column) -> Vec<u8> {
    format!("{}.{}", table.name, column.name).into_bytes()
}

fn encode_field(value: &FieldValue) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        FieldValue::Single(v) => encode_value_into(v, Direction::Asc, &mut out),
        FieldValue::Repeated(vs) => vs
            .iter()
            .for_each(|v| encode_value_into(v, Direction::Asc, &mut out)),
    }
    out
}

fn decode_field(column: &Column, bytes: &[u8]) -> Result<FieldValue, String> {
    let part = KeyPart::asc(column.ty);
    let mut input = bytes;
    if column.label == Label::Repeated {
        let mut values = Vec::new();
        while !input.is_empty() {
            values.push(decode_value(part, values.len(), &mut input).map_err(|e| e.to_string())?);
        }
        return Ok(FieldValue::Repeated(values));
    }
    let value = decode_value(part, 0, &mut input).map_err(|e| e.to_string())?;
    if !input.is_empty() {
        return Err(format!("{} bytes after the value", input.len()));
    }
    Ok(FieldValue::Single(value))
}

/// An index entry as the write path computes it: its row key and stored cells.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct EntryRow {
    key: Vec<u8>,
    cells: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Catalog {
    /// Checks `entity` against its table: known properties of the right types and
    /// cardinality, every required (and key) property present.
    pub fn validate_entity<'c>(&'c self, entity: &Entity) -> Result<&'c Table, EntityError> {
        let table = self.require_table(&entity.table)?;
        for (name, value) in &entity.fields {
            let column = table
                .column(name)
                .ok_or_else(|| EntityError::UnknownColumn {
                    table: table.name.clone(),
                    column: name.clone(),
                })?;
            let repeated = column.label == Label::Repeated;
            let values: &[Value] = match (value, repeated) {
                (FieldValue::Single(v), false) => std::slice::from_ref(v),
                (FieldValue::Repeated(vs), true) => vs,
                _ => {
                    return Err(EntityError::Cardinality {
                        table: table.name.clone(),
                        column: name.clone(),
                        repeated,
                    });
                }
            };
            if let Some(bad) = values.iter().find(|v| v.scalar_type() != column.ty) {
                return Err(EntityError::TypeMismatch {
                    table: table.name.clone(),
                    column: name.clone(),
                    expected: column.ty,
                    found: bad.scalar_type(),
                });
            }
        }
        if let Some(missing) = table
            .columns
            .iter()
            .find(|c| c.label == Label::Required && !entity.fields.contains_key(&c.name))
        {
            return Err(EntityError::MissingRequired {
                table: table.name.clone(),
                column: missing.name.clone(),
            });
        }
        Ok(table)
    }

    /// The entity's primary key values, in key order.
    pub fn primary_key_of(&self, entity: &Entity) -> Result<Vec<Value>, EntityError> {
        let table = self.require_table(&entity.table)?;
        table
            .primary_key
            .iter()
            .map(|k| {
                let column = table.column_by_id(k.column);
                entity
                    .value(&column.name)
                    .cloned()
                    .ok_or_else(|| EntityError::MissingRequired {
                        table: table.name.clone(),
                        column: column.name.clone(),
                    })
            })
            .collect()
    }

    /// The row mutations that write `new` at `timestamp`, replacing `old`.
    ///
    /// `old` must be the entity exactly as it is at the write's read position (`None`
    /// if it does not exist): the index entries it had are deleted from it.
    pub fn put_mutations(
        &self,
        old: Option<&Entity>,
        new: &Entity,
        timestamp: Timestamp,
    ) -> Result<EntityMutations, EntityError> {
        let table = self.validate_entity(new)?;
        let key = self.primary_key_of(new)?;
        if let Some(old) = old {
            self.validate_entity(old)?;
            if old.table != new.table || self.primary_key_of(old)? != key {
                return Err(EntityError::DifferentEntity {
                    table: table.name.clone(),
                });
            }
        }
        let mut row = RowMutation::new(self.entity_row_key(table, &key)?).set(
            table.name.as_bytes(),
            timestamp,
            Vec::new(),
        );
        for column in table.columns.iter().filter(|c| !table.is_key_column(c.id)) {
            let name = column_name(table, column);
            match (
                new.fields.get(&column.name),
                old.and_then(|o| o.fields.get(&column.name)),
            ) {
                (Some(value), _) => row = row.set(name, timestamp, encode_field(value)),
                (None, Some(_)) => row = row.delete_column(name, timestamp),
                (None, None) => {}
            }
        }
        let mut mutations = EntityMutations {
            group: vec![row],
            global: Vec::new(),
        };
        self.index_mutations(table, old, Some(new), &key, timestamp, &mut mutations)?;
        Ok(mutations)
    }

    /// The row mutations that delete `old` at `timestamp`: all its columns and index
    /// entries are deleted as of then; its row (which may be the root row) stays.
    pub fn delete_mutations(
        &self,
        old: &Entity,
        timestamp: Timestamp,
    ) -> Result<EntityMutations, EntityError> {
        let table = self.validate_entity(old)?;
        let key = self.primary_key_of(old)?;
        let mut row = RowMutation::new(self.entity_row_key(table, &key)?)
            .delete_column(table.name.as_bytes(), timestamp);
        for column in table.columns.iter().filter(|c| !table.is_key_column(c.id)) {
            row = row.delete_column(column_name(table, column), timestamp);
        }
        let mut mutations = EntityMutations {
            group: vec![row],
            global: Vec::new(),
        };
        self.index_mutations(table, Some(old), None, &key, timestamp, &mut mutations)?;
        Ok(mutations)
    }

    fn index_mutations(
        &self,
        table: &Table,
        old: Option<&Entity>,
        new: Option<&Entity>,
        key: &[Value],
        timestamp: Timestamp,
        out: &mut EntityMutations,
    ) -> Result<(), EntityError> {
        for index in self.indexes_on(table) {
            let old_entries = match old {
                Some(e) => self.index_entries(index, table, e, key)?,
                None => BTreeSet::new(),
            };
            let new_entries = match new {
                Some(e) => self.index_entries(index, table, e, key)?,
                None => BTreeSet::new(),
            };
            let target = if index.kind == IndexKind::Global {
                &mut out.global
            } else {
                &mut out.group
            };
            let new_keys: BTreeSet<&Vec<u8>> = new_entries.iter().map(|e| &e.key).collect();
            for gone in old_entries.iter().filter(|e| !new_keys.contains(&e.key)) {
                let mut m = RowMutation::new(gone.key.clone())
                    .delete_column(index.name.as_bytes(), timestamp);
                for (column, _) in &gone.cells {
                    m = m.delete_column(column.clone(), timestamp);
                }
                target.push(m);
            }
            for entry in new_entries.difference(&old_entries) {
                let mut m = RowMutation::new(entry.key.clone()).set(
                    index.name.as_bytes(),
                    timestamp,
                    Vec::new(),
                );
                let old_cells = old_entries
                    .iter()
                    .find(|e| e.key == entry.key)
                    .map(|e| &e.cells);
                for (column, value) in &entry.cells {
                    m = m.set(column.clone(), timestamp, value.clone());
                }
                // A stored property the entry no longer has.
                for (column, _) in old_cells
                    .into_iter()
                    .flatten()
                    .filter(|(c, _)| !entry.cells.iter().any(|(n, _)| n == c))
                {
                    m = m.delete_column(column.clone(), timestamp);
                }
                target.push(m);
            }
        }
        Ok(())
    }

    /// The entries `entity` has in `index`: one per element of a repeated indexed
    /// column (distinct elements), none if an indexed property is absent.
    fn index_entries(
        &self,
        index: &Index,
        table: &Table,
        entity: &Entity,
        key: &[Value],
    ) -> Result<BTreeSet<EntryRow>, EntityError> {
        let mut tuples: Vec<Vec<Value>> = vec![Vec::new()];
        for k in &index.columns {
            let column = table.column_by_id(k.column);
            let choices: Vec<Value> = match entity.fields.get(&column.name) {
                None => return Ok(BTreeSet::new()),
                Some(FieldValue::Single(v)) => vec![v.clone()],
                Some(FieldValue::Repeated(vs)) => {
                    let mut distinct: Vec<Value> = Vec::new();
                    for v in vs {
                        if !distinct
                            .iter()
                            .any(|d| d.key_cmp(v) == Some(std::cmp::Ordering::Equal))
                        {
                            distinct.push(v.clone());
                        }
                    }
                    distinct
                }
            };
            tuples = tuples
                .into_iter()
                .flat_map(|t| {
                    choices
                        .iter()
                        .map(move |c| [t.clone(), vec![c.clone()]].concat())
                })
                .collect();
        }
        let cells: Vec<(Vec<u8>, Vec<u8>)> = index
            .storing
            .iter()
            .map(|id| table.column_by_id(*id))
            .filter_map(|c| {
                entity
                    .fields
                    .get(&c.name)
                    .map(|v| (column_name(table, c), encode_field(v)))
            })
            .collect();
        tuples
            .into_iter()
            .map(|values| {
                Ok(EntryRow {
                    key: self.index_entry_key(index, &values, key)?,
                    cells: cells.clone(),
                })
            })
            .collect()
    }

    /// The entity stored in `row`, or `None` if the row holds no live entity (its
    /// marker is absent at the read's timestamp). Cells that are not the table's
    /// properties (the root row's log, say) are ignored.
    pub fn entity_from_row(&self, row: &Row) -> Result<Option<Entity>, EntityError> {
        let DecodedKey::Entity { table, primary_key } = self.decode_row_key(&row.key)? else {
            return Err(EntityError::MalformedRow {
                row: display_key(&row.key),
                detail: "an index entry, not an entity".into(),
            });
        };
        let table = self
            .table_by_id(table)
            .expect("decode_row_key returns known tables");
        if row.value(table.name.as_bytes()).is_none() {
            return Ok(None);
        }
        let mut entity = Entity::new(&table.name);
        for (k, value) in table.primary_key.iter().zip(primary_key) {
            entity.fields.insert(
                table.column_by_id(k.column).name.clone(),
                FieldValue::Single(value),
            );
        }
        for column in table.columns.iter().filter(|c| !table.is_key_column(c.id)) {
            if let Some(bytes) = row.value(&column_name(table, column)) {
                let value =
                    decode_field(column, bytes).map_err(|detail| EntityError::MalformedRow {
                        row: display_key(&row.key),
                        detail: format!("`{}.{}`: {detail}", table.name, column.name),
                    })?;
                entity.fields.insert(column.name.clone(), value);
            }
        }
        Ok(Some(entity))
    }

    /// Gives each entity of `parents` (all of `parent`'s table) its virtual repeated
    /// property of inline index `index`: the entries among `entries` whose leading
    /// values are its primary key, in their order (an empty list when none).
    pub fn attach_inline_entries(
        &self,
        parent: &Table,
        index: &Index,
        parents: &mut [Entity],
        entries: &[IndexEntry],
    ) -> Result<(), EntityError> {
        let key_len = parent.primary_key.len();
        for entity in parents {
            let key = self.primary_key_of(entity)?;
            let own = entries
                .iter()
                .filter(|e| e.index == index.name && e.values.get(..key_len) == Some(&key[..]))
                .cloned()
                .collect();
            entity.inline.insert(index.name.clone(), own);
        }
        Ok(())
    }

    /// The index entry stored in `row`, or `None` if its marker is absent.
    pub fn index_entry_from_row(&self, row: &Row) -> Result<Option<IndexEntry>, EntityError> {
        let DecodedKey::IndexEntry {
            index,
            values,
            primary_key,
        } = self.decode_row_key(&row.key)?
        else {
            return Err(EntityError::MalformedRow {
                row: display_key(&row.key),
                detail: "an entity, not an index entry".into(),
            });
        };
        let index = self
            .index_by_id(index)
            .expect("decode_row_key returns known indexes");
        if row.value(index.name.as_bytes()).is_none() {
            return Ok(None);
        }
        let table = self
            .table_by_id(index.table)
            .expect("catalog invariant: an index's table exists");
        let mut stored = BTreeMap::new();
        for column in index.storing.iter().map(|id| table.column_by_id(*id)) {
            if let Some(bytes) = row.value(&column_name(table, column)) {
                let value =
                    decode_field(column, bytes).map_err(|detail| EntityError::MalformedRow {
                        row: display_key(&row.key),
                        detail,
                    })?;
                stored.insert(column.name.clone(), value);
            }
        }
        Ok(Some(IndexEntry {
            index: index.name.clone(),
            values,
            primary_key,
            stored,
        }))
    }
}
