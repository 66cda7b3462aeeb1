//! Recursive-descent parser from tokens to [`SchemaFile`]. After an error it skips to
//! the end of the statement and carries on, so one run reports every broken statement.

use super::ast::{
    FieldDecl, IndexDecl, IndexKind, KeyColumnDecl, Name, SchemaFile, TableClause, TableDecl,
};
use super::lexer::{Token, TokenKind, tokenize};
use crate::diagnostic::{Diagnostics, Pos, SchemaError};
use crate::types::{Direction, Label};

/// Parses schema text. `file` names the source in error messages.
///
/// Never panics, whatever the input; every problem comes back as a diagnostic with a
/// position.
pub fn parse(file: &str, text: &str) -> Result<SchemaFile, SchemaError> {
    let (ast, diagnostics, _) = parse_partial(file, text);
    diagnostics.finish(ast)
}

/// A statement abandoned after a syntax error, as far as it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Broken {
    /// A `CREATE SCHEMA`.
    Schema,
    /// A table or index whose name was read.
    Named(String),
    /// One that broke before its name.
    Unnamed,
}

/// Parses what it can: the statements that parsed, the syntax errors, and what each
/// abandoned statement was declaring (so a compiler can tell follow-on errors).
pub(crate) fn parse_partial(file: &str, text: &str) -> (SchemaFile, Diagnostics, Vec<Broken>) {
    let mut diagnostics = Diagnostics::new(file);
    let tokens = tokenize(text, &mut diagnostics);
    let mut parser = Parser {
        tokens,
        next: 0,
        depth: 0,
        diagnostics,
        file: SchemaFile::default(),
        declaring: Broken::Unnamed,
        broken: Vec::new(),
    };
    parser.parse_file();
    let Parser {
        diagnostics,
        file,
        broken,
        ..
    } = parser;
    (file, diagnostics, broken)
}

/// The statement being parsed was abandoned after a reported error.
struct Abandoned;

type Parsed<T> = Result<T, Abandoned>;

