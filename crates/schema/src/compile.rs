//! Validation: from a syntax tree to a [`Catalog`], or every problem with a position
//! and a hint.

use std::collections::{HashMap, HashSet};

use crate::catalog::{
    Catalog, Column, ColumnId, Fingerprint, Index, KeyColumn, ObjectId, Table, TableKind,
};
use crate::diagnostic::{Diagnostics, Pos, SchemaError};
use crate::syntax::ast::{
    IndexDecl, IndexKind, KeyColumnDecl, Name, SchemaFile, TableClause, TableDecl,
};
use crate::syntax::parse;
use crate::types::{Label, ScalarType};

/// Parses and validates schema text into a catalog. `file` names the source in errors.
///
/// With `previous`, tables, indexes and columns keep the ids they had there (matched by
/// name) and new ones get ids never used before, so rows written under the previous
/// catalog keep their meaning.
pub fn compile(file: &str, text: &str, previous: Option<&Catalog>) -> Result<Catalog, SchemaError> {
    let ast = parse(file, text)?;
    compile_ast(file, &ast, previous)
}

/// Validates a parsed schema; see [`compile`].
pub fn compile_ast(
    file: &str,
    ast: &SchemaFile,
    previous: Option<&Catalog>,
) -> Result<Catalog, SchemaError> {
    let mut compiler = Compiler {
        d: Diagnostics::new(file),
        ids: IdAllocator {
            previous,
            next: previous.map_or(1, |p| p.next_object_id),
        },
        untyped_columns: HashSet::new(),
    };
    let name = compiler.schema_name(ast);
    let names = compiler.check_names(ast);
    let mut tables: Vec<Table> = ast
        .tables
        .iter()
        .map(|t| compiler.table_columns(t))
        .collect();
    let mut declared_kinds: Vec<Option<DeclaredKind>> = Vec::new();
    for (decl, table) in ast.tables.iter().zip(&mut tables) {
        compiler.primary_key(decl, table);
        declared_kinds.push(compiler.clauses(decl));
    }
    compiler.resolve_children(ast, &mut tables, &declared_kinds, &names);
    compiler.check_in_table_cycles(ast, &tables);
    let indexes: Vec<Index> = ast
        .indexes
        .iter()
        .filter(|decl| {
            names
                .get(decl.name.text.as_str())
                .is_some_and(|first| *first == decl.name.pos)
        })
        .filter_map(|decl| compiler.index(decl, &tables))
        .collect();
    let Compiler { d, ids, .. } = compiler;
    let mut catalog = Catalog {
        name,
        tables,
        indexes,
        next_object_id: ids.next,
        fingerprint: Fingerprint(0),
    };
    catalog.fingerprint = catalog.compute_fingerprint();
    d.finish(catalog)
}

/// What a table's clauses say it is, before names are resolved.
#[derive(Debug, Clone)]
enum DeclaredKind {
    Root {
        scatter: bool,
    },
    Child {
        root: Name,
        group_key: Vec<Name>,
        in_table: Option<Name>,
        pos: Pos,
    },
}

struct IdAllocator<'p> {
    previous: Option<&'p Catalog>,
    next: u32,
}

impl<'p> IdAllocator<'p> {
    fn fresh(&mut self) -> ObjectId {
        let id = ObjectId(self.next);
        self.next += 1;
        id
    }

    fn table(&mut self, name: &str) -> (ObjectId, Option<&'p Table>) {
        match self.previous.and_then(|p| p.table(name)) {
            Some(old) => (old.id, Some(old)),
            None => (self.fresh(), None),
        }
    }

    fn index(&mut self, name: &str) -> ObjectId {
        match self.previous.and_then(|p| p.index(name)) {
            Some(old) => old.id,
            None => self.fresh(),
        }
    }
}

struct Compiler<'p> {
    d: Diagnostics,
    ids: IdAllocator<'p>,
    /// (table, column) declared with an unknown type: reported once, then left out
    /// without "unknown column" errors wherever it is used.
    untyped_columns: HashSet<(ObjectId, String)>,
}

fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    names
        .into_iter()
        .map(|n| n.as_ref().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Compiler<'_> {
    fn schema_name(&mut self, ast: &SchemaFile) -> String {
        match ast.schemas.as_slice() {
            [] => {
                self.d.error_with_hint(
                    Pos { line: 1, col: 1 },
                    "missing CREATE SCHEMA",
                    "start the file with `CREATE SCHEMA Name;`",
                );
                String::new()
            }
            [first, rest @ ..] => {
                for extra in rest {
                    self.d.error_with_hint(
                        extra.pos,
                        format!(
                            "second CREATE SCHEMA `{}`; this file already declared `{}` at {}",
                            extra.text, first.text, first.pos
                        ),
                        "put each schema in its own file",
                    );
                }
                first.text.clone()
            }
        }
    }

    /// Tables and indexes share one namespace. Returns each name's first declaration.
    fn check_names<'a>(&mut self, ast: &'a SchemaFile) -> HashMap<&'a str, Pos> {
        let mut first: HashMap<&str, Pos> = HashMap::new();
        let declared = ast
            .tables
            .iter()
            .map(|t| &t.name)
            .chain(ast.indexes.iter().map(|i| &i.name));
        let mut all: Vec<&Name> = declared.collect();
        all.sort_by_key(|n| n.pos);
        for name in all {
            match first.get(name.text.as_str()) {
                Some(earlier) => self.d.error_with_hint(
                    name.pos,
                    format!(
                        "duplicate name `{}`: already declared at {earlier}",
                        name.text
                    ),
                    "tables and indexes share one namespace; rename one of them",
                ),
                None => {
                    first.insert(&name.text, name.pos);
                }
            }
        }
        first
    }

    fn table_columns(&mut self, decl: &TableDecl) -> Table {
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

    fn scalar_type(&mut self, name: &Name) -> Option<ScalarType> {
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

    /// Resolves `name` to a column of `table`, reporting an unknown one.
    fn column<'t>(&mut self, table: &'t Table, name: &Name, context: &str) -> Option<&'t Column> {
        let found = table.column(&name.text);
        if found.is_none()
            && !self
                .untyped_columns
                .contains(&(table.id, name.text.clone()))
        {
            self.d.error_with_hint(
                name.pos,
                format!("unknown column `{}` in {context}", name.text),
                format!(
                    "table `{}` has: {}",
                    table.name,
                    list(table.columns.iter().map(|c| &c.name))
                ),
            );
        }
        found
    }

    /// Resolves key or index columns, reporting unknown and repeated names.
    fn key_columns(
        &mut self,
        table: &Table,
        decls: &[KeyColumnDecl],
        context: &str,
    ) -> Option<Vec<KeyColumn>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut ok = true;
        for decl in decls {
            let Some(column) = self.column(table, &decl.name, context) else {
                ok = false;
                continue;
            };
            if !seen.insert(column.id) {
                self.d.error(
                    decl.name.pos,
                    format!("column `{}` appears twice in {context}", decl.name.text),
                );
                ok = false;
                continue;
            }
            out.push(KeyColumn {
                column: column.id,
                direction: decl.direction,
            });
        }
        ok.then_some(out)
    }

    fn primary_key(&mut self, decl: &TableDecl, table: &mut Table) {
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

    fn clauses(&mut self, decl: &TableDecl) -> Option<DeclaredKind> {
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

    /// The position of the table named `name` in `tables`, reporting an unknown one.
    fn table_named(&mut self, tables: &[Table], name: &Name, what: &str) -> Option<usize> {
        let found = tables.iter().position(|t| t.name == name.text);
        if found.is_none() {
            self.d.error_with_hint(
                name.pos,
                format!("unknown table `{}` in {what}", name.text),
                format!("tables: {}", list(tables.iter().map(|t| &t.name))),
            );
        }
        found
    }

    fn resolve_children(
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

    fn check_in_table_cycles(&mut self, ast: &SchemaFile, tables: &[Table]) {
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

    fn index(&mut self, decl: &IndexDecl, tables: &[Table]) -> Option<Index> {
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
        Some(Index {
            id,
            name: decl.name.text.clone(),
            kind: decl.kind,
            table: table.id,
            columns,
            storing,
        })
    }
}
