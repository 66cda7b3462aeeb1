//! The catalog: a validated schema with stable ids, serde-serializable so it can be
//! stored (later, in the lock service) and compared.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::key::KeyPart;
use crate::syntax::ast::IndexKind;
use crate::types::{Direction, Label, ScalarType};

/// Id of a table or an index. Tables and indexes share one id space, so an id at the
/// front of a row key says unambiguously what the row is. Id 0 is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectId(pub u32);

/// Id of a column, unique within its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ColumnId(pub u32);

/// A 64-bit hash of everything in a catalog but its id counters: equal schemas have
/// equal fingerprints. Log entries carry it so a replica can tell which schema wrote them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint(pub u64);

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A validated schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    /// The name from `CREATE SCHEMA`.
    pub name: String,
    /// Tables in declaration order.
    pub tables: Vec<Table>,
    /// Indexes in declaration order.
    pub indexes: Vec<Index>,
    /// The next unused object id; ids are never reused, even after a drop.
    pub next_object_id: u32,
    /// See [`Fingerprint`].
    pub fingerprint: Fingerprint,
}

/// A table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// Stable id.
    pub id: ObjectId,
    /// Name.
    pub name: String,
    /// Properties in declaration order.
    pub columns: Vec<Column>,
    /// Primary-key components.
    pub primary_key: Vec<KeyColumn>,
    /// Root or child.
    pub kind: TableKind,
    /// The next unused column id of this table.
    pub next_column_id: u32,
}

/// Root or child table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TableKind {
    /// `ENTITY GROUP ROOT`: each entity is the root of one entity group.
    Root {
        /// `SCATTER`: keys get a two-byte hash prefix.
        scatter: bool,
    },
    /// A child: its first primary-key components are its root's key.
    Child {
        /// The root table (`REFERENCES`).
        root: ObjectId,
        /// The table it is stored under (`IN TABLE`, default the root).
        parent: ObjectId,
    },
}

/// A property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Stable id within the table.
    pub id: ColumnId,
    /// Name.
    pub name: String,
    /// Scalar type.
    pub ty: ScalarType,
    /// Required, optional or repeated.
    pub label: Label,
}

/// A key or index component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyColumn {
    /// The column.
    pub column: ColumnId,
    /// Its order.
    pub direction: Direction,
}

/// An index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Index {
    /// Stable id (shared space with tables).
    pub id: ObjectId,
    /// Name.
    pub name: String,
    /// Local, global or inline.
    pub kind: IndexKind,
    /// The indexed table.
    pub table: ObjectId,
    /// Indexed columns, in order.
    pub columns: Vec<KeyColumn>,
    /// `STORING` columns.
    pub storing: Vec<ColumnId>,
    /// Whether its entries are complete (absent from the JSON when ready, so a
    /// catalog's fingerprint does not change with the field's introduction).
    #[serde(default, skip_serializing_if = "IndexState::is_ready")]
    pub state: IndexState,
}

/// Whether an index's entries are complete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexState {
    /// Every entity has its entries: scans are served.
    #[default]
    Ready,
    /// Added to a table that already had entities: writers maintain it, and a
    /// backfill is writing the entries of the entities written before; scans are
    /// refused until it is done (`megastore schema backfill`).
    Building,
}

impl IndexState {
    /// Whether scans are served.
    pub fn is_ready(&self) -> bool {
        *self == IndexState::Ready
    }
}

impl Catalog {
    /// The table named `name`.
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// The table with id `id`.
    pub fn table_by_id(&self, id: ObjectId) -> Option<&Table> {
        self.tables.iter().find(|t| t.id == id)
    }

    /// The index named `name`.
    pub fn index(&self, name: &str) -> Option<&Index> {
        self.indexes.iter().find(|i| i.name == name)
    }

    /// The index with id `id`.
    pub fn index_by_id(&self, id: ObjectId) -> Option<&Index> {
        self.indexes.iter().find(|i| i.id == id)
    }

