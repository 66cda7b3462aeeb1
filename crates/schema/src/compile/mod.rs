//! Validation: from a syntax tree to a [`Catalog`], or every problem with a position
//! and a hint.

use std::collections::{HashMap, HashSet};

use crate::catalog::{Catalog, Column, Fingerprint, Index, IndexState, KeyColumn, ObjectId, Table};
use crate::diagnostic::{Diagnostics, Pos, SchemaError};
use crate::syntax::ast::{KeyColumnDecl, Name, SchemaFile};
use crate::syntax::{Broken, parse_partial};

/// Parses and validates schema text into a catalog. `file` names the source in errors.
///
/// With `previous`, tables, indexes and columns keep the ids they had there (matched by
/// name) and new ones get ids never used before, so rows written under the previous
/// catalog keep their meaning.
///
/// After a syntax error it still checks the statements that parsed, so every
/// independent error is reported — the syntax errors (root causes) first, then the
/// others — leaving out the follow-ons of a broken statement: errors naming a table or
/// index whose statement broke, a missing `CREATE SCHEMA` when that one broke (and all
/// of them when a statement broke before naming what it declared).
pub fn compile(file: &str, text: &str, previous: Option<&Catalog>) -> Result<Catalog, SchemaError> {
    let (ast, syntax, broken) = parse_partial(file, text);
    if syntax.is_empty() {
        return compile_ast(file, &ast, previous);
    }
    let mut diagnostics = syntax.into_sorted();
    if !broken.contains(&Broken::Unnamed)
        && let Err(semantic) = compile_ast(file, &ast, previous)
    {
        let follow_on = |d: &crate::diagnostic::Diagnostic| {
            broken.iter().any(|b| match b {
                Broken::Schema => d.message.contains("CREATE SCHEMA"),
                Broken::Named(name) => d.message.contains(&format!("`{name}`")),
                Broken::Unnamed => true,
            })
        };
        diagnostics.extend(semantic.diagnostics.into_iter().filter(|d| !follow_on(d)));
    }
    Err(SchemaError { diagnostics })
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
pub(super) enum DeclaredKind {
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

    /// An index keeps its state; a new one on a table the previous version had (which
    /// may hold entities) is [`IndexState::Building`] until backfilled.
    fn index_state(&self, name: &str, table: ObjectId) -> IndexState {
        let Some(previous) = self.previous else {
            return IndexState::Ready;
        };
        match previous.index(name) {
            Some(old) => old.state,
            None if previous.table_by_id(table).is_some() => IndexState::Building,
            None => IndexState::Ready,
        }
    }
}

pub(super) struct Compiler<'p> {
    d: Diagnostics,
    ids: IdAllocator<'p>,
    /// (table, column) declared with an unknown type: reported once, then left out
    /// without "unknown column" errors wherever it is used.
    untyped_columns: HashSet<(ObjectId, String)>,
}

pub(super) fn list(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
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
}

mod groups;
mod indexes;
mod tables;
