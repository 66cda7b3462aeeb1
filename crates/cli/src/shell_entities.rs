//! The shell's typed half: entities of the cluster's schema, their keys and columns
//! typed as text and checked against the catalog in lockd.

use comfy_table::Table as TextTable;
use megastore_schema::{
    Catalog, Column, Entity, FieldValue, Index, IndexEntry, Label, Table, Value,
};

/// A table of the catalog, or an error listing the tables there are.
pub(crate) fn table<'a>(catalog: &'a Catalog, name: &str) -> anyhow::Result<&'a Table> {
    catalog
        .tables
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = catalog.tables.iter().map(|t| t.name.as_str()).collect();
            anyhow::anyhow!(
                "schema {} has no table {name:?} (tables: {})",
                catalog.name,
                names.join(", ")
            )
        })
}

/// An index of the catalog, or an error listing the indexes there are.
pub(crate) fn index<'a>(catalog: &'a Catalog, name: &str) -> anyhow::Result<&'a Index> {
    catalog
        .indexes
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = catalog.indexes.iter().map(|i| i.name.as_str()).collect();
            anyhow::anyhow!(
                "schema {} has no index {name:?} (indexes: {})",
                catalog.name,
                names.join(", ")
            )
        })
}

/// The leading values of `index` (on `table`), typed from text in index order.
pub(crate) fn index_values(
    index: &Index,
    table: &Table,
    parts: &[String],
) -> anyhow::Result<Vec<Value>> {
    let columns: Vec<_> = index
        .columns
        .iter()
        .map(|k| table.column_by_id(k.column))
        .collect();
    if parts.len() > columns.len() {
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        anyhow::bail!(
            "{} indexes ({}): at most {} value(s), got {}",
            index.name,
            names.join(", "),
            columns.len(),
            parts.len()
        );
    }
    typed(&index.name, &columns, parts)
}

/// Index entries as a text table: the indexed values, the entity's key, and what the
/// entry stores.
pub(crate) fn render_entries(index: &Index, table: &Table, entries: &[IndexEntry]) -> String {
    if entries.is_empty() {
        return format!("(no {} entries)", index.name);
    }
    let column = |id| table.column_by_id(id).name.clone();
    let mut header: Vec<String> = index.columns.iter().map(|k| column(k.column)).collect();
    header.push(format!("{} key", table.name));
    header.extend(index.storing.iter().map(|c| column(*c)));
    let mut text = TextTable::new();
    text.load_style(comfy_table::presets::ASCII_MARKDOWN);
    text.set_header(header);
    for e in entries {
        let mut row: Vec<String> = e.values.iter().map(ToString::to_string).collect();
        let key: Vec<String> = e.primary_key.iter().map(ToString::to_string).collect();
        row.push(key.join(", "));
        row.extend(
            index
                .storing
                .iter()
                .map(|c| show(e.stored.get(&column(*c)))),
        );
        text.add_row(row);
    }
    text.to_string()
}

/// Primary keys of `table` as a text table.
pub(crate) fn render_keys(table: &Table, keys: &[Vec<Value>]) -> String {
    if keys.is_empty() {
        return format!("(no {} found)", table.name);
    }
    let mut text = TextTable::new();
    text.load_style(comfy_table::presets::ASCII_MARKDOWN);
    text.set_header(
        table
            .primary_key
            .iter()
            .map(|k| table.column_by_id(k.column).name.clone()),
    );
    for key in keys {
        text.add_row(key.iter().map(ToString::to_string));
    }
    text.to_string()
}

/// The first `parts.len()` primary-key components of `table`, typed; `whole`: all of
/// them are required.
pub(crate) fn key(table: &Table, parts: &[String], whole: bool) -> anyhow::Result<Vec<Value>> {
    let columns: Vec<_> = table
        .primary_key
        .iter()
        .map(|k| table.column_by_id(k.column))
        .collect();
    let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    if parts.len() > columns.len() || (whole && parts.len() != columns.len()) {
        anyhow::bail!(
            "{}'s primary key is ({}): {} value(s), got {}",
            table.name,
            names.join(", "),
            columns.len(),
            parts.len()
        );
    }
    typed(&table.name, &columns, parts)
}

