//! Tables: columns and their types, primary keys, and what the clauses declare.

use super::{Compiler, DeclaredKind, list};
use crate::catalog::{Column, ColumnId, Table, TableKind};
use crate::syntax::ast::{Name, TableClause, TableDecl};
use crate::types::{Label, ScalarType};

impl Compiler<'_> {
    pub(super) fn table_columns(&mut self, decl: &TableDecl) -> Table {
        let (id, previous) = self.ids.table(&decl.name.text);
        let mut next_column_id = previous.map_or(1, |p| p.next_column_id);
        let mut columns: Vec<Column> = Vec::new();
        for field in &decl.fields {
            if let Some(earlier) = decl
                .fields
                .iter()
                .find(|f| f.name.text == field.name.text && f.name.pos < field.name.pos)
            {
                self.d.error(
                    field.name.pos,
                    format!(
                        "duplicate property `{}` in table `{}` (first declared at {})",
                        field.name.text, decl.name.text, earlier.name.pos
                    ),
                );
                continue;
            }
            let Some(ty) = self.scalar_type(&field.type_name) else {
                self.untyped_columns.insert((id, field.name.text.clone()));
                continue;
            };
            let column_id = match previous.and_then(|p| p.column(&field.name.text)) {
                Some(old) => old.id,
                None => {
                    next_column_id += 1;
                    ColumnId(next_column_id - 1)
                }
            };
            columns.push(Column {
                id: column_id,
                name: field.name.text.clone(),
                ty,
                label: field.label,
            });
        }
        Table {
            id,
            name: decl.name.text.clone(),
            columns,
            primary_key: Vec::new(),
            kind: TableKind::Root { scatter: false },
            next_column_id,
        }
    }

    pub(super) fn scalar_type(&mut self, name: &Name) -> Option<ScalarType> {
        if let Some(ty) = ScalarType::from_name(&name.text) {
            return Some(ty);
        }
        let hint = match ScalarType::from_name(&name.text.to_ascii_lowercase()) {
            Some(ty) => format!("type names are lowercase: `{ty}`"),
            None => format!(
                "types are {}",
                list(ScalarType::ALL.iter().map(|t| t.name()))
            ),
        };
        self.d
            .error_with_hint(name.pos, format!("unknown type `{}`", name.text), hint);
        None
    }

    pub(super) fn primary_key(&mut self, decl: &TableDecl, table: &mut Table) {
        let context = format!("the PRIMARY KEY of `{}`", table.name);
        let Some(key) = self.key_columns(table, &decl.primary_key, &context) else {
            return;
        };
        for (k, kdecl) in key.iter().zip(&decl.primary_key) {
            let column = table.column_by_id(k.column);
            match column.label {
                Label::Repeated => self.d.error_with_hint(
                    kdecl.name.pos,
                    format!(
                        "repeated column `{}` in the PRIMARY KEY of `{}`",
                        column.name, table.name
                    ),
                    "a key identifies one entity; key columns must be `required`",
                ),
                Label::Optional => self.d.error_with_hint(
                    kdecl.name.pos,
                    format!(
                        "optional column `{}` in the PRIMARY KEY of `{}`",
                        column.name, table.name
                    ),
                    "key columns must be `required`",
                ),
                Label::Required => {}
            }
            if !column.ty.can_be_primary_key() {
                self.d.error_with_hint(
                    kdecl.name.pos,
                    format!("column `{}` of type {} cannot be a key", column.name, column.ty),
                    "floating-point values make poor identities (-0 vs 0, NaN); use an integer (e.g. scaled), string or bytes",
                );
            }
        }
        table.primary_key = key;
    }

    pub(super) fn clauses(&mut self, decl: &TableDecl) -> Option<DeclaredKind> {
        let mut root = None;
        let mut scatter = None;
        let mut in_table = None;
        let mut group_key = None;
        for clause in &decl.clauses {
            let (slot, what) = match clause {
                TableClause::Root { .. } => (&mut root, "ENTITY GROUP ROOT"),
                TableClause::Scatter { .. } => (&mut scatter, "SCATTER"),
                TableClause::InTable { .. } => (&mut in_table, "IN TABLE"),
                TableClause::GroupKey { .. } => (&mut group_key, "ENTITY GROUP KEY"),
            };
            if let Some(earlier) = slot.replace(clause) {
                self.d.error(
                    clause.pos(),
                    format!(
                        "{what} given twice for `{}` (first at {})",
                        decl.name.text,
                        earlier.pos()
                    ),
                );
            }
        }
        match (root, group_key) {
            (Some(_), Some(key)) => {
                self.d.error_with_hint(
                    key.pos(),
                    format!("`{}` is both ENTITY GROUP ROOT and a child with ENTITY GROUP KEY", decl.name.text),
                    "a root table says ENTITY GROUP ROOT; a child says ENTITY GROUP KEY(columns) REFERENCES Root",
                );
                None
            }
            (None, None) => {
                self.d.error_with_hint(
                    decl.name.pos,
                    format!("table `{}` does not say which entity group it belongs to", decl.name.text),
                    "add `, ENTITY GROUP ROOT` for a root table or `, ENTITY GROUP KEY(columns) REFERENCES Root` for a child",
                );
                None
            }
            (Some(_), None) => {
                if let Some(TableClause::InTable { pos, .. }) = in_table {
                    self.d.error_with_hint(
                        *pos,
                        format!("IN TABLE on root table `{}`", decl.name.text),
                        "only child tables are stored IN TABLE of a parent; a root starts its own entity groups",
                    );
                }
                Some(DeclaredKind::Root {
                    scatter: scatter.is_some(),
                })
            }
            (None, Some(TableClause::GroupKey { pos, columns, root })) => {
                if let Some(s) = scatter {
                    self.d.error_with_hint(
                        s.pos(),
                        format!("SCATTER on child table `{}`", decl.name.text),
                        "only ENTITY GROUP ROOT tables can be scattered; a child's rows follow its root's (scattered) key",
                    );
                }
                let in_table = match in_table {
                    Some(TableClause::InTable { parent, .. }) => Some(parent.clone()),
                    _ => None,
                };
                Some(DeclaredKind::Child {
                    root: root.clone(),
                    group_key: columns.clone(),
                    in_table,
                    pos: *pos,
                })
            }
            (None, Some(_)) => unreachable!("the group-key slot only ever holds a GroupKey clause"),
        }
    }
}
