//! Typed access to the entities of a schema inside a transaction: get, put and delete
//! by primary key, scans of a table or a local index within the group. The schema
//! crate decides where an entity and its index entries live (docs/architecture.md, "Data layout"); this
//! module only reads and stages those rows in the transaction.
//!
//! A global index's entries live outside every entity group; a put or delete writes
//! them into the group's mirror, and every full and read-only replica copies the
//! mirror to the global index when it applies the entry (docs/protocol.md, "Global
//! indexes").

use megastore_paxos::{CellWrite, DataQuery, ReadMode, ReadPath, RowWrite, mirror_row_of};
use megastore_schema::{
    Catalog, Entity, EntityError, EntityMutations, IndexEntry, IndexKind, IndexQuery, PageToken,
    Value,
};
use megastore_types::{EgId, Position, ReplicaId};

use crate::client::{Client, ClientError};
use crate::txn::Transaction;

fn schema(e: EntityError) -> ClientError {
    ClientError::Schema(e.to_string())
}

/// The entity group that holds the entities of `table` under root key `root_key`.
pub fn entity_group(
    catalog: &Catalog,
    table: &str,
    root_key: &[Value],
) -> Result<EgId, ClientError> {
    let table = catalog.require_table(table).map_err(schema)?;
    catalog
        .group_prefix(table, root_key)
        .map(EgId)
        .map_err(schema)
}

/// One page of a local or inline index query.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexPage {
    /// The entries, in the query's order.
    pub entries: Vec<IndexEntry>,
    /// Where the next page starts (`None`: this was the last).
    pub next: Option<PageToken>,
}

/// One entity read outside a transaction, and how it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityRead {
    /// The entity (`None`: none at the position read).
    pub entity: Option<Entity>,
    /// The position the read shows (`None` for an inconsistent read).
    pub position: Option<Position>,
    /// The replica that served it.
    pub replica: ReplicaId,
    /// How.
    pub path: ReadPath,
}

/// A group as people name it: a typed group by its root entity, `User(7)` (when
/// `catalog` knows it), an untyped one by its name; otherwise its escaped id.
pub fn describe_group(catalog: Option<&Catalog>, eg: &EgId) -> String {
    if let Some(name) = crate::groups::group_name(eg) {
        return format!("{:?}", String::from_utf8_lossy(&name));
    }
    let root = catalog.and_then(|catalog| {
        let megastore_schema::keyspace::RowOwner::Typed { root, .. } =
            megastore_schema::keyspace::owner_of_row(Some(catalog), &eg.0)
        else {
            return None;
        };
        let table = catalog.table(&root)?;
        let mut root_row = eg.0.clone();
        megastore_schema::mapping::keys::encode_object_id(table.id, &mut root_row);
        match catalog.decode_row_key(&root_row).ok()? {
            megastore_schema::DecodedKey::Entity { primary_key, .. } => {
                Some(format!("{root}({})", values_text(&primary_key)))
            }
            megastore_schema::DecodedKey::IndexEntry { .. } => None,
        }
    });
    root.unwrap_or_else(|| eg.to_string())
}