    /// The root table of `table`'s entity groups (itself, for a root).
    pub fn root_of<'a>(&'a self, table: &'a Table) -> &'a Table {
        match table.kind {
            TableKind::Root { .. } => table,
            TableKind::Child { root, .. } => self
                .table_by_id(root)
                .expect("catalog invariant: a child's root exists"),
        }
    }

    /// The tables whose entities live in `root`'s entity groups, root first.
    pub fn group_tables<'a>(&'a self, root: &'a Table) -> impl Iterator<Item = &'a Table> + 'a {
        self.tables
            .iter()
            .filter(move |t| self.root_of(t).id == root.id)
    }

    /// The indexes on `table`.
    pub fn indexes_on<'a>(&'a self, table: &'a Table) -> impl Iterator<Item = &'a Index> + 'a {
        self.indexes.iter().filter(move |i| i.table == table.id)
    }

    /// The inline indexes whose entries live under entities of `table`: those on its
    /// child tables (`IN TABLE table`) — each entity's virtual repeated properties.
    pub fn inline_indexes_under<'a>(
        &'a self,
        table: &'a Table,
    ) -> impl Iterator<Item = &'a Index> + 'a {
        self.indexes.iter().filter(move |i| {
            i.kind == IndexKind::Inline
                && self.table_by_id(i.table).is_some_and(|child| {
                    matches!(child.kind, TableKind::Child { parent, .. } if parent == table.id)
                })
        })
    }

    /// How many leading primary-key components of `table` are its entity group's key.
    pub fn group_key_len(&self, table: &Table) -> usize {
        self.root_of(table).primary_key.len()
    }

    /// Computes the fingerprint of the catalog's content.
    pub fn compute_fingerprint(&self) -> Fingerprint {
        let content = (&self.name, &self.tables, &self.indexes);
        let bytes = serde_json::to_vec(&content).expect("catalog types always serialize");
        Fingerprint(xxhash_rust::xxh3::xxh3_64(&bytes))
    }

    /// The catalog as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("catalog types always serialize")
    }

    /// A catalog from [`Catalog::to_json`]'s output. The fingerprint must match the
    /// content, so a hand-edited or damaged catalog is refused.
    pub fn from_json(json: &str) -> Result<Catalog, CatalogJsonError> {
        let catalog: Catalog =
            serde_json::from_str(json).map_err(|e| CatalogJsonError::Syntax(e.to_string()))?;
        let actual = catalog.compute_fingerprint();
        if actual != catalog.fingerprint {
            return Err(CatalogJsonError::Fingerprint {
                stored: catalog.fingerprint,
                actual,
            });
        }
        Ok(catalog)
    }
}

/// Why a stored catalog could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogJsonError {
    /// Not a catalog in JSON.
    #[error("not a catalog: {0}")]
    Syntax(String),
    /// The content does not hash to the stored fingerprint.
    #[error("catalog fingerprint {stored} does not match its content ({actual})")]
    Fingerprint {
        /// The fingerprint stored in the JSON.
        stored: Fingerprint,
        /// The content's fingerprint.
        actual: Fingerprint,
    },
}

impl Table {
    /// The column named `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The column with id `id`.
    pub fn column_by_id(&self, id: ColumnId) -> &Column {
        self.columns
            .iter()
            .find(|c| c.id == id)
            .expect("catalog invariant: key and index columns exist")
    }

    /// Whether `column` is part of the primary key.
    pub fn is_key_column(&self, column: ColumnId) -> bool {
        self.primary_key.iter().any(|k| k.column == column)
    }

    /// The shape of the primary key for the key codec.
    pub fn key_parts(&self) -> Vec<KeyPart> {
        self.primary_key
            .iter()
            .map(|k| KeyPart {
                ty: self.column_by_id(k.column).ty,
                direction: k.direction,
            })
            .collect()
    }

    /// Whether this is a `SCATTER` root.
    pub fn is_scattered(&self) -> bool {
        matches!(self.kind, TableKind::Root { scatter: true })
    }
}
