//! Typed access to the entities of a schema inside a transaction: get, put and delete
//! by primary key, scans of a table or a local index within the group. The schema
//! crate decides where an entity and its index entries live (docs/architecture.md, "Data layout"); this
//! module only reads and stages those rows in the transaction.
//!
//! A global index's entries live outside every entity group; a put or delete writes
//! them into the group's mirror, and every full and read-only replica copies the
//! mirror to the global index when it applies the entry (docs/protocol.md, "Global
//! indexes").

use futures::StreamExt;
use megastore_paxos::{CellWrite, DataQuery, ReadMode, ReadPath, RowWrite, mirror_row_of};
use megastore_schema::{
    Catalog, Entity, EntityError, EntityMutations, IndexEntry, IndexKind, Value,
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
        let entity = match read.rows.iter().find(|r| r.key == row_key) {
            Some(row) => catalog.entity_from_row(row).map_err(schema)?,
            None => None,
        };
        Ok(EntityRead {
            entity,
            position: read.position,
            replica: read.replica,
            path: read.path,
        })
    }

    /// The entries of global index `index` whose leading values are `leading` (any
    /// number, none for the whole index), in index order (at most `limit`), across
    /// every entity group, from the nearest full or read-only replica that answers.
    ///
    /// Consistency, [`IndexRead::AsApplied`]: what that replica has applied of each
    /// group — a group's entries are never half of one transaction's, but a write
    /// acknowledged elsewhere may not show yet, and an entry may name an entity
    /// changed since (the paper's "global index scans may miss recent updates";
    /// docs/protocol.md, "Global indexes"). [`IndexRead::Verified`] re-reads each
    /// hit's entity with a current read of its group (in parallel, a bounded number at
    /// once) and drops the entries it no longer has: no hit is then stale, though one
    /// written after the scan's replica applied may still be missing.
    pub async fn scan_global_index(
        &self,
        catalog: &Catalog,
        index: &str,
        leading: &[Value],
        limit: Option<usize>,
        read: IndexRead,
    ) -> Result<GlobalIndexScan, ClientError> {
        let i = catalog.require_index(index).map_err(schema)?;
        if i.kind != IndexKind::Global {
            return Err(ClientError::Schema(format!(
                "{index} is a {} index: scan it inside a transaction of its group",
                i.kind.keyword()
            )));
        }
        let range = catalog.index_range(i, leading).map_err(schema)?;
        let scanned = self.scan_global_rows(range, limit).await?;
        let mut entries = Vec::new();
        for row in &scanned.rows {
            if let Some(entry) = catalog.index_entry_from_row(row).map_err(schema)? {
                entries.push((row.key.clone(), entry));
            }
        }
        if read == IndexRead::Verified {
            let table = catalog
                .table_by_id(i.table)
                .ok_or_else(|| ClientError::Schema(format!("{index}: its table is missing")))?;
            let checks = entries.into_iter().map(|(row, entry)| async move {
                let current = self
                    .read_entity(catalog, ReadMode::Current, &table.name, &entry.primary_key)
                    .await?;
                let still = match current.entity {
                    Some(entity) => entry_still_in(catalog, &entity, &row, &entry)?,
                    None => false,
                };
                Ok::<_, ClientError>(still.then_some((row, entry)))
            });
            entries = futures::stream::iter(checks)
                .buffered(VERIFY_IN_FLIGHT_MAX)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .filter_map(Result::transpose)
                .collect::<Result<_, _>>()?;
        }
        Ok(GlobalIndexScan {
            entries: entries.into_iter().map(|(_, entry)| entry).collect(),
            replica: scanned.replica,
        })
    }
}

/// How many entities a verified global index scan reads at once.
const VERIFY_IN_FLIGHT_MAX: usize = 32;

/// How a global index scan treats what the replica it reads has applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexRead {
    /// The entries as the replica has applied them: one read, possibly stale hits.
    AsApplied,
    /// Each hit checked against its entity by a current read: no stale hit.
    Verified,
}

/// Whether `entity` (read now) still has the global index entry `entry` at row `row`,
/// with the same stored properties.
fn entry_still_in(
    catalog: &Catalog,
    entity: &Entity,
    row: &[u8],
    entry: &IndexEntry,
) -> Result<bool, ClientError> {
    let mutations = catalog.put_mutations(None, entity, 0).map_err(schema)?;
    let Some(written) = mutations.global.iter().find(|m| m.row == row) else {
        return Ok(false);
    };
    let now = written_row(written);
    Ok(catalog.index_entry_from_row(&now).map_err(schema)?.as_ref() == Some(entry))
}

/// The row a mutation writes, as its cell sets leave it (its deletes left out).
fn written_row(mutation: &megastore_rowstore::RowMutation) -> megastore_rowstore::Row {
    let mut row = megastore_rowstore::Row {
        key: mutation.row.clone(),
        cells: Default::default(),
    };
    for m in &mutation.mutations {
        if let megastore_rowstore::Mutation::Set {
            column,
            timestamp,
            value,
        } = m
        {
            row.cells.insert(
                column.clone(),
                megastore_rowstore::Cell {
                    timestamp: *timestamp,
                    value: value.clone(),
                },
            );
        }
    }
    row
}