/// `parts` typed as `columns` (of the table or index called `object`), in order.
fn typed(object: &str, columns: &[&Column], parts: &[String]) -> anyhow::Result<Vec<Value>> {
    parts
        .iter()
        .zip(columns)
        .map(|(text, column)| {
            column
                .ty
                .parse_value(text)
                .map_err(|e| anyhow::anyhow!("{object}.{}: {e}", column.name))
        })
        .collect()
}

/// An entity of `table` from `column=value` pairs.
pub(crate) fn entity(table: &Table, fields: &[(String, String)]) -> anyhow::Result<Entity> {
    let mut entity = Entity::new(table.name.clone());
    for (name, text) in fields {
        let column = table.column(name).ok_or_else(|| {
            let names: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
            anyhow::anyhow!(
                "{} has no column {name:?} (columns: {})",
                table.name,
                names.join(", ")
            )
        })?;
        let value = column
            .ty
            .parse_value(text)
            .map_err(|e| anyhow::anyhow!("{}.{name}: {e}", table.name))?;
        match (column.label, entity.fields.get_mut(name)) {
            (Label::Repeated, Some(FieldValue::Repeated(values))) => values.push(value),
            (Label::Repeated, _) => {
                entity
                    .fields
                    .insert(name.clone(), FieldValue::Repeated(vec![value]));
            }
            (_, Some(_)) => anyhow::bail!("{}.{name} is not repeated: give it once", table.name),
            (_, None) => {
                entity
                    .fields
                    .insert(name.clone(), FieldValue::Single(value));
            }
        }
    }
    Ok(entity)
}

fn show(value: Option<&FieldValue>) -> String {
    match value {
        None => String::new(),
        Some(FieldValue::Single(v)) => v.to_string(),
        Some(FieldValue::Repeated(vs)) => {
            let items: Vec<String> = vs.iter().map(ToString::to_string).collect();
            format!("[{}]", items.join(", "))
        }
    }
}

/// Entities of `table` as a text table, one row each, columns in declaration order.
pub(crate) fn render(catalog: &Catalog, table: &Table, entities: &[Entity]) -> String {
    if entities.is_empty() {
        return format!("(no {} entities)", table.name);
    }
    let mut text = TextTable::new();
    text.load_style(comfy_table::presets::ASCII_MARKDOWN);
    text.set_header(table.columns.iter().map(|c| c.name.clone()));
    for e in entities {
        text.add_row(table.columns.iter().map(|c| show(e.fields.get(&c.name))));
    }
    let mut out = text.to_string();
    // Virtual repeated properties: each entity's entries of the inline indexes under it.
    for e in entities {
        for (name, entries) in &e.inline {
            let Some(index) = catalog.index(name) else {
                continue;
            };
            let Some(child) = catalog.table_by_id(index.table) else {
                continue;
            };
            let key: Vec<String> = table
                .primary_key
                .iter()
                .filter_map(|k| e.value(&table.column_by_id(k.column).name))
                .map(ToString::to_string)
                .collect();
            out.push_str(&format!(
                "\n{}({}).{name} (inline, {} entries):\n{}",
                table.name,
                key.join(", "),
                entries.len(),
                render_entries(index, child, entries)
            ));
        }
    }
    out
}

/// The catalog's tables with their keys and columns.
pub(crate) fn describe(catalog: &Catalog, version: u64) -> String {
    let mut text = TextTable::new();
    text.load_style(comfy_table::presets::ASCII_MARKDOWN);
    text.set_header(["table", "primary key", "columns"]);
    for t in &catalog.tables {
        let key: Vec<&str> = t
            .primary_key
            .iter()
            .map(|k| t.column_by_id(k.column).name.as_str())
            .collect();
        let columns: Vec<String> = t
            .columns
            .iter()
            .map(|c| format!("{} {} {}", c.label.name(), c.ty, c.name))
            .collect();
        text.add_row([t.name.clone(), key.join(", "), columns.join("; ")]);
    }
    format!(
        "schema {} (catalog version {version})\n{text}",
        catalog.name
    )
}
