//! The typed half of the public API: entities of the cluster's schema as
//! `megastore.client.v1` messages, and the catalog they are checked against.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use megastore_client::schema_store::load_catalog;
use megastore_rpc::LockdClient;
use megastore_rpc::pb::client as pb;
use megastore_schema::{Catalog, DecodedKey, Entity, FieldValue, IndexEntry, Value};
use tonic::Status;

/// How long a loaded catalog is used before lockd is asked again.
const CATALOG_FRESH: Duration = Duration::from_secs(1);

/// The cluster's catalog, re-read from lockd at most once per [`CATALOG_FRESH`].
pub(crate) struct Catalogs {
    lockd: LockdClient,
    cached: tokio::sync::Mutex<Option<(Arc<Catalog>, Instant)>>,
}

impl Catalogs {
    pub(crate) fn new(lockd: LockdClient) -> Self {
        Self {
            lockd,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) async fn current(&self) -> Result<Arc<Catalog>, Status> {
        let mut cached = self.cached.lock().await;
        if let Some((catalog, at)) = cached.as_ref()
            && at.elapsed() < CATALOG_FRESH
        {
            return Ok(Arc::clone(catalog));
        }
        let loaded = load_catalog(&self.lockd)
            .await
            .map_err(|e| Status::unavailable(format!("reading the schema: {e}")))?;
        let Some((catalog, _)) = loaded else {
            return Err(Status::failed_precondition(
                "no schema is applied to this cluster: run `megastore schema apply FILE --config CLUSTER`",
            ));
        };
        let catalog = Arc::new(catalog);
        *cached = Some((Arc::clone(&catalog), Instant::now()));
        Ok(catalog)
    }
}

fn invalid(field: &str, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {message}"))
}

pub(crate) fn value_from_wire(field: &str, value: pb::Value) -> Result<Value, Status> {
    use pb::value::Kind;
    Ok(
        match value
            .kind
            .ok_or_else(|| invalid(field, "a value needs one of its kinds"))?
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

pub(crate) fn values_from_wire(field: &str, values: Vec<pb::Value>) -> Result<Vec<Value>, Status> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| value_from_wire(&format!("{field}[{i}]"), v))
        .collect()
}

pub(crate) fn value_to_wire(value: Value) -> pb::Value {
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

pub(crate) fn entity_to_wire(entity: Entity) -> pb::Entity {
    pb::Entity {
        table: entity.table,
        fields: fields_to_wire(entity.fields),
    }
}

pub(crate) fn entity_from_wire(field: &str, entity: Option<pb::Entity>) -> Result<Entity, Status> {
    use pb::field_value::Value as F;
    let entity = entity.ok_or_else(|| invalid(field, "give the entity"))?;
    if entity.table.is_empty() {
        return Err(invalid(&format!("{field}.table"), "name the table"));
    }
    let mut fields = BTreeMap::new();
    for (name, value) in entity.fields {
        let at = format!("{field}.fields[{name:?}]");
        let value = match value
            .value
            .ok_or_else(|| invalid(&at, "give a single or repeated value"))?
        {
            F::Single(v) => FieldValue::Single(value_from_wire(&at, v)?),
            F::Repeated(vs) => FieldValue::Repeated(values_from_wire(&at, vs.values)?),
        };
        fields.insert(name, value);
    }
    Ok(Entity {
        table: entity.table,
        fields,
    })
}

pub(crate) fn index_entry_to_wire(entry: IndexEntry) -> pb::IndexEntry {
    pb::IndexEntry {
        index: entry.index,
        values: entry.values.into_iter().map(value_to_wire).collect(),
        primary_key: entry.primary_key.into_iter().map(value_to_wire).collect(),
        stored: fields_to_wire(entry.stored),
    }
}

/// A typed group's row, decoded (`None`: not an entity's or an index entry's row of
/// this schema).
pub(crate) fn typed_row_to_wire(catalog: &Catalog, row: &[u8]) -> Option<pb::TypedRow> {
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
