//! The schema language's surface: tokens, the syntax tree, and the parser.
//!
//! The grammar (keywords are case-insensitive, names are case-sensitive):
//!
//! ```text
//! file      := statement*
//! statement := CREATE SCHEMA name ';'
//!            | CREATE TABLE name '{' field* '}' PRIMARY KEY '(' keycols ')' (',' clause)* ';'
//!            | CREATE (LOCAL | GLOBAL | INLINE) INDEX name ON name '(' keycols ')'
//!                     [STORING '(' names ')'] ';'
//! field     := (required | optional | repeated) type name ';'
//! keycols   := name [ASC | DESC] (',' name [ASC | DESC])*
//! clause    := ENTITY GROUP ROOT | SCATTER | IN TABLE name
//!            | ENTITY GROUP KEY '(' names ')' REFERENCES name
//! ```
//!
//! `--` starts a comment that runs to the end of the line.

pub mod ast;
mod lexer;
mod parser;

pub use parser::parse;
pub(crate) use parser::{Broken, parse_partial};
