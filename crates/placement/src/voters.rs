//! Voter changes: removing a replica's slot from ranges' replica sets (docs/protocol.md, "Voter
//! changes").
//!
//! Why removing one slot is safe without writing anything into the groups' logs: the
//! removed server stops answering for the slot as soon as it reads the placement
//! (it judges `WrongServer`, and retires its rows of the range), so from then on a
//! quorum counted over the old voter set is made of the remaining voters alone — and a
//! majority of the old set drawn from the remaining voters is a majority of the new
//! set too. Before that, a proposer that still counts the old set and one that counts
//! the new set may both be at work, and their quorums still meet: a majority of `n`
//! voters and a majority of the `n − 1` left have `⌊n/2⌋ + 1 + ⌊(n−1)/2⌋ + 1 = n + 1`
//! members between them, more than the `n` there are (Raft's single-server change
//! argument). A position chosen before the removal by a quorum that included the
//! removed slot keeps at least `⌊n/2⌋` holders among the remaining voters, which meet
//! every majority of them for the same reason.
//!
//! A *second* change is different: a quorum of the set two changes back need not meet
//! a majority of the newest, and a position chosen with the first removed slot's vote
//! may be held by too few of the voters left. So a second voter change of a range
//! waits until the first is *caught up*: every voter after the first change read the
//! placement that made it (so no voter answers a proposer still counting the set
//! before), and every group's log, up to the highest position any of them knew of, is
//! visible at a majority of them (the replica core's voter catch-up pass). Then the
//! voters after the first change are as good as a set that never changed, and one
//! more single-slot change is safe by the argument above. Both are established by the
//! operator ([`Placement::record_caught_up`] is stored only once every voter's pass
//! succeeded); the placement records the outcome.

use megastore_types::{ReplicaId, ReplicaKind};

use crate::change::refuse_if_moving;
use crate::error::ChangeError;
use crate::ids::{RangeId, Version};
use crate::map::Placement;
use crate::range::Range;

impl Placement {
    /// Removes replica `replica`'s slot (a witness's, a read-only replica's, or a full
    /// replica's whose removal began and whose coordinator was fenced: `leaving.rs`)
    /// from each of `ranges` — from every range that has it, if `ranges` is empty — at
    /// one new version, which becomes each such range's epoch. A replica that then holds no
    /// slot of any range is listed as removed, and may never join again. Removing a
    /// witness is a voter change of the range: refused if its voters changed before.
    /// Refused while a range is being moved. A range that no longer has the slot is
    /// passed over, so a removal retried after a lost answer succeeds again (changing
    /// nothing once every slot is gone).
    pub fn remove_replica(
        &self,
        replica: ReplicaId,
        ranges: &[RangeId],
    ) -> Result<Placement, ChangeError> {
        let mut indices = Vec::new();
        for (index, slot) in self.slots_named(replica, ranges)? {
            let current = &self.ranges[index];
            let range = current.id;
            let leaving = current.leaving.is_some_and(|l| l.replica == replica);
            if slot.kind == ReplicaKind::Full && !leaving {
                return Err(ChangeError::RemoveFull { range, replica });
            }
            refuse_if_moving(current)?;
            if slot.kind != ReplicaKind::ReadOnly {
                self.refuse_second_voter_change(std::iter::once(current))?;
            }
            indices.push((index, slot.kind != ReplicaKind::ReadOnly));
        }
        if indices.is_empty() {
            return if self.removed.contains(&replica) || self.holds_elsewhere(replica) {
                Ok(self.clone())
            } else {
                Err(ChangeError::NotPlaced(replica))
            };
        }
        let mut next = self.successor();
        let version = next.version;
        for (index, voter) in indices {
            let changed = &mut next.ranges[index];
            changed.slots.retain(|s| s.replica != replica);
            changed.leaving = None;
            changed.epoch = version;
            if voter {
                changed.voters_changed = Some(version);
                changed.voters_since = version;
            }
        }
        if !next.holds_elsewhere(replica) {
            next.removed.insert(replica);
        }
        next.assert_checked();
        Ok(next)
    }

    /// Records that `range`'s voter change at `changed_at` is caught up (module doc):
    /// the range may take another voter change. Store it only once the catch-up pass
    /// succeeded at every voter of the range, each judging by a placement that shows
    /// the change. Recorded again (a retry after a lost answer), the placement comes
    /// back as it is; refused if the range's voters changed since, at another version.
    pub fn record_caught_up(
        &self,
        range: RangeId,
        changed_at: Version,
    ) -> Result<Placement, ChangeError> {
        let index = self.range_index(range)?;
        match self.ranges[index].voters_changed {
            None => Ok(self.clone()),
            Some(at) if at == changed_at => {
                let mut next = self.successor();
                next.ranges[index].voters_changed = None;
                next.assert_checked();
                Ok(next)
            }
            Some(at) => Err(ChangeError::VotersChanged { range, at }),
        }
    }

