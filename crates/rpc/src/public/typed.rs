//! The typed half of the public API: entities, values and index entries of the
//! cluster's schema as `megastore.client.v1` messages.

use std::collections::BTreeMap;
use std::ops::Bound;

use megastore_schema::{
    Catalog, DecodedKey, Entity, FieldValue, IndexEntry, IndexQuery, PageToken, Value,
};
use tonic::Status;

use super::invalid_argument;
use crate::pb::client as pb;

/// A schema value from the API (`field` names it in an error).
pub fn value_from_wire(field: &str, value: pb::Value) -> Result<Value, Status> {
    use pb::value::Kind;
    Ok(
        match value
            .kind
            .ok_or_else(|| invalid_argument(field, "a value needs one of its kinds"))?
        {
            Kind::Int32(v) => Value::Int32(v),
            Kind::Int64(v) => Value::Int64(v),
            Kind::Uint32(v) => Value::UInt32(v),
            Kind::Uint64(v) => Value::UInt64(v),
            Kind::Float(v) => Value::Float(v),
            Kind::Double(v) => Value::Double(v),
            Kind::Bool(v) => Value::Bool(v),
            Kind::String(v) => Value::String(v),
            Kind::Bytes(v) => Value::Bytes(v),
            Kind::TimestampMicros(v) => Value::Timestamp(v),
        },
    )
}

/// Schema values from the API, each named `field[i]` in an error.
pub fn values_from_wire(field: &str, values: Vec<pb::Value>) -> Result<Vec<Value>, Status> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| value_from_wire(&format!("{field}[{i}]"), v))
        .collect()
}

/// A schema value as the API carries it.
pub fn value_to_wire(value: Value) -> pb::Value {
    use pb::value::Kind;
    let kind = match value {
        Value::Int32(v) => Kind::Int32(v),
        Value::Int64(v) => Kind::Int64(v),
        Value::UInt32(v) => Kind::Uint32(v),
        Value::UInt64(v) => Kind::Uint64(v),
        Value::Float(v) => Kind::Float(v),
        Value::Double(v) => Kind::Double(v),
        Value::Bool(v) => Kind::Bool(v),
        Value::String(v) => Kind::String(v),
        Value::Bytes(v) => Kind::Bytes(v),
        Value::Timestamp(v) => Kind::TimestampMicros(v),
    };
    pb::Value { kind: Some(kind) }
}

fn fields_to_wire(
    fields: BTreeMap<String, FieldValue>,
) -> std::collections::HashMap<String, pb::FieldValue> {
    use pb::field_value::Value as F;
    fields
        .into_iter()
        .map(|(name, value)| {
            let value = match value {
                FieldValue::Single(v) => F::Single(value_to_wire(v)),
                FieldValue::Repeated(vs) => F::Repeated(pb::Values {
                    values: vs.into_iter().map(value_to_wire).collect(),
                }),
            };
            (name, pb::FieldValue { value: Some(value) })
        })
        .collect()
}

/// An entity as the API returns it.
pub fn entity_to_wire(entity: Entity) -> pb::Entity {
    pb::Entity {
        table: entity.table,
        fields: fields_to_wire(entity.fields),
        inline: entity
            .inline
            .into_iter()
            .map(|(index, entries)| {
                let entries = entries.into_iter().map(index_entry_to_wire).collect();
                (index, pb::IndexEntries { entries })
            })
            .collect(),
    }
}

