//! Indexes: their columns, the leading columns each kind requires, and STORING.

use super::{Compiler, list};
use crate::catalog::{Index, Table, TableKind};
use crate::syntax::ast::{IndexDecl, IndexKind, KeyColumnDecl};
use crate::types::Label;

impl Compiler<'_> {
    pub(super) fn index(&mut self, decl: &IndexDecl, tables: &[Table]) -> Option<Index> {
        let what = format!("{} INDEX `{}`", decl.kind.keyword(), decl.name.text);
        let table = &tables[self.table_named(tables, &decl.table, &what)?];
        let columns = self.key_columns(table, &decl.columns, &what)?;
        let repeated: Vec<&KeyColumnDecl> = decl
            .columns
            .iter()
            .zip(&columns)
            .filter(|(_, k)| table.column_by_id(k.column).label == Label::Repeated)
            .map(|(d, _)| d)
            .collect();
        if let [_, second, ..] = repeated.as_slice() {
            self.d.error_with_hint(
                second.name.pos,
                format!("{what} has more than one repeated column"),
                "an entity gets one entry per element of its repeated column; two would multiply",
            );
        }
        let column_names: Vec<&str> = decl.columns.iter().map(|c| c.name.text.as_str()).collect();
        let key_names: Vec<&str> = table
            .primary_key
            .iter()
            .map(|k| table.column_by_id(k.column).name.as_str())
            .collect();
        match decl.kind {
            IndexKind::Global => {}
            IndexKind::Local => {
                let group_key_len = match table.kind {
                    TableKind::Root { .. } => key_names.len(),
                    TableKind::Child { root, .. } => {
                        tables.iter().find(|t| t.id == root)?.primary_key.len()
                    }
                };
                let group_key = &key_names[..group_key_len.min(key_names.len())];
                if !column_names.starts_with(group_key) {
                    self.d.error_with_hint(
                        decl.columns[0].name.pos,
                        format!(
                            "{what} must start with the entity group key ({})",
                            list(group_key)
                        ),
                        format!(
                            "a local index lives inside one entity group: ON {}({}, …)",
                            table.name,
                            list(group_key)
                        ),
                    );
                }
            }
            IndexKind::Inline => {
                let TableKind::Child { parent, .. } = table.kind else {
                    self.d.error_with_hint(
                        decl.table.pos,
                        format!("{what} is on root table `{}`", table.name),
                        "an inline index copies a child's entries into its parent (IN TABLE); use a LOCAL index on a root",
                    );
                    return None;
                };
                let parent = tables.iter().find(|t| t.id == parent)?;
                let parent_key = &key_names[..parent.primary_key.len().min(key_names.len())];
                if !column_names.starts_with(parent_key) {
                    self.d.error_with_hint(
                        decl.columns[0].name.pos,
                        format!(
                            "{what} must start with the key of the parent `{}` ({})",
                            parent.name,
                            list(parent_key)
                        ),
                        format!(
                            "its entries are stored in the parent: ON {}({}, …)",
                            table.name,
                            list(parent_key)
                        ),
                    );
                }
            }
        }
        let mut storing = Vec::new();
        for name in &decl.storing {
            let Some(column) = self.column(table, name, &format!("STORING of {what}")) else {
                continue;
            };
            if table.is_key_column(column.id) {
                self.d.error_with_hint(
                    name.pos,
                    format!("STORING key column `{}` in {what}", name.text),
                    "every index entry already holds the entity's primary key",
                );
            } else if columns.iter().any(|k| k.column == column.id) {
                self.d.error_with_hint(
                    name.pos,
                    format!("STORING indexed column `{}` in {what}", name.text),
                    "indexed columns are in the entry's key already",
                );
            } else if storing.contains(&column.id) {
                self.d.error(
                    name.pos,
                    format!("column `{}` appears twice in STORING of {what}", name.text),
                );
            } else {
                storing.push(column.id);
            }
        }
        let id = self.ids.index(&decl.name.text);
        let state = self.ids.index_state(&decl.name.text, table.id);
        Some(Index {
            id,
            name: decl.name.text.clone(),
            kind: decl.kind,
            table: table.id,
            columns,
            storing,
            state,
        })
    }
}