    /// What catching up `range`'s voter change takes, if one waits: the change's
    /// version, and the servers holding the range's voter slots — each must run its
    /// catch-up pass for that version and find every group held before
    /// [`Placement::record_caught_up`] is stored.
    pub fn catch_up_needs(&self, range: RangeId) -> Option<(Version, Vec<crate::ServerId>)> {
        let current = self.range(range)?;
        let changed_at = current.voters_changed?;
        let voters = current
            .slots
            .iter()
            .filter(|s| s.kind != ReplicaKind::ReadOnly)
            .map(|s| s.server)
            .collect();
        Some((changed_at, voters))
    }

    /// The replicas removed from every range: never placed again.
    pub fn removed(&self) -> &std::collections::BTreeSet<ReplicaId> {
        &self.removed
    }

    /// Whether `replica` holds a slot of some range.
    pub(crate) fn holds_elsewhere(&self, replica: ReplicaId) -> bool {
        self.ranges.iter().any(|r| r.slot(replica).is_some())
    }

    /// Refuses a voter change of any of `ranges` whose voters changed before.
    pub(crate) fn refuse_second_voter_change<'a>(
        &self,
        mut ranges: impl Iterator<Item = &'a Range>,
    ) -> Result<(), ChangeError> {
        match ranges.find_map(|r| r.voters_changed.map(|at| (r.id, at))) {
            Some((range, at)) => Err(ChangeError::VotersChanged { range, at }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId};

    use crate::tests::{placement, slots};
    use crate::*;

    const WITNESS: ReplicaId = ReplicaId(3);
    const READ_ONLY: ReplicaId = ReplicaId(4);

    #[test]
    fn removing_a_witness_drops_its_slot_at_a_new_epoch_and_lists_it_once_no_range_holds_it() {
        let p = placement(2);
        let one = p.remove_replica(WITNESS, &[RangeId(0)]).unwrap();
        let range = one.range(RangeId(0)).unwrap();
        assert!(range.slot(WITNESS).is_none());
        assert_eq!(range.epoch, one.version(), "who serves it changed");
        assert_eq!(range.voters_changed, Some(one.version()));
        assert!(one.range(RangeId(1)).unwrap().slot(WITNESS).is_some());
        assert!(one.removed().is_empty(), "range-1 still has it");
        // A removal retried after a lost answer changes nothing.
        assert_eq!(one.remove_replica(WITNESS, &[RangeId(0)]).unwrap(), one);
        let both = one.remove_replica(WITNESS, &[RangeId(1)]).unwrap();
        assert_eq!(
            both.removed().iter().copied().collect::<Vec<_>>(),
            [WITNESS]
        );
        assert_eq!(both.remove_replica(WITNESS, &[]).unwrap(), both);
        // Stored and read back, nothing is lost; a placement without voter changes
        // stores neither field, so placements stored before them still decode.
        assert_eq!(Placement::decode(&both.encode()).unwrap(), both);
        let plain = String::from_utf8(p.encode()).unwrap();
        assert!(!plain.contains("voters_changed") && !plain.contains("removed"));
    }

    #[test]
    fn voter_changes_are_refused_by_name() {
        let p = placement(2);
        assert_eq!(
            p.remove_replica(ReplicaId(1), &[RangeId(0)]).unwrap_err(),
            ChangeError::RemoveFull {
                range: RangeId(0),
                replica: ReplicaId(1)
            }
        );
        assert_eq!(
            p.remove_replica(ReplicaId(9), &[]).unwrap_err(),
            ChangeError::NotPlaced(ReplicaId(9))
        );
        // Not while the range is being moved.
        let begun = p.begin_move(RangeId(0), ReplicaId(1), ServerId(1)).unwrap();
        assert!(matches!(
            begun.remove_replica(WITNESS, &[]).unwrap_err(),
            ChangeError::Moving { .. }
        ));
        // One voter change per range: after the witness left, a voter may not join;
        // a read-only replica may still leave (it does not vote).
        let removed = p.remove_replica(WITNESS, &[RangeId(0)]).unwrap();
        let at = removed.version();
        let voter = ReplicaInfo {
            id: ReplicaId(5),
            kind: ReplicaKind::Witness,
            site: SiteId(2),
        };
        assert_eq!(
            removed.add_replica(&voter, ServerId(50)).unwrap_err(),
            ChangeError::VotersChanged {
                range: RangeId(0),
                at
            }
        );
        let fewer = removed.remove_replica(READ_ONLY, &[RangeId(0)]).unwrap();
        assert_eq!(fewer.range(RangeId(0)).unwrap().voters_changed, Some(at));
        // A voter that joined was the change: the witness may not leave after it.
        let joined = p.add_replica(&voter, ServerId(50)).unwrap();
        assert!(matches!(
            joined.remove_replica(WITNESS, &[RangeId(1)]).unwrap_err(),
            ChangeError::VotersChanged {
                range: RangeId(1),
                ..
            }
        ));
        // Catching it up takes the passes of the voters left (not the read-only
        // replica's, not the removed witness's).
        let (changed_at, voters) = removed.catch_up_needs(RangeId(0)).unwrap();
        assert_eq!(changed_at, at);
        let range = removed.range(RangeId(0)).unwrap();
        let servers = |ids: &[u16]| -> Vec<ServerId> {
            ids.iter()
                .map(|id| range.slot(ReplicaId(*id)).unwrap().server)
                .collect()
        };
        assert_eq!(voters, servers(&[1, 2]));
        assert_eq!(removed.catch_up_needs(RangeId(1)), None, "range-1 has none");
        // Once the change is caught up, the range takes another: a voter may join.
        let caught_up = removed.record_caught_up(RangeId(0), at).unwrap();
        assert_eq!(caught_up.catch_up_needs(RangeId(0)), None);
        assert_eq!(caught_up.range(RangeId(0)).unwrap().voters_changed, None);
        assert_eq!(
            caught_up.range(RangeId(0)).unwrap().epoch,
            at,
            "who serves it did not change"
        );
        assert_eq!(
            caught_up.record_caught_up(RangeId(0), at).unwrap(),
            caught_up
        );
        let grown = caught_up.add_replica(&voter, ServerId(50)).unwrap();
        assert_eq!(
            grown.range(RangeId(0)).unwrap().voters_changed,
            Some(grown.version())
        );
        // A record for an earlier change does not pass for the newer one.
        assert_eq!(
            grown.record_caught_up(RangeId(0), at).unwrap_err(),
            ChangeError::VotersChanged {
                range: RangeId(0),
                at: grown.version()
            }
        );
        // A removed replica never joins again: its join changes nothing.
        let gone = removed.remove_replica(WITNESS, &[]).unwrap();
        let back = slots().replica(WITNESS).unwrap().clone();
        assert_eq!(gone.add_replica(&back, ServerId(51)).unwrap(), gone);
    }

    #[test]
    fn a_server_whose_slot_is_removed_refuses_it_and_retires_the_range() {
        let p = placement(1);
        let key = b"\x10group";
        let server = p.range(RangeId(0)).unwrap().slot(WITNESS).unwrap().server;
        let removed = p.remove_replica(WITNESS, &[RangeId(0)]).unwrap();
        for (bugs, serves) in [
            (PlacementBugs::default(), false),
            (
                PlacementBugs {
                    serve_removed_slot: true,
                    ..PlacementBugs::default()
                },
                true,
            ),
        ] {
            let (mut witness, _) = ServerPlacement::new(server, p.clone(), BTreeMap::new(), bugs);
            assert!(matches!(
                witness.judge(key, WITNESS, None),
                Serving::Serve { .. }
            ));
            let observed = witness.observe(removed.clone());
            assert_eq!(observed.retire.len(), 1, "its rows of the range go");
            assert_eq!(
                matches!(witness.judge(key, WITNESS, None), Serving::Serve { .. }),
                serves
            );
        }
    }

    #[test]
    fn a_voter_refuses_votes_asked_by_a_proposer_counting_an_older_voter_set() {
        let p = placement(1);
        let key = b"\x10group";
        let removed = p.remove_replica(WITNESS, &[RangeId(0)]).unwrap();
        let since = removed.range(RangeId(0)).unwrap().voters_since;
        assert_eq!(since, removed.version());
        // A move, a split or a read-only replica leaving does not change the voters.
        let fewer = removed.remove_replica(READ_ONLY, &[RangeId(0)]).unwrap();
        assert_eq!(fewer.range(RangeId(0)).unwrap().voters_since, since);
        let server = p.range(RangeId(0)).unwrap().slots[0].server;
        for (bugs, refuses) in [
            (PlacementBugs::default(), true),
            (
                PlacementBugs {
                    count_stale_voters: true,
                    ..PlacementBugs::default()
                },
                false,
            ),
        ] {
            let (mut full, _) = ServerPlacement::new(server, p.clone(), BTreeMap::new(), bugs);
            assert_eq!(
                full.stale_voters(key, Version(0)),
                None,
                "nothing changed yet"
            );
            full.observe(fewer.clone());
            assert_eq!(
                full.stale_voters(key, Version(0)).is_some(),
                refuses,
                "a proposer counting the set before the removal"
            );
            assert_eq!(full.stale_voters(key, since), None);
            assert_eq!(full.stale_voters(key, fewer.version()), None, "a newer one");
        }
    }
}
