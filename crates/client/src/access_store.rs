//! The public API's users and roles (`megastore_access::AccessDoc`), kept in lockd's
//! small file `auth/access`: reading the current document, and editing it with a
//! compare-and-set, so two operators' edits never undo each other. Both need the
//! operator token when `[auth]` is on (lockd refuses the file to anyone else).

use megastore_access::{ACCESS_FILE, AccessDoc, AccessError};
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_rpc::LockdClient;

use crate::client::ClientError;

/// Edits that lose a race this many times in a row give up.
const EDIT_ATTEMPTS: usize = 16;

/// The current document and its file version (an empty document, version 0, before
/// the first edit).
pub async fn load_access(lockd: &LockdClient) -> Result<(AccessDoc, u64), ClientError> {
    let reply = lockd
        .execute(LockCommand::ReadFile {
            name: ACCESS_FILE.into(),
        })
        .await
        .map_err(|e| ClientError::Lock(e.to_string()))?;
    let LockReply::File(file) = reply else {
        return Err(ClientError::Lock(format!("unexpected reply {reply:?}")));
    };
    match file {
        None => Ok((AccessDoc::default(), 0)),
        Some(file) => AccessDoc::from_json(&file.contents)
            .map(|doc| (doc, file.version))
            .map_err(|e| ClientError::Corrupt(e.to_string())),
    }
}

/// Applies `edit` to the current document and stores the result, again on a fresh
/// copy if another edit landed in between; returns what `edit` returned. A refused
/// edit (bad input, a name that does not exist) stores nothing.
pub async fn edit_access<T>(
    lockd: &LockdClient,
    mut edit: impl FnMut(&mut AccessDoc) -> Result<T, AccessError>,
) -> Result<T, ClientError> {
    for _ in 0..EDIT_ATTEMPTS {
        let (mut doc, version) = load_access(lockd).await?;
        let answer = edit(&mut doc).map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let write = LockCommand::WriteFile {
            name: ACCESS_FILE.into(),
            expected: version,
            contents: doc.to_json(),
        };
        match lockd.execute(write).await {
            Ok(LockReply::Written { .. }) => return Ok(answer),
            Ok(other) => return Err(ClientError::Lock(format!("unexpected reply {other:?}"))),
            Err(LockError::VersionMismatch { .. }) => continue,
            Err(e) => return Err(ClientError::Lock(e.to_string())),
        }
    }
    Err(ClientError::Unavailable(format!(
        "{ACCESS_FILE} changed under {EDIT_ATTEMPTS} edits in a row; try again"
    )))
}
