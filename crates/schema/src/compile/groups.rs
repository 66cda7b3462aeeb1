//! Entity groups: resolving each child to its root and parent, and IN TABLE cycles.

use std::collections::{HashMap, HashSet};

use super::{Compiler, DeclaredKind, list};
use crate::catalog::{ObjectId, Table, TableKind};
use crate::diagnostic::Pos;
use crate::syntax::ast::{SchemaFile, TableClause};

impl Compiler<'_> {
    pub(super) fn resolve_children(
        &mut self,
        ast: &SchemaFile,
        tables: &mut [Table],
        kinds: &[Option<DeclaredKind>],
        names: &HashMap<&str, Pos>,
    ) {
        // Roots first: a child's checks read its root's resolved key.
        for (table, kind) in tables.iter_mut().zip(kinds) {
            if let Some(DeclaredKind::Root { scatter }) = kind {
                table.kind = TableKind::Root { scatter: *scatter };
            }
        }
        for i in 0..tables.len() {
            let Some(DeclaredKind::Child {
                root,
                group_key,
                in_table,
                pos,
            }) = &kinds[i]
            else {
                continue;
            };
            let decl = &ast.tables[i];
            if names.get(decl.name.text.as_str()) != Some(&decl.name.pos) {
                continue; // a duplicate table; reported already
            }
            let context = format!("the ENTITY GROUP KEY of `{}`", decl.name.text);
            let Some(root_index) =
                self.table_named(tables, root, &format!("REFERENCES of `{}`", decl.name.text))
            else {
                continue;
            };
            let root_table = &tables[root_index];
            if !matches!(kinds[root_index], Some(DeclaredKind::Root { .. })) {
                self.d.error_with_hint(
                    root.pos,
                    format!("ENTITY GROUP KEY of `{}` references `{}`, which is not an ENTITY GROUP ROOT table", decl.name.text, root.text),
                    "REFERENCES names the root of the entity group; to nest under another child use IN TABLE",
                );
                continue;
            }
            let (root_id, root_key) = (root_table.id, root_table.key_parts());
            let root_key_names: Vec<String> = root_table
                .primary_key
                .iter()
                .map(|k| root_table.column_by_id(k.column).name.clone())
                .collect();
            let child = &tables[i];
            let pk_names: Vec<&str> = child
                .primary_key
                .iter()
                .map(|k| child.column_by_id(k.column).name.as_str())
                .collect();
            let key_names: Vec<&str> = group_key.iter().map(|n| n.text.as_str()).collect();
            let mut ok = true;
            for name in group_key {
                ok &= self.column(child, name, &context).is_some();
            }
            if !ok || child.primary_key.is_empty() {
                continue;
            }
            if !pk_names.starts_with(&key_names) {
                self.d.error_with_hint(
                    *pos,
                    format!("ENTITY GROUP KEY({}) of `{}` is not a prefix of its PRIMARY KEY({})", list(&key_names), decl.name.text, list(&pk_names)),
                    "a child's primary key starts with the columns that hold its root's key, so the group is one key range",
                );
                continue;
            }
            if key_names.len() != root_key.len() {
                self.d.error_with_hint(
                    *pos,
                    format!(
                        "ENTITY GROUP KEY of `{}` has {} column(s) but `{}`'s key has {}",
                        decl.name.text,
                        key_names.len(),
                        root.text,
                        root_key.len()
                    ),
                    format!(
                        "list the columns holding `{}`'s key ({})",
                        root.text,
                        list(&root_key_names)
                    ),
                );
                continue;
            }
            let child_key = child.key_parts();
            if let Some(k) = (0..root_key.len()).find(|&k| child_key[k].ty != root_key[k].ty) {
                self.d.error_with_hint(
                    group_key[k].pos,
                    format!(
                        "`{}.{}` is {} but `{}.{}` is {}",
                        decl.name.text,
                        key_names[k],
                        child_key[k].ty,
                        root.text,
                        root_key_names[k],
                        root_key[k].ty
                    ),
                    "an entity group key column must have its root key column's type",
                );
                continue;
            }
            let parent_id = match in_table {
                None => root_id,
                Some(parent_name) => {
                    let Some(parent_index) = self.table_named(
                        tables,
                        parent_name,
                        &format!("IN TABLE of `{}`", decl.name.text),
                    ) else {
                        continue;
                    };
                    let parent = &tables[parent_index];
                    let parent_root = match &kinds[parent_index] {
                        Some(DeclaredKind::Root { .. }) => Some(parent.name.clone()),
                        Some(DeclaredKind::Child { root, .. }) => Some(root.text.clone()),
                        None => None,
                    };
                    if parent_root.as_deref() != Some(root.text.as_str()) {
                        self.d.error_with_hint(
                            parent_name.pos,
                            format!(
                                "IN TABLE `{}` of `{}` is not in `{}`'s entity groups",
                                parent_name.text, decl.name.text, root.text
                            ),
                            "a child is stored under a table of its own entity group",
                        );
                        continue;
                    }
                    let parent_key = parent.key_parts();
                    let fits = parent_key.len() <= child_key.len()
                        && parent_key.iter().zip(&child_key).all(|(p, c)| p.ty == c.ty);
                    if !fits {
                        self.d.error_with_hint(
                            parent_name.pos,
                            format!("the PRIMARY KEY of `{}` does not start with the key of its parent `{}`", decl.name.text, parent_name.text),
                            format!("start it with columns of types ({})", list(parent_key.iter().map(|p| p.ty.name()))),
                        );
                        continue;
                    }
                    parent.id
                }
            };
            tables[i].kind = TableKind::Child {
                root: root_id,
                parent: parent_id,
            };
        }
    }

    pub(super) fn check_in_table_cycles(&mut self, ast: &SchemaFile, tables: &[Table]) {
        let mut reported: HashSet<ObjectId> = HashSet::new();
        for (i, start) in tables.iter().enumerate() {
            let mut path = vec![start.id];
            let mut current = start;
            while let TableKind::Child { parent, root } = current.kind {
                if parent == root {
                    break;
                }
                let Some(next) = tables.iter().find(|t| t.id == parent) else {
                    break;
                };
                if let Some(at) = path.iter().position(|id| *id == next.id) {
                    let cycle = &path[at..];
                    if cycle.contains(&start.id) && cycle.iter().all(|id| !reported.contains(id)) {
                        reported.extend(cycle.iter().copied());
                        let names: Vec<&str> = cycle
                            .iter()
                            .chain(std::iter::once(&next.id))
                            .map(|id| {
                                tables
                                    .iter()
                                    .find(|t| t.id == *id)
                                    .map_or("?", |t| t.name.as_str())
                            })
                            .collect();
                        let pos = ast.tables[i]
                            .clauses
                            .iter()
                            .find(|c| matches!(c, TableClause::InTable { .. }))
                            .map_or(ast.tables[i].name.pos, TableClause::pos);
                        self.d.error_with_hint(
                            pos,
                            format!("IN TABLE cycle: {}", names.join(" → ")),
                            "IN TABLE must lead to the entity group's root",
                        );
                    }
                    break;
                }
                path.push(next.id);
                current = next;
            }
        }
    }
}
