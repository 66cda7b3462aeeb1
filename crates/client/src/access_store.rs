//! The public API's users and roles (`megastore_access::AccessDoc`), kept in lockd's
//! small file `auth/access`: reading the current document, and editing it with a
//! compare-and-set, so two operators' edits never undo each other. Both need the
//! operator token when `[auth]` is on (lockd refuses the file to anyone else).

use megastore_access::{ACCESS_FILE, AccessDoc, AccessError};
use megastore_lock::LockFile;
use megastore_rpc::LockdClient;

use crate::client::ClientError;
use crate::lockd_files::{edit_file, read_file};

/// The current document and its file version (an empty document, version 0, before
/// the first edit).
pub async fn load_access(lockd: &LockdClient) -> Result<(AccessDoc, u64), ClientError> {
    let file = read_file(lockd, ACCESS_FILE).await?;
    Ok((decode(file.as_ref())?, file.map_or(0, |f| f.version)))
}

fn decode(file: Option<&LockFile>) -> Result<AccessDoc, ClientError> {
    match file {
        None => Ok(AccessDoc::default()),
        Some(file) => {
            AccessDoc::from_json(&file.contents).map_err(|e| ClientError::Corrupt(e.to_string()))
        }
    }
}

/// Applies `edit` to the current document and stores the result, again on a fresh
/// copy if another edit landed in between; returns what `edit` returned. A refused
/// edit (bad input, a name that does not exist) stores nothing.
pub async fn edit_access<T>(
    lockd: &LockdClient,
    mut edit: impl FnMut(&mut AccessDoc) -> Result<T, AccessError>,
) -> Result<T, ClientError> {
    edit_file(lockd, ACCESS_FILE, |file| {
        let mut doc = decode(file)?;
        let answer = edit(&mut doc).map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        Ok((Some(doc.to_json()), answer))
    })
    .await
}
