//! Schema crate tests against the example schemas and the in-memory row store.

mod catalog;
mod errors;
mod examples;
mod fuzz;
mod mapping;

use std::path::PathBuf;

use megastore_schema::{Catalog, compile};

/// The repository's `schema/` directory.
fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schema")
}

/// Compiles one of the example schemas.
fn example(name: &str) -> Catalog {
    let path = examples_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    compile(name, &text, None).unwrap_or_else(|e| panic!("{e}"))
}