/// An entity from the API: a table and its fields (`field` names it in an error).
pub fn entity_from_wire(field: &str, entity: Option<pb::Entity>) -> Result<Entity, Status> {
    use pb::field_value::Value as F;
    let entity = entity.ok_or_else(|| invalid_argument(field, "give the entity"))?;
    if entity.table.is_empty() {
        return Err(invalid_argument(
            &format!("{field}.table"),
            "name the table",
        ));
    }
    let mut fields = BTreeMap::new();
    for (name, value) in entity.fields {
        let at = format!("{field}.fields[{name:?}]");
        let value = match value
            .value
            .ok_or_else(|| invalid_argument(&at, "give a single or repeated value"))?
        {
            F::Single(v) => FieldValue::Single(value_from_wire(&at, v)?),
            F::Repeated(vs) => FieldValue::Repeated(values_from_wire(&at, vs.values)?),
        };
        fields.insert(name, value);
    }
    Ok(Entity {
        table: entity.table,
        fields,
        inline: BTreeMap::new(),
    })
}

/// An index entry as the API returns it.
pub fn index_entry_to_wire(entry: IndexEntry) -> pb::IndexEntry {
    pb::IndexEntry {
        index: entry.index,
        values: entry.values.into_iter().map(value_to_wire).collect(),
        primary_key: entry.primary_key.into_iter().map(value_to_wire).collect(),
        stored: fields_to_wire(entry.stored),
    }
}

/// A typed group's row, decoded (`None`: not an entity's or an index entry's row of
/// this schema).
pub fn typed_row_to_wire(catalog: &Catalog, row: &[u8]) -> Option<pb::TypedRow> {
    use pb::typed_row::{EntityKey, IndexKey, Row};
    let decoded = match catalog.decode_row_key(row).ok()? {
        DecodedKey::Entity { table, primary_key } => Row::Entity(EntityKey {
            table: catalog.table_by_id(table)?.name.clone(),
            key: primary_key.into_iter().map(value_to_wire).collect(),
        }),
        DecodedKey::IndexEntry {
            index,
            values,
            primary_key,
        } => Row::IndexEntry(IndexKey {
            index: catalog.index_by_id(index)?.name.clone(),
            values: values.into_iter().map(value_to_wire).collect(),
            primary_key: primary_key.into_iter().map(value_to_wire).collect(),
        }),
    };
    Some(pb::TypedRow { row: Some(decoded) })
}

/// The parts of an index query as the API carries them (`ScanIndexRequest`,
/// `ScanGlobalIndexRequest`).
pub struct IndexQueryWire {
    /// The index's name.
    pub index: String,
    /// Leading values.
    pub leading: Vec<pb::Value>,
    /// A range on the next column.
    pub lower: Option<pb::IndexBound>,
    /// Its other end.
    pub upper: Option<pb::IndexBound>,
    /// Against index order.
    pub reverse: bool,
    /// Entries per page (0: no limit).
    pub limit: u32,
    /// Where the page starts (empty: the first).
    pub page_token: Vec<u8>,
}

/// An index query from the API; each field named in an error.
pub fn index_query_from_wire(wire: IndexQueryWire) -> Result<IndexQuery, Status> {
    let bound = |field: &str, bound: Option<pb::IndexBound>| -> Result<Bound<Value>, Status> {
        let Some(bound) = bound else {
            return Ok(Bound::Unbounded);
        };
        let value = bound
            .value
            .ok_or_else(|| invalid_argument(&format!("{field}.value"), "a bound needs a value"))?;
        let value = value_from_wire(&format!("{field}.value"), value)?;
        Ok(if bound.inclusive {
            Bound::Included(value)
        } else {
            Bound::Excluded(value)
        })
    };
    Ok(IndexQuery {
        index: wire.index,
        equal: values_from_wire("leading", wire.leading)?,
        lower: bound("lower", wire.lower)?,
        upper: bound("upper", wire.upper)?,
        reverse: wire.reverse,
        limit: (wire.limit > 0).then_some(wire.limit as usize),
        page: (!wire.page_token.is_empty()).then(|| PageToken::from_bytes(wire.page_token)),
    })
}

/// A page token as the API returns it (empty: no next page).
pub fn page_token_to_wire(token: Option<PageToken>) -> Vec<u8> {
    token.map(|t| t.as_bytes().to_vec()).unwrap_or_default()
}
