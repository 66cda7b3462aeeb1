//! Where groups live (`megastore_placement::Placement`), kept in lockd's small file
//! `placement/ranges`: reading it, and changing it with a compare-and-set (operators
//! only, when `[auth]` is on). Until an operator first changes it, the placement is
//! the one a cluster of one server per replica has (one range on every replica),
//! computed from the config and not stored.

use std::collections::BTreeMap;

use megastore_config::ClusterConfig;
use megastore_placement::{ChangeError, PLACEMENT_FILE, Placement, RangeId, SplitAt};
use megastore_rowstore::KeyRange;
use megastore_rpc::LockdClient;
use megastore_schema::keyspace::check_split_key;
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
    Placement::stored(contents, topology)
        .map_err(|e| ClientError::Corrupt(format!("{PLACEMENT_FILE}: {e}")))
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

/// A split, stored: the placement after it and the two ranges that meet at its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitDone {
    /// The placement stored.
    pub placement: Placement,
    /// Whether the split had been made already (by an earlier try of this one,
    /// perhaps, whose answer was lost): nothing was written.
    pub already: bool,
    /// The left half: the ids of the range that was split.
    pub left: RangeId,
    /// The right half, which starts at the key.
    pub right: RangeId,
}

/// Splits at group key `at` the range holding it, or `range` if named
/// ([`Placement::split_at`]); a split already made is reported, not refused, so a
/// command whose answer was lost can be run again. A key inside an entity group, or
/// among the groups of a table the cluster's schema does not have, is refused
/// ([`check_split_key`]): a split must fall between groups.
pub async fn split_range(
    lockd: &LockdClient,
    topology: &Topology,
    range: Option<RangeId>,
    at: &[u8],
) -> Result<SplitDone, ClientError> {
    let catalog = crate::schema_store::load_catalog(lockd).await?;
    check_split_key(catalog.as_ref().map(|(catalog, _)| catalog), at)
        .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
    let mut already = false;
    let placement = change_placement(lockd, topology, |p| {
        let outcome = p.split_at(range, at)?;
        already = outcome == SplitAt::AlreadySplit;
        Ok(match outcome {
            SplitAt::Made(next) => next,
            SplitAt::AlreadySplit => p.clone(),
        })
    })
    .await?;
    let (left, right) = placement
        .ranges_meeting_at(at)
        .map(|(left, right)| (left.id, right.id))
        .ok_or_else(|| {
            ClientError::Corrupt(format!(
                "{PLACEMENT_FILE}: no two ranges meet at {at:?} after splitting there"
            ))
        })?;
    Ok(SplitDone {
        placement,
        already,
        left,
        right,
    })
}

/// What a removal did (`replica_removal::remove_replica`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalDone {
    /// The placement stored.
    pub placement: Placement,
    /// The ranges this call removed the replica from (none when an earlier try, whose
    /// answer was lost, removed it already).
    pub removed_from: Vec<RangeId>,
    /// The servers that held its slot of those ranges: each must read the placement
    /// before it stops answering for them.
    pub servers: std::collections::BTreeSet<megastore_placement::ServerId>,
}

impl RemovalDone {
    /// What a change from `before` to `after` removed of `replica`.
    pub fn between(
        before: &Placement,
        after: Placement,
        replica: megastore_types::ReplicaId,
    ) -> Self {
        let removed: Vec<(RangeId, megastore_placement::ServerId)> = before
            .ranges()
            .iter()
            .filter_map(|r| {
                let slot = r.slot(replica)?;
                let gone = after.range(r.id).is_some_and(|n| n.slot(replica).is_none());
                gone.then_some((r.id, slot.server))
            })
            .collect();
        RemovalDone {
            placement: after,
            removed_from: removed.iter().map(|(range, _)| *range).collect(),
            servers: removed.iter().map(|(_, server)| *server).collect(),
        }
    }
}

/// Groups listed per page while counting.
const COUNT_PAGE: usize = 10_000;

/// How many groups each range of `placement` holds: every group some replica holds,
/// listed page by page from a majority of the voters (a scan of their registries).
/// `progress` hears each range's count so far after every page.
pub async fn count_groups(
    config: &ClusterConfig,
    placement: &Placement,
    mut progress: impl FnMut(RangeId, u64),
) -> Result<BTreeMap<RangeId, u64>, ClientError> {
    let mut counts = BTreeMap::new();
    for range in placement.ranges() {
        let keys = KeyRange {
            start: range.start.clone(),
            end: range.end.clone(),
        };
        let (mut count, mut after) = (0u64, None::<Vec<u8>>);
        loop {
            let page =
                crate::backfill::list_groups(config, &keys, after.as_deref(), COUNT_PAGE).await?;
            count += page.len() as u64;
            progress(range.id, count);
            if page.len() < COUNT_PAGE {
                break;
            }
            after = page.last().map(|eg| eg.0.clone());
        }
        counts.insert(range.id, count);
    }
    Ok(counts)
}
