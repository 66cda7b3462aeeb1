//! A group's replica set: the replicas of the topology that the placement gives a slot
//! of the group's range (all of them when the caller is not placed). Proposers count
//! voters and majorities over it, and send marks and invalidations to its members; a
//! replica's sweep probes and truncates by it (docs/protocol.md, "Voter changes").
//!
//! A slot removed from the range (`Placement::remove_replica`) is out of the set from the
//! first placement that removed it. A caller whose placement is older still counts it;
//! that is safe — the removed server refuses every request for the range once it
//! reads the placement, so a majority of the old set it can still gather is a majority
//! of the new one, and before that any majority of the old set meets any of the new
//! (one slot apart). Kept in topology order, so a placement with every slot changes
//! nothing about who is asked in what order.

use megastore_placement::{Placement, Range, Version};
use megastore_types::{EgId, ReplicaId, ReplicaInfo, ReplicaKind, Topology};

/// The replica set of one group, as one caller's placement has it.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaSet<'a> {
    topology: &'a Topology,
    /// The group's range in the caller's placement (`None`: not placed, every replica).
    range: Option<&'a Range>,
}

impl<'a> ReplicaSet<'a> {
    /// `eg`'s replica set by `placement` (every replica of `topology` if `None`).
    pub fn of(topology: &'a Topology, placement: Option<&'a Placement>, eg: &EgId) -> Self {
        Self {
            topology,
            range: placement.map(|p| p.range_of(&eg.0)),
        }
    }

    /// Its members, in topology order.
    pub fn replicas(&self) -> impl Iterator<Item = &'a ReplicaInfo> + '_ {
        let range = self.range;
        self.topology
            .replicas()
            .iter()
            .filter(move |r| range.is_none_or(|range| range.slot(r.id).is_some()))
    }

    /// Its members' ids.
    pub fn ids(&self) -> Vec<ReplicaId> {
        self.replicas().map(|r| r.id).collect()
    }

    /// Its members of kind `kind`.
    pub fn of_kind(&self, kind: ReplicaKind) -> Vec<ReplicaId> {
        self.replicas()
            .filter(|r| r.kind == kind)
            .map(|r| r.id)
            .collect()
    }

    /// Its voters: full replicas and witnesses.
    pub fn voters(&self) -> Vec<ReplicaId> {
        self.replicas()
            .filter(|r| r.kind != ReplicaKind::ReadOnly)
            .map(|r| r.id)
            .collect()
    }

    /// How many of its voters make a majority.
    pub fn majority(&self) -> usize {
        self.voters().len() / 2 + 1
    }

    /// The version of the voter set: the caller's placement's `voters_since` for the
    /// range (0 when not placed). Sent with every vote asked for.
    pub fn voters_since(&self) -> Version {
        self.range.map_or(Version(0), |range| range.voters_since)
    }

    /// Whether a current read may ask `r`'s coordinator to vouch: `r` is a full
    /// replica of the set whose slot is not leaving (`Placement::begin_removal`: its
    /// coordinator vouches for none of the range, so asking it is a wasted round trip).
    pub fn vouches_at(&self, r: ReplicaId) -> bool {
        self.of_kind(ReplicaKind::Full).contains(&r) && !self.leaving(r)
    }

    /// Whether `r`'s slot is leaving the range (`Placement::begin_removal`): it still
    /// votes, but is nominated to lead no position and asked to vouch for nothing.
    pub fn leaving(&self, r: ReplicaId) -> bool {
        self.range
            .is_some_and(|range| range.leaving.is_some_and(|l| l.replica == r))
    }

    /// Whether `r` is one of its voters.
    pub fn is_voter(&self, r: ReplicaId) -> bool {
        self.replicas()
            .any(|info| info.id == r && info.kind != ReplicaKind::ReadOnly)
    }
}

#[cfg(test)]
mod tests {
    use megastore_placement::RangeId;
    use megastore_types::SiteId;

    use super::*;

    fn topology() -> Topology {
        let info = |id, kind, site| ReplicaInfo {
            id: ReplicaId(id),
            kind,
            site: SiteId(site),
        };
        Topology::new(vec![
            info(1, ReplicaKind::Full, 0),
            info(2, ReplicaKind::Full, 1),
            info(3, ReplicaKind::Witness, 2),
            info(4, ReplicaKind::Witness, 3),
            info(5, ReplicaKind::ReadOnly, 4),
        ])
        .unwrap()
    }

    #[test]
    fn a_removed_witness_leaves_the_set_and_the_majority_is_counted_without_it() {
        let topology = topology();
        let eg = EgId(b"\x10group".to_vec());
        let all = Placement::one_server_per_replica(&topology);
        let unplaced = ReplicaSet::of(&topology, None, &eg);
        let placed = ReplicaSet::of(&topology, Some(&all), &eg);
        for set in [unplaced, placed] {
            assert_eq!(set.ids(), [1, 2, 3, 4, 5].map(ReplicaId));
            assert_eq!((set.voters().len(), set.majority()), (4, 3));
        }
        let fewer = all.remove_replica(ReplicaId(4), &[RangeId(0)]).unwrap();
        let set = ReplicaSet::of(&topology, Some(&fewer), &eg);
        assert_eq!(set.voters(), [1, 2, 3].map(ReplicaId));
        assert_eq!(set.majority(), 2);
        assert!(!set.is_voter(ReplicaId(4)) && set.is_voter(ReplicaId(3)));
        assert_eq!(set.of_kind(ReplicaKind::ReadOnly), [ReplicaId(5)]);
    }
}
