//! The schema language, the catalog, the key codec, and the entity ↔ row mapping.
//!
//! Responsibility: turn schema text (the paper's DDL, `*.msdl`) into a validated
//! [`Catalog`] with stable ids — or into diagnostics that say `file:line:col`, what is
//! wrong and how to fix it — and define how entities and index entries become rows of
//! the row store (docs/architecture.md, "Data layout").
//!
//! Not here: storing or replicating anything. The mapping produces
//! [`megastore_rowstore::RowMutation`]s; the protocol decides when they are applied.
//!
//! Invariants:
//! - *one key range per entity group*: every row of an entity group (its entities,
//!   local and inline index entries, the root row) starts with the group's prefix;
//!   [`Catalog::group_range`] is exactly those rows;
//! - *two tables never share a row*: the table's id follows the group prefix;
//! - *groups never overlap*: every group prefix, typed or untyped, is self-delimiting,
//!   so a row belongs to at most one group, and reserved rows to none ([`keyspace`]);
//! - *order-preserving keys*: encoded tuples compare like the values ([`key`]);
//! - *the parser never panics*: any input yields a [`SchemaFile`](syntax::ast::SchemaFile)
//!   or a [`SchemaError`].
//!
//! ```
//! use megastore_schema::{compile, Entity};
//!
//! let text = "CREATE SCHEMA App;
//!   CREATE TABLE User { required int64 user_id; required string name; }
//!     PRIMARY KEY(user_id), ENTITY GROUP ROOT;";
//! let catalog = compile("app.msdl", text, None)?;
//! let user = Entity::new("User").set("user_id", 101i64).set("name", "John");
//! let rows = catalog.put_mutations(None, &user, 1)?;
//! let range = catalog.group_range(catalog.table("User").unwrap(), &[101i64.into()])?;
//! assert!(rows.group.iter().all(|m| range.contains(&m.row)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod catalog;
mod compile;
mod diagnostic;
pub mod key;
pub mod keyspace;
pub mod mapping;
mod summary;
pub mod syntax;
mod types;

pub use catalog::{
    Catalog, Column, ColumnId, Fingerprint, Index, IndexState, KeyColumn, ObjectId, Table,
    TableKind,
};
pub use compile::{compile, compile_ast};
pub use diagnostic::{Diagnostic, Pos, SchemaError};
pub use mapping::{
    DecodedKey, Entity, EntityError, EntityMutations, FieldValue, IndexEntry, IndexQuery, PageToken,
};
pub use summary::summary;
pub use syntax::ast::IndexKind;
pub use types::{Direction, Label, ScalarType, Value};
