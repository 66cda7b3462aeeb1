//! Where groups live (`megastore_placement::Placement`), kept in lockd's small file
//! `placement/ranges`: reading it, and changing it with a compare-and-set (operators
//! only, when `[auth]` is on). Until an operator first changes it, the placement is
//! the one a cluster of one server per replica has (one range on every replica),
//! computed from the config and not stored.

use megastore_placement::{ChangeError, PLACEMENT_FILE, Placement};
use megastore_rpc::LockdClient;
use megastore_types::Topology;

use crate::client::ClientError;
use crate::lockd_files::{edit_file, read_file};

/// The placement, and whether lockd holds it (`false`: the default, not stored yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPlacement {
    /// The placement.
    pub placement: Placement,
    /// Whether it was read from lockd.
    pub stored: bool,
}

/// The current placement of a cluster whose replicas are `topology`.
pub async fn load_placement(
    lockd: &LockdClient,
    topology: &Topology,
) -> Result<StoredPlacement, ClientError> {
    let file = read_file(lockd, PLACEMENT_FILE).await?;
    Ok(StoredPlacement {
        stored: file.is_some(),
        placement: decode(file.map(|f| f.contents).as_deref(), topology)?,
    })
}

fn decode(contents: Option<&[u8]>, topology: &Topology) -> Result<Placement, ClientError> {
    match contents {
        None => Ok(Placement::one_server_per_replica(topology)),
        Some(bytes) => Placement::decode(bytes)
            .map_err(|e| ClientError::Corrupt(format!("{PLACEMENT_FILE}: {e}"))),
    }
}

/// Stores `change` of the current placement, again on the newest one if another
/// change landed in between (a change it no longer fits is refused, naming why);
/// returns the placement stored. A change that returns the placement it was given
/// stores nothing (so a change that finds itself already made can say so).
pub async fn change_placement(
    lockd: &LockdClient,
    topology: &Topology,
    mut change: impl FnMut(&Placement) -> Result<Placement, ChangeError>,
) -> Result<Placement, ClientError> {
    edit_file(lockd, PLACEMENT_FILE, |file| {
        let current = decode(file.map(|f| f.contents.as_slice()), topology)?;
        let next = change(&current).map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let contents = (next != current).then(|| next.encode());
        Ok((contents, next))
    })
    .await
}
