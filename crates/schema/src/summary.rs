//! A readable summary of a catalog, as `megastore schema check` prints it.

use std::fmt::Write;

use crate::catalog::{Catalog, KeyColumn, Table, TableKind};
use crate::types::{Direction, Label};

fn key_list(table: &Table, columns: &[KeyColumn]) -> String {
    let parts: Vec<String> = columns
        .iter()
        .map(|k| {
            let name = &table.column_by_id(k.column).name;
            match k.direction {
                Direction::Asc => name.clone(),
                Direction::Desc => format!("{name} DESC"),
            }
        })
        .collect();
    parts.join(", ")
}

/// The summary: entity-group kinds with their tables, then indexes with their kind,
/// columns and stored columns.
pub fn summary(catalog: &Catalog) -> String {
    let mut out = String::new();
    let roots: Vec<&Table> = catalog
        .tables
        .iter()
        .filter(|t| matches!(t.kind, TableKind::Root { .. }))
        .collect();
    let _ = writeln!(
        out,
        "schema {} (fingerprint {})",
        catalog.name, catalog.fingerprint
    );
    let _ = writeln!(
        out,
        "  {} entity group kind(s), {} table(s), {} index(es)",
        roots.len(),
        catalog.tables.len(),
        catalog.indexes.len()
    );
    let width = catalog
        .tables
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(0);
    for root in roots {
        let scatter = if root.is_scattered() { ", SCATTER" } else { "" };
        let _ = writeln!(
            out,
            "  entity group {} (key {}{scatter})",
            root.name,
            key_list(root, &root.primary_key)
        );
        for table in catalog.group_tables(root) {
            let role = match table.kind {
                TableKind::Root { .. } => "root".to_string(),
                TableKind::Child { parent, .. } => {
                    let parent = catalog.table_by_id(parent).map_or("?", |p| p.name.as_str());
                    format!("child in {parent}")
                }
            };
            let properties = table
                .columns
                .iter()
                .filter(|c| !table.is_key_column(c.id))
                .count();
            let _ = writeln!(
                out,
                "    table {:width$}  {role:<16}  key ({}), {properties} other propert{}",
                table.name,
                key_list(table, &table.primary_key),
                if properties == 1 { "y" } else { "ies" },
            );
        }
    }
    if !catalog.indexes.is_empty() {
        let _ = writeln!(out, "  indexes");
        let width = catalog
            .indexes
            .iter()
            .map(|i| i.name.len())
            .max()
            .unwrap_or(0);
        for index in &catalog.indexes {
            let table = catalog
                .table_by_id(index.table)
                .expect("catalog invariant: an index's table exists");
            let mut line = format!(
                "    {:width$}  {:<6}  {}({})",
                index.name,
                index.kind.keyword().to_ascii_lowercase(),
                table.name,
                key_list(table, &index.columns)
            );
            if index
                .columns
                .iter()
                .any(|k| table.column_by_id(k.column).label == Label::Repeated)
            {
                line.push_str(", repeated");
            }
            if !index.storing.is_empty() {
                let stored: Vec<&str> = index
                    .storing
                    .iter()
                    .map(|c| table.column_by_id(*c).name.as_str())
                    .collect();
                let _ = write!(line, ", storing ({})", stored.join(", "));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    out
}
