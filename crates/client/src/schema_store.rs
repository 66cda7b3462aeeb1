//! The cluster's schema catalog, kept in lockd's small file `schema/catalog` (JSON):
//! applying a new version of a schema file, and reading the current one.
//!
//! A new version keeps every table's and index's id (the schema compiler matches them
//! by name), so rows written before stay readable. A change that would make them
//! unreadable is refused, naming the table and property: a different primary key, a
//! root becoming a child or the other way, or a property changing its type or
//! cardinality.

use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_rpc::LockdClient;
use megastore_schema::{Catalog, Label, TableKind, compile};

use crate::client::ClientError;

/// The lockd file holding the catalog.
pub const CATALOG_FILE: &str = "schema/catalog";

/// The current catalog and its file version (`None`: no schema applied yet).
pub async fn load_catalog(lockd: &LockdClient) -> Result<Option<(Catalog, u64)>, ClientError> {
    let Some(file) = crate::lockd_files::read_file(lockd, CATALOG_FILE).await? else {
        return Ok(None);
    };
    let text = String::from_utf8(file.contents)
        .map_err(|_| ClientError::Corrupt(format!("{CATALOG_FILE} is not UTF-8")))?;
    let catalog = Catalog::from_json(&text)
        .map_err(|e| ClientError::Corrupt(format!("{CATALOG_FILE}: {e}")))?;
    Ok(Some((catalog, file.version)))
}

/// Compiles `text` (from `file`) as the next version of the cluster's schema and
/// stores it; returns the new catalog and its version.
pub async fn apply_schema(
    lockd: &LockdClient,
    file: &str,
    text: &str,
) -> Result<(Catalog, u64), ClientError> {
    let current = load_catalog(lockd).await?;
    let previous = current.as_ref().map(|(c, _)| c);
    let catalog = compile(file, text, previous).map_err(|e| ClientError::Schema(e.to_string()))?;
    if let Some(previous) = previous {
        check_compatible(previous, &catalog)?;
    }
    let expected = current.as_ref().map_or(0, |(_, v)| *v);
    let write = LockCommand::WriteFile {
        name: CATALOG_FILE.into(),
        expected,
        contents: catalog.to_json().into_bytes(),
    };
    match lockd.execute(write).await {
        Ok(LockReply::Written { version }) => Ok((catalog, version)),
        Ok(other) => Err(ClientError::Lock(format!("unexpected reply {other:?}"))),
        Err(LockError::VersionMismatch { .. }) => Err(ClientError::Schema(
            "the schema changed while this one was compiled; apply again".into(),
        )),
        Err(e) => Err(ClientError::Lock(e.to_string())),
    }
}

fn check_compatible(old: &Catalog, new: &Catalog) -> Result<(), ClientError> {
    let refuse = |m: String| Err(ClientError::Schema(format!("incompatible change: {m}")));
    if old.name != new.name {
        return refuse(format!("the schema is {:?}, not {:?}", old.name, new.name));
    }
    for before in &old.tables {
        let Some(after) = new.table(&before.name) else {
            continue;
        };
        let key = |t: &megastore_schema::Table| {
            t.primary_key
                .iter()
                .map(|k| {
                    (
                        t.column_by_id(k.column).name.clone(),
                        t.column_by_id(k.column).ty,
                        k.direction,
                    )
                })
                .collect::<Vec<_>>()
        };
        if key(before) != key(after) {
            return refuse(format!("table {}: its primary key changed", before.name));
        }
        let group = |t: &megastore_schema::Table, c: &Catalog| match t.kind {
            TableKind::Root { scatter } => format!("root (scatter: {scatter})"),
            TableKind::Child { root, .. } => format!(
                "child of {}",
                c.table_by_id(root).map_or("?", |r| r.name.as_str())
            ),
        };
        if group(before, old) != group(after, new) {
            return refuse(format!(
                "table {}: it was a {}, now a {}",
                before.name,
                group(before, old),
                group(after, new)
            ));
        }
        for column in &before.columns {
            if let Some(now) = after.column(&column.name) {
                let repeated = |l: Label| l == Label::Repeated;
                if now.ty != column.ty || repeated(now.label) != repeated(column.label) {
                    return refuse(format!(
                        "{}.{}: its type or cardinality changed",
                        before.name, column.name
                    ));
                }
            }
        }
    }
    for before in &old.indexes {
        let Some(after) = new.index(&before.name) else {
            continue;
        };
        let shape =
            |i: &megastore_schema::Index| (i.kind, i.table, i.columns.clone(), i.storing.clone());
        if shape(before) != shape(after) {
            return refuse(format!(
                "index {}: its kind, table, columns or STORING changed, and its stored entries \
                 would no longer match; give the new index another name (or drop it in one \
                 version and add it again in the next)",
                before.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_compatible;

    const V1: &str = "CREATE SCHEMA S;
CREATE TABLE A { required int64 id; required string x; optional string y; } PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE GLOBAL INDEX AByX ON A(x);";

    /// An index redefined under its name would keep its id, and its stored entries
    /// would no longer decode as the new definition's: refused.
    #[test]
    fn an_index_redefined_under_its_name_is_refused() {
        let v1 = megastore_schema::compile("v1", V1, None).unwrap();
        for changed in [
            V1.replace("ON A(x)", "ON A(y)"),
            V1.replace("ON A(x)", "ON A(x) STORING (y)"),
            V1.replace("GLOBAL INDEX", "LOCAL INDEX")
                .replace("ON A(x)", "ON A(id, x)"),
        ] {
            let v2 = megastore_schema::compile("v2", &changed, Some(&v1)).unwrap();
            let refused = check_compatible(&v1, &v2).unwrap_err().to_string();
            assert!(refused.contains("index AByX"), "{refused}");
        }
        let renamed = V1.replace("AByX ON A(x)", "AByY ON A(y)");
        let v2 = megastore_schema::compile("v2", &renamed, Some(&v1)).unwrap();
        check_compatible(&v1, &v2).unwrap();
    }
}