/// The index entries stored in `rows` (rows without one left out).
fn entries_of_rows(
    catalog: &Catalog,
    rows: &[megastore_rowstore::Row],
) -> Result<Vec<IndexEntry>, ClientError> {
    let mut entries = Vec::new();
    for row in rows {
        if let Some(entry) = catalog.index_entry_from_row(row).map_err(schema)? {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// Key values as text, `8, 1`.
fn values_text(values: &[Value]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The root entity of the group an entity of `table` with primary key `key` (or at
/// least its group key) belongs to: its table and key.
pub fn group_root<'c>(
    catalog: &'c Catalog,
    table: &str,
    key: &[Value],
) -> Result<(&'c str, Vec<Value>), ClientError> {
    let t = catalog.require_table(table).map_err(schema)?;
    let group_key = key.get(..catalog.group_key_len(t)).ok_or_else(|| {
        ClientError::Schema(format!(
            "{table}: a primary key needs at least the group key"
        ))
    })?;
    Ok((catalog.root_of(t).name.as_str(), group_key.to_vec()))
}

impl Client {
    /// Reads one entity outside any transaction, in `mode` (a snapshot read at a
    /// read-only replica, say).
    pub async fn read_entity(
        &self,
        catalog: &Catalog,
        mode: ReadMode,
        table: &str,
        key: &[Value],
    ) -> Result<EntityRead, ClientError> {
        let t = catalog.require_table(table).map_err(schema)?;
        let group_key = key.get(..catalog.group_key_len(t)).ok_or_else(|| {
            ClientError::Schema(format!(
                "{table}: a primary key needs at least the group key"
            ))
        })?;
        let eg = entity_group(catalog, table, group_key)?;
        let row_key = catalog.entity_row_key(t, key).map_err(schema)?;
        let read = self
            .read_rows(&eg, mode, DataQuery::Rows(vec![row_key.clone()]))
            .await?;
        let mut entity = match read.rows.iter().find(|r| r.key == row_key) {
            Some(row) => catalog.entity_from_row(row).map_err(schema)?,
            None => None,
        };
        if let Some(entity) = entity.as_mut() {
            // Its virtual repeated properties, at the position the entity was read at
            // (an inconsistent read: whatever the replica has now).
            let at = read.position.map_or(mode, ReadMode::AtPosition);
            for index in catalog.inline_indexes_under(t) {
                let range = catalog.index_range(index, key).map_err(schema)?;
                let query = DataQuery::Scan {
                    range,
                    limit: None,
                    reverse: false,
                };
                let rows = self.read_rows(&eg, at, query).await?.rows;
                let entries = entries_of_rows(catalog, &rows)?;
                catalog
                    .attach_inline_entries(t, index, std::slice::from_mut(entity), &entries)
                    .map_err(schema)?;
            }
        }
        Ok(EntityRead {
            entity,
            position: read.position,
            replica: read.replica,
            path: read.path,
        })
    }
}

impl Transaction {
    fn check_group(
        &self,
        catalog: &Catalog,
        table: &str,
        key: &[Value],
    ) -> Result<(), ClientError> {
        let t = catalog.require_table(table).map_err(schema)?;
        let group_key = key.get(..catalog.group_key_len(t)).ok_or_else(|| {
            ClientError::Schema(format!(
                "{table}: a primary key needs at least the group key"
            ))
        })?;
        let eg = entity_group(catalog, table, group_key)?;
        if &eg != self.eg() {
            return Err(ClientError::Schema(format!(
                "{table}({}) lives in the entity group of {}, not in this transaction's, {}",
                values_text(key),
                describe_group(Some(catalog), &eg),
                describe_group(Some(catalog), self.eg())
            )));
        }
        Ok(())
    }

    /// The entity of `table` with primary key `key`, as of the transaction, with its
    /// virtual repeated properties (its entries of each inline index under it: their
    /// rows join the read set like a scan's).
    pub async fn get_entity(
        &mut self,
        catalog: &Catalog,
        table: &str,
        key: &[Value],
    ) -> Result<Option<Entity>, ClientError> {
        let Some(entity) = self.get_stored_entity(catalog, table, key).await? else {
            return Ok(None);
        };
        let t = catalog.require_table(table).map_err(schema)?;
        let mut found = [entity];
        self.fill_inline(catalog, t, key, &mut found).await?;
        let [entity] = found;
        Ok(Some(entity))
    }

    /// The entity's own properties, as of the transaction (what a write replaces).
    async fn get_stored_entity(
        &mut self,
        catalog: &Catalog,
        table: &str,
        key: &[Value],
    ) -> Result<Option<Entity>, ClientError> {
        self.check_group(catalog, table, key)?;
        let t = catalog.require_table(table).map_err(schema)?;
        let row_key = catalog.entity_row_key(t, key).map_err(schema)?;
        match self.get_row(&row_key).await? {
            Some(row) => catalog.entity_from_row(&row).map_err(schema),
            None => Ok(None),
        }
    }

    /// Gives `entities` (of table `t`, all with primary keys starting with `leading`)
    /// their virtual repeated properties: one scan per inline index under `t`.
    async fn fill_inline(
        &mut self,
        catalog: &Catalog,
        t: &megastore_schema::Table,
        leading: &[Value],
        entities: &mut [Entity],
    ) -> Result<(), ClientError> {
        for index in catalog.inline_indexes_under(t) {
            let range = catalog.index_range(index, leading).map_err(schema)?;
            let rows = self.scan_rows(range, None, false).await?;
            let entries = entries_of_rows(catalog, &rows)?;
            catalog
                .attach_inline_entries(t, index, entities, &entries)
                .map_err(schema)?;
        }
        Ok(())
    }

    /// Writes `entity` (creating or replacing it) with its index entries: local and
    /// inline ones in the group, global ones through the group's mirror.
    pub async fn put_entity(
        &mut self,
        catalog: &Catalog,
        entity: &Entity,
    ) -> Result<(), ClientError> {
        catalog.validate_entity(entity).map_err(schema)?;
        let key = catalog.primary_key_of(entity).map_err(schema)?;
        let old = self.get_stored_entity(catalog, &entity.table, &key).await?;
        let mutations = catalog
            .put_mutations(old.as_ref(), entity, 0)
            .map_err(schema)?;
        self.stage_mutations(&mutations)
    }

    /// Deletes the entity of `table` with primary key `key` (its columns and index
    /// entries); whether there was one.
    pub async fn delete_entity(
        &mut self,
        catalog: &Catalog,
        table: &str,
        key: &[Value],
    ) -> Result<bool, ClientError> {
        let Some(old) = self.get_stored_entity(catalog, table, key).await? else {
            return Ok(false);
        };
        let mutations = catalog.delete_mutations(&old, 0).map_err(schema)?;
        self.stage_mutations(&mutations)?;
        Ok(true)
    }

    /// The entities of `table` in this group, in primary key order (at most `limit`).
    pub async fn scan_table(
        &mut self,
        catalog: &Catalog,
        table: &str,
        root_key: &[Value],
        limit: Option<usize>,
    ) -> Result<Vec<Entity>, ClientError> {
        self.check_group(catalog, table, root_key)?;
        let t = catalog.require_table(table).map_err(schema)?;
        let range = catalog.table_range(t, root_key).map_err(schema)?;
        let rows = self.scan_rows(range, limit, false).await?;
        let mut entities = Vec::new();
        for row in &rows {
            if let Some(entity) = catalog.entity_from_row(row).map_err(schema)? {
                entities.push(entity);
            }
        }
        self.fill_inline(catalog, t, root_key, &mut entities)
            .await?;
        Ok(entities)
    }

    /// One page of a query of a local (or inline) index (`query.equal`: at least the
    /// group key), as of the transaction's position with its own writes applied. The
    /// whole range the query could read joins the read set: a later write that adds,
    /// changes or removes an entry in it conflicts with this transaction (no phantoms).
    pub async fn scan_index(
        &mut self,
        catalog: &Catalog,
        query: &IndexQuery,
    ) -> Result<IndexPage, ClientError> {
        let (index, range) = catalog.index_query_rows(query).map_err(schema)?;
        if index.kind == IndexKind::Global {
            return Err(ClientError::Schema(format!(
                "{} is a global index, outside every entity group: scan it with Client::scan_global_index",
                index.name
            )));
        }
        let table = catalog
            .table_by_id(index.table)
            .ok_or_else(|| ClientError::Schema(format!("{}: its table is missing", index.name)))?;
        self.check_group(catalog, &table.name, &query.equal)?;
        let rows = self
            .scan_rows(range, query.rows_asked(), query.reverse)
            .await?;
        let (rows, next) = query.page_of(rows);
        let entries = entries_of_rows(catalog, &rows)?;
        Ok(IndexPage { entries, next })
    }

    /// Stages an entity write: its group rows, and its global index entries as rows of
    /// the group's mirror (docs/protocol.md, "Global indexes"), which every replica
    /// copies to the global index when it applies the entry.
    pub(crate) fn stage_mutations(
        &mut self,
        mutations: &EntityMutations,
    ) -> Result<(), ClientError> {
        let entry_write =
            |m| RowWrite::from_mutation(m).map_err(|e| ClientError::Schema(e.to_string()));
        for m in &mutations.group {
            self.stage(entry_write(m)?);
        }
        for m in &mutations.global {
            let mut write = entry_write(m)?;
            write.row = mirror_row_of(self.eg(), &m.row);
            self.stage(write);
        }
        Ok(())
    }

    fn stage(&mut self, write: RowWrite) {
        for cell in write.cells {
            match cell {
                CellWrite::Set { column, value } => self.set_row(&write.row, &column, &value),
                CellWrite::Delete { column } => self.delete_row(&write.row, &column),
            }
        }
    }
}