struct Parser {
    tokens: Vec<Token>,
    next: usize,
    /// Brace nesting at `next`, for recovery.
    depth: usize,
    diagnostics: Diagnostics,
    file: SchemaFile,
    /// What the statement being parsed declares, as far as known.
    declaring: Broken,
    /// The statements abandoned so far.
    broken: Vec<Broken>,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let token = self.peek().clone();
        match token.kind {
            TokenKind::Punct('{') => self.depth += 1,
            TokenKind::Punct('}') => self.depth = self.depth.saturating_sub(1),
            TokenKind::Eof => return token,
            _ => {}
        }
        self.next += 1;
        token
    }

    fn at_keyword(&self, keyword: &str) -> bool {
        matches!(&self.peek().kind, TokenKind::Word(w) if w.eq_ignore_ascii_case(keyword))
    }

    fn at_punct(&self, c: char) -> bool {
        self.peek().kind == TokenKind::Punct(c)
    }

    fn fail<T>(&mut self, expected: &str, hint: Option<&str>) -> Parsed<T> {
        let token = self.peek().clone();
        let message = format!("expected {expected}, found {}", token.describe());
        match hint {
            Some(hint) => self.diagnostics.error_with_hint(token.pos, message, hint),
            None => self.diagnostics.error(token.pos, message),
        }
        Err(Abandoned)
    }

    fn keyword(&mut self, keyword: &str, hint: Option<&str>) -> Parsed<Pos> {
        if self.at_keyword(keyword) {
            Ok(self.bump().pos)
        } else {
            self.fail(&format!("`{keyword}`"), hint)
        }
    }

    fn punct(&mut self, c: char, hint: Option<&str>) -> Parsed<Pos> {
        if self.at_punct(c) {
            Ok(self.bump().pos)
        } else {
            self.fail(&format!("`{c}`"), hint)
        }
    }

    fn name(&mut self, what: &str) -> Parsed<Name> {
        let token = self.peek().clone();
        match &token.kind {
            TokenKind::Word(w) if !w.starts_with(|c: char| c.is_ascii_digit()) => {
                self.bump();
                Ok(Name {
                    text: w.clone(),
                    pos: token.pos,
                })
            }
            TokenKind::Word(_) => self.fail(what, Some("names start with a letter or `_`")),
            _ => self.fail(what, None),
        }
    }

    /// `name (',' name)*` inside parentheses.
    fn name_list(&mut self, what: &str) -> Parsed<Vec<Name>> {
        self.punct('(', None)?;
        let mut names = vec![self.name(what)?];
        while self.at_punct(',') {
            self.bump();
            names.push(self.name(what)?);
        }
        self.punct(')', Some("separate names with `,`"))?;
        Ok(names)
    }

    /// `name [ASC|DESC] (',' …)*` inside parentheses.
    fn key_columns(&mut self) -> Parsed<Vec<KeyColumnDecl>> {
        self.punct('(', None)?;
        let mut columns = Vec::new();
        loop {
            let name = self.name("a column name")?;
            let direction = if self.at_keyword("ASC") {
                self.bump();
                Direction::Asc
            } else if self.at_keyword("DESC") {
                self.bump();
                Direction::Desc
            } else {
                Direction::Asc
            };
            columns.push(KeyColumnDecl { name, direction });
            if !self.at_punct(',') {
                break;
            }
            self.bump();
        }
        self.punct(
            ')',
            Some("separate key columns with `,`; each may be followed by ASC or DESC"),
        )?;
        Ok(columns)
    }

    fn parse_file(&mut self) {
        while self.peek().kind != TokenKind::Eof {
            let start = self.next;
            self.declaring = Broken::Unnamed;
            if self.statement().is_err() {
                self.broken.push(self.declaring.clone());
                self.recover();
            }
            // Never loop without consuming a token.
            if self.next == start {
                self.bump();
            }
        }
    }

    /// Skips to just past the `;` that ends the broken statement, or to the `CREATE`
    /// of the next one.
    fn recover(&mut self) {
        loop {
            match &self.peek().kind {
                TokenKind::Eof => return,
                TokenKind::Punct(';') if self.depth == 0 => {
                    self.bump();
                    return;
                }
                TokenKind::Word(w) if self.depth == 0 && w.eq_ignore_ascii_case("CREATE") => return,
                _ => {
                    self.bump();
                }
            }
        }
    }

    fn statement(&mut self) -> Parsed<()> {
        let create = self.keyword(
            "CREATE",
            Some("statements are CREATE SCHEMA, CREATE TABLE and CREATE {LOCAL|GLOBAL|INLINE} INDEX, each ending with `;`"),
        )?;
        if self.at_keyword("SCHEMA") {
            self.bump();
            self.declaring = Broken::Schema;
            let name = self.name("a schema name")?;
            self.punct(';', None)?;
            self.file.schemas.push(name);
            return Ok(());
        }
        if self.at_keyword("TABLE") {
            self.bump();
            let table = self.table()?;
            self.file.tables.push(table);
            return Ok(());
        }
        let kind = if self.at_keyword("LOCAL") {
            IndexKind::Local
        } else if self.at_keyword("GLOBAL") {
            IndexKind::Global
        } else if self.at_keyword("INLINE") {
            IndexKind::Inline
        } else {
            return self.fail(
                "`SCHEMA`, `TABLE`, `LOCAL`, `GLOBAL` or `INLINE` after CREATE",
                Some("an index must say its kind: CREATE LOCAL INDEX, CREATE GLOBAL INDEX or CREATE INLINE INDEX"),
            );
        };
        self.bump();
        let index = self.index(create, kind)?;
        self.file.indexes.push(index);
        Ok(())
    }

    fn table(&mut self) -> Parsed<TableDecl> {
        let name = self.name("a table name")?;
        self.declaring = Broken::Named(name.text.clone());
        self.punct('{', Some("a table lists its properties in braces: CREATE TABLE T { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;"))?;
        let mut fields = Vec::new();
        while !self.at_punct('}') {
            fields.push(self.field()?);
        }
        self.punct('}', None)?;
        let primary_key_pos = self.keyword(
            "PRIMARY",
            Some("after the properties comes PRIMARY KEY(columns)"),
        )?;
        self.keyword("KEY", None)?;
        let primary_key = self.key_columns()?;
        let mut clauses = Vec::new();
        while self.at_punct(',') {
            self.bump();
            clauses.push(self.table_clause()?);
        }
        self.punct(
            ';',
            Some("separate clauses with `,` and end the statement with `;`, e.g. PRIMARY KEY(id), ENTITY GROUP ROOT;"),
        )?;
        Ok(TableDecl {
            name,
            fields,
            primary_key_pos,
            primary_key,
            clauses,
        })
    }

    fn field(&mut self) -> Parsed<FieldDecl> {
        let label = if self.at_keyword("required") {
            Label::Required
        } else if self.at_keyword("optional") {
            Label::Optional
        } else if self.at_keyword("repeated") {
            Label::Repeated
        } else {
            return self.fail(
                "`required`, `optional`, `repeated` or `}`",
                Some("each property is `label type name;`, e.g. `required int64 user_id;`"),
            );
        };
        self.bump();
        let type_name = self.name("a type")?;
        let name = self.name("a property name")?;
        self.punct(';', Some("end each property with `;`"))?;
        Ok(FieldDecl {
            label,
            type_name,
            name,
        })
    }

    fn table_clause(&mut self) -> Parsed<TableClause> {
        let pos = self.peek().pos;
        if self.at_keyword("SCATTER") {
            self.bump();
            return Ok(TableClause::Scatter { pos });
        }
        if self.at_keyword("IN") {
            self.bump();
            self.keyword("TABLE", None)?;
            let parent = self.name("a parent table name")?;
            return Ok(TableClause::InTable { pos, parent });
        }
        if self.at_keyword("ENTITY") {
            self.bump();
            self.keyword("GROUP", None)?;
            if self.at_keyword("ROOT") {
                self.bump();
                return Ok(TableClause::Root { pos });
            }
            if self.at_keyword("KEY") {
                self.bump();
                let columns = self.name_list("a column name")?;
                self.keyword(
                    "REFERENCES",
                    Some("ENTITY GROUP KEY(columns) REFERENCES RootTable"),
                )?;
                let root = self.name("a root table name")?;
                return Ok(TableClause::GroupKey { pos, columns, root });
            }
            return self.fail("`ROOT` or `KEY` after ENTITY GROUP", None);
        }
        self.fail(
            "a table clause",
            Some("clauses are ENTITY GROUP ROOT, SCATTER, IN TABLE Parent, ENTITY GROUP KEY(columns) REFERENCES Root"),
        )
    }

    fn index(&mut self, pos: Pos, kind: IndexKind) -> Parsed<IndexDecl> {
        self.keyword("INDEX", None)?;
        let name = self.name("an index name")?;
        self.declaring = Broken::Named(name.text.clone());
        self.keyword("ON", Some("CREATE … INDEX Name ON Table(columns)"))?;
        let table = self.name("a table name")?;
        let columns = self.key_columns()?;
        let storing = if self.at_keyword("STORING") {
            self.bump();
            self.name_list("a column name")?
        } else {
            Vec::new()
        };
        self.punct(
            ';',
            Some("an index statement ends with `;` (after an optional STORING (columns))"),
        )?;
        Ok(IndexDecl {
            pos,
            kind,
            name,
            table,
            columns,
            storing,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn errors_name_the_position_and_parsing_continues() {
        let text = "CREATE SCHEMA S;\nCREATE TABLE A { required int64 id } PRIMARY KEY(id), ENTITY GROUP ROOT;\nCREATE TABLE B { required int64 id; } PRIMARY KEY(id) ENTITY GROUP ROOT;\n";
        let err = parse("s.msdl", text).unwrap_err();
        let rendered: Vec<String> = err
            .diagnostics
            .iter()
            .map(|d| format!("{}:{}", d.pos, d.message))
            .collect();
        assert_eq!(
            rendered,
            vec![
                "2:36:expected `;`, found `}`".to_string(),
                "3:55:expected `;`, found `ENTITY`".to_string()
            ]
        );
    }

    #[test]
    fn keywords_are_case_insensitive_and_names_may_look_like_keywords() {
        let text = "create schema s; create table key { REQUIRED int64 table; } primary key(table desc), entity group root;";
        let file = parse("s", text).unwrap();
        assert_eq!(file.tables[0].name.text, "key");
        assert_eq!(file.tables[0].primary_key[0].direction, Direction::Desc);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn never_panics_on_arbitrary_text(text in "\\PC{0,80}") {
            let _ = crate::compile("fuzz", &text, None);
        }

        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            // What the CLI would hand over after its UTF-8 check, and everything else.
            let _ = crate::compile("fuzz", &String::from_utf8_lossy(&bytes), None);
        }

        #[test]
        fn never_panics_on_statement_soup(words in proptest::collection::vec(proptest::sample::select(vec![
            "CREATE SCHEMA S;", "CREATE TABLE", "CREATE LOCAL INDEX", "CREATE GLOBAL INDEX", "CREATE INLINE INDEX",
            "ON", "STORING", "PRIMARY KEY(", "ENTITY GROUP ROOT", "SCATTER", "IN TABLE", "ENTITY GROUP KEY(",
            "REFERENCES", "ASC", "DESC", "required int64", "required double", "optional string", "repeated string",
            "A", "B", "C", "id", "x", "1x", "{", "}", "(", ")", ";", ",", "--", "\n", "é",
        ]), 0..80)) {
            // compile = parse + validation: neither may panic, whatever the input.
            let _ = crate::compile("fuzz", &words.join(" "), None);
        }
    }
}
