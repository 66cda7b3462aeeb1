//! The syntax tree: what the text says, with positions, before any validation.

use crate::diagnostic::Pos;
use crate::types::{Direction, Label};

/// A name as written, with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name {
    /// The text.
    pub text: String,
    /// Where it starts.
    pub pos: Pos,
}

/// A whole schema file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchemaFile {
    /// `CREATE SCHEMA` statements (exactly one is valid).
    pub schemas: Vec<Name>,
    /// `CREATE TABLE` statements, in order.
    pub tables: Vec<TableDecl>,
    /// `CREATE … INDEX` statements, in order.
    pub indexes: Vec<IndexDecl>,
}

/// `CREATE TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDecl {
    /// The table's name.
    pub name: Name,
    /// Its properties.
    pub fields: Vec<FieldDecl>,
    /// Position of `PRIMARY`.
    pub primary_key_pos: Pos,
    /// The primary key's components.
    pub primary_key: Vec<KeyColumnDecl>,
    /// The clauses after the primary key.
    pub clauses: Vec<TableClause>,
}

/// One property declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDecl {
    /// `required`, `optional` or `repeated`.
    pub label: Label,
    /// The type name as written (checked later).
    pub type_name: Name,
    /// The property's name.
    pub name: Name,
}

/// A key or index component: a column name and its direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumnDecl {
    /// The column.
    pub name: Name,
    /// `ASC` (default) or `DESC`.
    pub direction: Direction,
}

/// A clause after `PRIMARY KEY(…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableClause {
    /// `ENTITY GROUP ROOT`.
    Root {
        /// Position of `ENTITY`.
        pos: Pos,
    },
    /// `SCATTER`.
    Scatter {
        /// Position of `SCATTER`.
        pos: Pos,
    },
    /// `IN TABLE parent`.
    InTable {
        /// Position of `IN`.
        pos: Pos,
        /// The parent table.
        parent: Name,
    },
    /// `ENTITY GROUP KEY(columns) REFERENCES root`.
    GroupKey {
        /// Position of `ENTITY`.
        pos: Pos,
        /// The child's columns that hold the root's key.
        columns: Vec<Name>,
        /// The root table.
        root: Name,
    },
}

impl TableClause {
    /// Where the clause starts.
    pub fn pos(&self) -> Pos {
        match self {
            TableClause::Root { pos }
            | TableClause::Scatter { pos }
            | TableClause::InTable { pos, .. }
            | TableClause::GroupKey { pos, .. } => *pos,
        }
    }
}

/// The kind of an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// Per entity group, updated atomically with its entities.
    Local,
    /// Across entity groups; may lag its entities.
    Global,
    /// Stored under the parent entity (read by scanning the index with its key).
    Inline,
}

impl IndexKind {
    /// The keyword in the schema language.
    pub fn keyword(self) -> &'static str {
        match self {
            IndexKind::Local => "LOCAL",
            IndexKind::Global => "GLOBAL",
            IndexKind::Inline => "INLINE",
        }
    }
}

/// `CREATE … INDEX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDecl {
    /// Position of `CREATE`.
    pub pos: Pos,
    /// Local, global or inline.
    pub kind: IndexKind,
    /// The index's name.
    pub name: Name,
    /// The indexed table.
    pub table: Name,
    /// The indexed columns.
    pub columns: Vec<KeyColumnDecl>,
    /// `STORING` columns.
    pub storing: Vec<Name>,
}
