use std::collections::BTreeMap;

use super::rows::IndexEntry;
use crate::key::KeyError;
use crate::types::{ScalarType, Value};

/// One property's value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// A `required` or `optional` property's value.
    Single(Value),
    /// A `repeated` property's elements, in order.
    Repeated(Vec<Value>),
}

/// An entity of one table, its properties by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Entity {
    /// The table's name.
    pub table: String,
    /// Property name → value. Absent optional properties are simply missing.
    pub fields: BTreeMap<String, FieldValue>,
    /// Virtual repeated properties (the paper's §2.2.3): for each inline index on a
    /// child table stored under this one, this entity's entries of it, in index order
    /// — its children's indexed values, keys and stored properties, read with the
    /// entity at the same position. Filled by reads; writes ignore it (the entries
    /// follow the children).
    pub inline: BTreeMap<String, Vec<IndexEntry>>,
}

impl Entity {
    /// An entity of `table` with no properties yet.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            fields: BTreeMap::new(),
            inline: BTreeMap::new(),
        }
    }

    /// Sets a single-valued property.
    pub fn set(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.fields
            .insert(name.into(), FieldValue::Single(value.into()));
        self
    }

    /// Sets a repeated property.
    pub fn set_repeated<V: Into<Value>>(
        mut self,
        name: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.fields.insert(
            name.into(),
            FieldValue::Repeated(values.into_iter().map(Into::into).collect()),
        );
        self
    }

    /// A single-valued property's value.
    pub fn value(&self, name: &str) -> Option<&Value> {
        match self.fields.get(name)? {
            FieldValue::Single(v) => Some(v),
            FieldValue::Repeated(_) => None,
        }
    }
}

/// Why an entity could not be mapped to rows, or rows back to an entity.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EntityError {
    /// No such table in the catalog.
    #[error("unknown table `{0}`")]
    UnknownTable(String),
    /// No such index in the catalog.
    #[error("unknown index `{0}`")]
    UnknownIndex(String),
    /// The table has no such property.
    #[error("table `{table}` has no property `{column}`")]
    UnknownColumn {
        /// Table name.
        table: String,
        /// Property name.
        column: String,
    },
    /// A value of the wrong type.
    #[error("`{table}.{column}` is {expected}, got {found}")]
    TypeMismatch {
        /// Table name.
        table: String,
        /// Property name.
        column: String,
        /// The declared type.
        expected: ScalarType,
        /// The given value's type.
        found: ScalarType,
    },
    /// A list for a single-valued property or a single value for a repeated one.
    #[error("`{table}.{column}` is {}; give {}", if *.repeated { "repeated" } else { "single-valued" }, if *.repeated { "a list" } else { "one value" })]
    Cardinality {
        /// Table name.
        table: String,
        /// Property name.
        column: String,
        /// Whether the property is repeated.
        repeated: bool,
    },
    /// A required (or key) property is missing.
    #[error("`{table}.{column}` is required")]
    MissingRequired {
        /// Table name.
        table: String,
        /// Property name.
        column: String,
    },
    /// An update's previous version is not the same entity.
    #[error("the previous version is not the same `{table}` entity")]
    DifferentEntity {
        /// Table name.
        table: String,
    },
    /// A key has the wrong number of values, or values of the wrong types.
    #[error("key of `{object}`: {source}")]
    Key {
        /// The table or index whose key it is.
        object: String,
        /// What is wrong.
        source: KeyError,
    },
    /// Bytes read from the store do not decode under this catalog.
    #[error("malformed row {row}: {detail}")]
    MalformedRow {
        /// The row key, escaped.
        row: String,
        /// What does not decode.
        detail: String,
    },
    /// An index query that cannot be asked of its index.
    #[error("query of index `{index}`: {detail}")]
    Query {
        /// The index.
        index: String,
        /// What is wrong.
        detail: String,
    },
}