/// What a global index scan found, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalIndexScan {
    /// The entries, in index order.
    pub entries: Vec<IndexEntry>,
    /// The replica that served it (its applied positions are what the scan reflects).
    pub replica: ReplicaId,
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

    /// The entity of `table` with primary key `key`, as of the transaction.
    pub async fn get_entity(
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

    /// Writes `entity` (creating or replacing it) with its index entries: local and
    /// inline ones in the group, global ones through the group's mirror.
    pub async fn put_entity(
        &mut self,
        catalog: &Catalog,
        entity: &Entity,
    ) -> Result<(), ClientError> {
        catalog.validate_entity(entity).map_err(schema)?;
        let key = catalog.primary_key_of(entity).map_err(schema)?;
        let old = self.get_entity(catalog, &entity.table, &key).await?;
        let mutations = catalog
            .put_mutations(old.as_ref(), entity, 0)
            .map_err(schema)?;
        self.stage_mutations(&mutations);
        Ok(())
    }

    /// Deletes the entity of `table` with primary key `key` (its columns and index
    /// entries); whether there was one.
    pub async fn delete_entity(
        &mut self,
        catalog: &Catalog,
        table: &str,
        key: &[Value],
    ) -> Result<bool, ClientError> {
        let Some(old) = self.get_entity(catalog, table, key).await? else {
            return Ok(false);
        };
        let mutations = catalog.delete_mutations(&old, 0).map_err(schema)?;
        self.stage_mutations(&mutations);
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
        let rows = self.scan_rows(range, limit).await?;
        let mut entities = Vec::new();
        for row in &rows {
            if let Some(entity) = catalog.entity_from_row(row).map_err(schema)? {
                entities.push(entity);
            }
        }
        Ok(entities)
    }

    /// The entries of a local (or inline) index whose leading values are `leading`
    /// (at least the group key), in index order (at most `limit`).
    pub async fn scan_index(
        &mut self,
        catalog: &Catalog,
        index: &str,
        leading: &[Value],
        limit: Option<usize>,
    ) -> Result<Vec<IndexEntry>, ClientError> {
        let i = catalog.require_index(index).map_err(schema)?;
        if i.kind == IndexKind::Global {
            return Err(ClientError::Schema(format!(
                "{index} is a global index, outside every entity group: scan it with Client::scan_global_index"
            )));
        }
        let table = catalog
            .table_by_id(i.table)
            .ok_or_else(|| ClientError::Schema(format!("{index}: its table is missing")))?;
        self.check_group(catalog, &table.name, leading)?;
        let range = catalog.index_range(i, leading).map_err(schema)?;
        let rows = self.scan_rows(range, limit).await?;
        let mut entries = Vec::new();
        for row in &rows {
            if let Some(entry) = catalog.index_entry_from_row(row).map_err(schema)? {
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    /// Stages an entity write: its group rows, and its global index entries as rows of
    /// the group's mirror (docs/protocol.md, "Global indexes"), which every replica
    /// copies to the global index when it applies the entry.
    fn stage_mutations(&mut self, mutations: &EntityMutations) {
        for m in &mutations.group {
            self.stage(RowWrite::from_mutation(m));
        }
        for m in &mutations.global {
            let mut write = RowWrite::from_mutation(m);
            write.row = mirror_row_of(self.eg(), &m.row);
            self.stage(write);
        }
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

#[cfg(test)]
mod tests {
    use megastore_schema::{Catalog, Entity};

    use super::{entry_still_in, written_row};

    fn catalog() -> Catalog {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schema/photos.msdl");
        let text = std::fs::read_to_string(path).expect("the photo schema");
        megastore_schema::compile("photos.msdl", &text, None).expect("it compiles")
    }

    fn photo(tags: &[&str], thumbnail: &str) -> Entity {
        Entity::new("Photo")
            .set("user_id", 7i64)
            .set("photo_id", 1i32)
            .set("time", 1i64)
            .set("full_url", "f")
            .set("thumbnail_url", thumbnail)
            .set_repeated("tag", tags.iter().copied())
    }

    /// A verified scan keeps an entry only while the entity read now still has it,
    /// stored properties included.
    #[test]
    fn an_entry_is_still_in_an_entity_only_if_the_entity_would_write_it_now() {
        let catalog = catalog();
        let written = catalog
            .put_mutations(None, &photo(&["sea", "sun"], "t1"), 0)
            .unwrap();
        let sea = written
            .global
            .iter()
            .map(|m| {
                let entry = catalog.index_entry_from_row(&written_row(m)).unwrap();
                (m.row.clone(), entry.unwrap())
            })
            .find(|(_, entry)| entry.values == vec!["sea".into()])
            .expect("an entry for the tag sea");
        let (row, entry) = (&sea.0, &sea.1);
        let still = |entity: &Entity| entry_still_in(&catalog, entity, row, entry).unwrap();
        assert!(still(&photo(&["sea", "sun"], "t1")), "unchanged");
        assert!(
            still(&photo(&["sea"], "t1")),
            "another tag went, not this one"
        );
        assert!(!still(&photo(&["sun"], "t1")), "retagged");
        assert!(
            !still(&photo(&["sea"], "t2")),
            "its stored thumbnail changed"
        );
    }
}
