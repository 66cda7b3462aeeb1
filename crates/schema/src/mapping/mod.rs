//! Entity ↔ row mapping: where an entity and its index entries live in the row store,
//! and which cells hold what (docs/architecture.md, "Data layout", the paper's Figure 4).
//!
//! Row keys (`‖` is concatenation; `id(x)` is [`keys::encode_object_id`]; `key(…)` is the
//! key codec):
//!
//! ```text
//! group prefix       id(root table) ‖ [scatter2] ‖ key(root primary key)
//! entity row         group prefix ‖ id(table) ‖ key(primary key after the group key)
//! local/inline entry group prefix ‖ id(index) ‖ key(index values after the group key)
//!                                 ‖ key(primary key after the group key)
//! global entry       0xFD ‖ id(index) ‖ key(index values) ‖ key(primary key)
//! ```
//!
//! Every row of one entity group starts with its group prefix, so the group is one
//! contiguous key range; the leading object id keeps root tables (and the `0xFD` tag global indexes) in
//! key spaces of their own. The root entity's row (`group prefix ‖ id(root)`) is the
//! group's root row, which also holds its log.
//!
//! Cells: `Table.property` per non-key property (key properties live in the row key),
//! plus an existence marker column named `Table` with an empty value, so an entity
//! with no other properties still has a row. An index entry has a marker named after
//! the index and its `STORING` columns as `Table.property` cells. Values use the key
//! codec's ascending encoding; a repeated property is its elements' encodings in a row.
//! Deleting an entity deletes its columns as of the write's timestamp, never its row.

mod entity;
pub mod keys;
mod query;
mod rows;

pub use entity::{Entity, EntityError, FieldValue};
pub use keys::DecodedKey;
pub use query::{IndexQuery, PageToken};
pub use rows::{EntityMutations, IndexEntry, column_name};
