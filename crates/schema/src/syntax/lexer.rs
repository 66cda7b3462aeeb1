//! Splits schema text into words and punctuation, skipping `--` comments.

use crate::diagnostic::{Diagnostics, Pos};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// A run of ASCII letters, digits and underscores: a keyword, type or name.
    Word(String),
    /// One of `{ } ( ) ; ,`.
    Punct(char),
    /// The end of the text.
    Eof,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) kind: TokenKind,
    pub(crate) pos: Pos,
}

impl Token {
    /// How the token reads in an error message.
    pub(crate) fn describe(&self) -> String {
        match &self.kind {
            TokenKind::Word(w) => format!("`{w}`"),
            TokenKind::Punct(c) => format!("`{c}`"),
            TokenKind::Eof => "the end of the file".to_string(),
        }
    }
}

const PUNCTUATION: &[char] = &['{', '}', '(', ')', ';', ','];

/// The tokens of `text`, always ending with [`TokenKind::Eof`]. Characters that
/// belong to no token are reported and skipped.
pub(crate) fn tokenize(text: &str, diagnostics: &mut Diagnostics) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    let mut pos = Pos { line: 1, col: 1 };
    let advance = |c: char, pos: &mut Pos| {
        if c == '\n' {
            pos.line = pos.line.saturating_add(1);
            pos.col = 1;
        } else {
            pos.col = pos.col.saturating_add(1);
        }
    };
    while let Some(&c) = chars.peek() {
        let start = pos;
        if c.is_whitespace() {
            chars.next();
            advance(c, &mut pos);
        } else if c == '-' && chars.clone().nth(1) == Some('-') {
            while let Some(&c) = chars.peek() {
                if c == '\n' {
                    break;
                }
                chars.next();
                advance(c, &mut pos);
            }
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let mut word = String::new();
            while let Some(&c) = chars
                .peek()
                .filter(|c| c.is_ascii_alphanumeric() || **c == '_')
            {
                word.push(c);
                chars.next();
                advance(c, &mut pos);
            }
            tokens.push(Token {
                kind: TokenKind::Word(word),
                pos: start,
            });
        } else if PUNCTUATION.contains(&c) {
            chars.next();
            advance(c, &mut pos);
            tokens.push(Token {
                kind: TokenKind::Punct(c),
                pos: start,
            });
        } else {
            chars.next();
            advance(c, &mut pos);
            let hint = match c {
                '"' | '\'' => "the schema language has no string literals",
                '/' | '#' => "comments start with `--`",
                '.' | ':' => "names are plain words of letters, digits and `_`",
                _ if !c.is_ascii() => "names use ASCII letters, digits and `_` only",
                _ => "expected a word or one of { } ( ) ; ,",
            };
            diagnostics.error_with_hint(start, format!("unexpected character {c:?}"), hint);
        }
    }
    tokens.push(Token {
        kind: TokenKind::Eof,
        pos,
    });
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let mut d = Diagnostics::new("t");
        let tokens = tokenize("-- comment\n  é x{", &mut d);
        assert_eq!(
            tokens[0],
            Token {
                kind: TokenKind::Word("x".into()),
                pos: Pos { line: 2, col: 5 }
            }
        );
        assert_eq!(tokens[1].pos, Pos { line: 2, col: 6 });
        assert!(matches!(tokens[2].kind, TokenKind::Eof));
        let err = d.finish(()).unwrap_err();
        assert_eq!(err.diagnostics[0].pos, Pos { line: 2, col: 3 });
    }
}
