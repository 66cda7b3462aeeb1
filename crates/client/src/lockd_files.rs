//! Lockd's small files as the library's stores use them: read one, or edit one with a
//! compare-and-set, again on a fresh copy when another writer got in between, so two
//! edits never undo each other.

use megastore_lock::{LockCommand, LockError, LockFile, LockReply};
use megastore_rpc::LockdClient;

use crate::client::ClientError;

/// Edits that lose a race this many times in a row give up.
const EDIT_ATTEMPTS: usize = 16;

/// The file `name` (`None`: never written).
pub(crate) async fn read_file(
    lockd: &LockdClient,
    name: &str,
) -> Result<Option<LockFile>, ClientError> {
    let reply = lockd
        .execute(LockCommand::ReadFile { name: name.into() })
        .await
        .map_err(|e| ClientError::Lock(e.to_string()))?;
    match reply {
        LockReply::File(file) => Ok(file),
        other => Err(ClientError::Lock(format!("unexpected reply {other:?}"))),
    }
}

/// Stores what `edit` makes of the file `name` (`None`: never written), again on the
/// newest copy if another write landed in between; returns what `edit` returned with
/// the contents. An edit that returns an error, or no contents (nothing to change),
/// stores nothing.
pub(crate) async fn edit_file<T>(
    lockd: &LockdClient,
    name: &str,
    mut edit: impl FnMut(Option<&LockFile>) -> Result<(Option<Vec<u8>>, T), ClientError>,
) -> Result<T, ClientError> {
    for _ in 0..EDIT_ATTEMPTS {
        let file = read_file(lockd, name).await?;
        let (contents, answer) = edit(file.as_ref())?;
        let Some(contents) = contents else {
            return Ok(answer);
        };
        let write = LockCommand::WriteFile {
            name: name.into(),
            expected: file.map_or(0, |f| f.version),
            contents,
        };
        match lockd.execute(write).await {
            Ok(LockReply::Written { .. }) => return Ok(answer),
            Ok(other) => return Err(ClientError::Lock(format!("unexpected reply {other:?}"))),
            Err(LockError::VersionMismatch { .. }) => continue,
            Err(e) => return Err(ClientError::Lock(e.to_string())),
        }
    }
    Err(ClientError::Unavailable(format!(
        "{name} changed under {EDIT_ATTEMPTS} edits in a row; try again"
    )))
}
