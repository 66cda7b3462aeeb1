//! Errors in schema text, each with a position, what is wrong, and a hint.

use std::fmt;

/// A position in schema text: 1-based line and column (columns count characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// One problem in a schema file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file (or other source name) the text came from.
    pub file: String,
    /// Where the problem is.
    pub pos: Pos,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: error: {}", self.file, self.pos, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every problem found in a schema, in source order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SchemaError {
    /// The problems, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Collects diagnostics for one source file.
#[derive(Debug)]
pub(crate) struct Diagnostics {
    file: String,
    found: Vec<Diagnostic>,
}

impl Diagnostics {
    pub(crate) fn new(file: &str) -> Self {
        Self {
            file: file.to_string(),
            found: Vec::new(),
        }
    }

    pub(crate) fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.push(pos, message.into(), None);
    }

    pub(crate) fn error_with_hint(
        &mut self,
        pos: Pos,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.push(pos, message.into(), Some(hint.into()));
    }

    fn push(&mut self, pos: Pos, message: String, hint: Option<String>) {
        self.found.push(Diagnostic {
            file: self.file.clone(),
            pos,
            message,
            hint,
        });
    }

    /// Whether nothing was reported.
    pub(crate) fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The diagnostics reported, in source order.
    pub(crate) fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.found.sort_by_key(|d| d.pos);
        self.found.dedup();
        self.found
    }

    /// `Ok(value)` if nothing was reported, else every diagnostic in source order.
    pub(crate) fn finish<T>(mut self, value: T) -> Result<T, SchemaError> {
        if self.found.is_empty() {
            return Ok(value);
        }
        self.found.sort_by_key(|d| d.pos);
        self.found.dedup();
        Err(SchemaError {
            diagnostics: self.found,
        })
    }
}
