//! Removing a full replica's slot: two placement changes with a fence between
//! (docs/protocol.md, "Removing a full replica").
//!
//! A full replica differs from a witness in one way that matters here: its
//! coordinator vouches for its groups, so readers at its site read locally, and a
//! writer must invalidate that coordinator when the replica misses a write. A writer
//! whose placement no longer has the slot invalidates nobody there; so before any
//! placement drops the slot, the coordinator must have stopped vouching for the range
//! for good. [`Placement::begin_removal`] marks the slot [`Leaving`]: the replica
//! still votes and writers still invalidate its coordinator, which vouches for none
//! of the range from that placement on (*vouch-only-served*). The operator then
//! fences that coordinator — it has read the placement, or its lock was free when
//! asked after the placement was stored, so its next epoch reads a placement at
//! least that new before vouching (*placement-read-after-lock*) — and only then does
//! [`Placement::remove_replica`] drop the slot, a voter change like a witness's.

use std::collections::BTreeSet;

use megastore_types::{ReplicaId, ReplicaKind};

use crate::change::refuse_if_moving;
use crate::error::ChangeError;
use crate::ids::{RangeId, ServerId, Version};
use crate::map::Placement;
use crate::operator::OperatorBugs;
use crate::range::{Leaving, Slot};

/// The operator's next step of a removal ([`removal_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemovalStep {
    /// Store this placement (compare-and-set over the one the step was made from):
    /// the slot leaving, or gone.
    Write(Placement),
    /// Fence the coordinators of these servers for placement `since`: each must
    /// answer that it read it, or the lock service that nobody holds its lock (asked
    /// after `since` was stored).
    Fence {
        /// The placement that began the removal.
        since: Version,
        /// The servers not known to be fenced yet.
        servers: Vec<ServerId>,
    },
    /// The stored placement shows the removal made.
    Done,
}

/// The next step of removing `replica` from `ranges` (every range that has it, if
/// empty), from the stored placement and the servers whose coordinators the operator
/// found fenced, for which version, since it started: begin (a full replica's slot
/// leaves), fence, remove. Run again after a crash, it carries on where the stored
/// placement shows the removal to be. The knob `remove_unfenced` skips the fence.
pub fn removal_step(
    placement: &Placement,
    replica: ReplicaId,
    ranges: &[RangeId],
    fenced: &BTreeSet<(ServerId, Version)>,
    bugs: OperatorBugs,
) -> Result<RemovalStep, ChangeError> {
    let begun = placement.begin_removal(replica, ranges)?;
    if begun != *placement {
        return Ok(RemovalStep::Write(begun));
    }
    if let Some((since, servers)) = placement.removal_fence(replica, ranges) {
        let unfenced: Vec<ServerId> = servers
            .into_iter()
            .filter(|server| !fenced.contains(&(*server, since)))
            .collect();
        if !unfenced.is_empty() && !bugs.remove_unfenced() {
            return Ok(RemovalStep::Fence {
                since,
                servers: unfenced,
            });
        }
    }
    let removed = placement.remove_replica(replica, ranges)?;
    Ok(if removed == *placement {
        RemovalStep::Done
    } else {
        RemovalStep::Write(removed)
    })
}

impl Placement {
    /// Begins removing replica `replica`'s slot from each of `ranges` (every range
    /// that has it, if empty) where it is a full replica's: marks it [`Leaving`] at
    /// one new version. Nothing else changes, epochs included. A range where the slot
    /// is a witness's or a read-only replica's, is already leaving, or is gone, is
    /// passed over, so this is the first step of every removal and a retry changes
    /// nothing. Refused while the range is being moved, while its voters' last change
    /// is not caught up (the removal will be a voter change), while another replica
    /// is leaving it, and for a range's last full replica.
    pub fn begin_removal(
        &self,
        replica: ReplicaId,
        ranges: &[RangeId],
    ) -> Result<Placement, ChangeError> {
        let mut indices = Vec::new();
        for (index, slot) in self.slots_named(replica, ranges)? {
            let current = &self.ranges[index];
            let range = current.id;
            match current.leaving {
                Some(leaving) if leaving.replica == replica => continue,
                Some(leaving) => {
                    return Err(ChangeError::Leaving {
                        range,
                        replica: leaving.replica,
                    });
                }
                None => {}
            }
            if slot.kind != ReplicaKind::Full {
                continue;
            }
            refuse_if_moving(current)?;
            self.refuse_second_voter_change(std::iter::once(current))?;
            if !current
                .slots
                .iter()
                .any(|s| s.kind == ReplicaKind::Full && s.replica != replica)
            {
                return Err(ChangeError::LastFull { range, replica });
            }
            indices.push(index);
        }
        if indices.is_empty() {
            return Ok(self.clone());
        }
        let mut next = self.successor();
        let since = next.version;
        for index in indices {
            next.ranges[index].leaving = Some(Leaving { replica, since });
        }
        next.assert_checked();
        Ok(next)
    }

    /// Gives up `replica`'s removal from `ranges` (every range, if empty) where its
    /// slot is leaving and still there: the slot stays, and its coordinator serves the
    /// range again — in a new epoch, as for any range arriving (*new-epoch-on-arrival*),
    /// so nothing it vouched for before counts. Epochs stay (who serves is unchanged).
    /// Nothing to give up, the placement comes back as it is.
    pub fn abort_removal(
        &self,
        replica: ReplicaId,
        ranges: &[RangeId],
    ) -> Result<Placement, ChangeError> {
        let leaving: Vec<usize> = self
            .slots_named(replica, ranges)?
            .into_iter()
            .map(|(index, _)| index)
            .filter(|index| {
                self.ranges[*index]
                    .leaving
                    .is_some_and(|l| l.replica == replica)
            })
            .collect();
        if leaving.is_empty() {
            return Ok(self.clone());
        }
        let mut next = self.successor();
        for index in leaving {
            next.ranges[index].leaving = None;
        }
        next.assert_checked();
        Ok(next)
    }

    /// What fencing `replica`'s removal from `ranges` (every range, if empty) takes,
    /// if it is leaving some of them: the newest version that began it there, and the
    /// servers holding its slot there. Each server's coordinator must have read a
    /// placement at least that new, or have held no lock when the lock service was
    /// asked after that placement was stored; then [`Placement::remove_replica`] may
    /// drop the slot.
    pub fn removal_fence(
        &self,
        replica: ReplicaId,
        ranges: &[RangeId],
    ) -> Option<(Version, Vec<ServerId>)> {
        let mut since = None;
        let mut servers = Vec::new();
        for range in self.ranges_named(replica, ranges) {
            let Some(current) = self.range(range) else {
                continue;
            };
            let Some(leaving) = current.leaving.filter(|l| l.replica == replica) else {
                continue;
            };
            since = since.max(Some(leaving.since));
            if let Some(slot) = current.slot(replica)
                && !servers.contains(&slot.server)
            {
                servers.push(slot.server);
            }
        }
        since.map(|since| (since, servers))
    }

    /// The ranges a removal of `replica` names: `ranges`, or every range with its
    /// slot if that is empty.
    fn ranges_named(&self, replica: ReplicaId, ranges: &[RangeId]) -> Vec<RangeId> {
        if ranges.is_empty() {
            self.ranges
                .iter()
                .filter(|r| r.slot(replica).is_some())
                .map(|r| r.id)
                .collect()
        } else {
            ranges.to_vec()
        }
    }

    /// `replica`'s slot in each range a removal of it names that still has it, with
    /// the range's index. A named range without the slot is passed over if the
    /// replica was removed, or holds a slot elsewhere (a removal retried after a lost
    /// answer); otherwise refused, as is a range that does not exist.
    pub(crate) fn slots_named(
        &self,
        replica: ReplicaId,
        ranges: &[RangeId],
    ) -> Result<Vec<(usize, Slot)>, ChangeError> {
        let mut named = Vec::new();
        for range in self.ranges_named(replica, ranges) {
            let index = self.range_index(range)?;
            match self.ranges[index].slot(replica) {
                Some(slot) => named.push((index, slot.clone())),
                None if self.removed.contains(&replica) || self.holds_elsewhere(replica) => {}
                None => return Err(ChangeError::UnknownSlot { range, replica }),
            }
        }
        Ok(named)
    }
}

#[cfg(test)]
mod tests {
    use megastore_types::ReplicaId;

    use crate::tests::placement;
    use crate::*;

    const FULL: ReplicaId = ReplicaId(1);
    const OTHER_FULL: ReplicaId = ReplicaId(2);
    const WITNESS: ReplicaId = ReplicaId(3);

    /// Replica `FULL`'s slot of range-0 in `p`.
    fn range_slot(p: &Placement) -> Option<&Slot> {
        p.range(RangeId(0)).unwrap().slot(FULL)
    }

    #[test]
    fn a_full_replica_leaves_then_goes_after_its_fence() {
        let p = placement(2);
        // Not before it began leaving.
        assert_eq!(
            p.remove_replica(FULL, &[RangeId(0)]).unwrap_err(),
            ChangeError::RemoveFull {
                range: RangeId(0),
                replica: FULL
            }
        );
        assert_eq!(p.removal_fence(FULL, &[]), None);
        let leaving = p.begin_removal(FULL, &[RangeId(0)]).unwrap();
        let since = leaving.version();
        let range = leaving.range(RangeId(0)).unwrap();
        assert_eq!(
            range.leaving,
            Some(Leaving {
                replica: FULL,
                since
            })
        );
        assert_eq!(
            range.epoch,
            p.range(RangeId(0)).unwrap().epoch,
            "same servers"
        );
        assert_eq!(range.voters_changed, None, "it still votes");
        assert!(leaving.range(RangeId(1)).unwrap().leaving.is_none());
        // Begun again (a retry), nothing changes.
        assert_eq!(leaving.begin_removal(FULL, &[RangeId(0)]).unwrap(), leaving);
        // The fence: its server's coordinator must know `since`.
        let server = range.slot(FULL).unwrap().server;
        assert_eq!(
            leaving.removal_fence(FULL, &[]),
            Some((since, vec![server]))
        );
        // Nothing moves in, and no other full replica leaves, meanwhile.
        assert!(p.begin_move(RangeId(0), OTHER_FULL, ServerId(11)).is_ok());
        assert_eq!(
            leaving
                .begin_move(RangeId(0), OTHER_FULL, ServerId(11))
                .unwrap_err(),
            ChangeError::Leaving {
                range: RangeId(0),
                replica: FULL
            }
        );
        assert_eq!(
            leaving
                .begin_removal(OTHER_FULL, &[RangeId(0)])
                .unwrap_err(),
            ChangeError::Leaving {
                range: RangeId(0),
                replica: FULL
            }
        );
        // Then the slot goes: a voter change, the leaving mark with it.
        let gone = leaving.remove_replica(FULL, &[RangeId(0)]).unwrap();
        let range = gone.range(RangeId(0)).unwrap();
        assert!(range.slot(FULL).is_none() && range.leaving.is_none());
        assert_eq!(range.voters_changed, Some(gone.version()));
        assert_eq!(gone.removal_fence(FULL, &[RangeId(0)]), None);
        // Given up instead, the slot stays and leaves no more; giving up twice, or
        // after it went, changes nothing.
        let kept = leaving.abort_removal(FULL, &[]).unwrap();
        assert!(kept.range(RangeId(0)).unwrap().leaving.is_none());
        assert_eq!(kept.range(RangeId(0)).unwrap().slot(FULL), range_slot(&p));
        assert_eq!(kept.abort_removal(FULL, &[]).unwrap(), kept);
        assert_eq!(gone.abort_removal(FULL, &[RangeId(1)]).unwrap(), gone);
        // Stored and read back, the mark survives; a placement without one stores none.
        assert_eq!(Placement::decode(&leaving.encode()).unwrap(), leaving);
        assert!(!String::from_utf8(p.encode()).unwrap().contains("leaving"));
    }

    #[test]
    fn a_witness_needs_no_beginning_and_the_last_full_replica_stays() {
        let p = placement(2);
        assert_eq!(p.begin_removal(WITNESS, &[]).unwrap(), p);
        assert_eq!(p.removal_fence(WITNESS, &[]), None);
        let one_left = p
            .begin_removal(OTHER_FULL, &[RangeId(0)])
            .and_then(|l| l.remove_replica(OTHER_FULL, &[RangeId(0)]))
            .and_then(|g| g.record_caught_up(RangeId(0), g.version()))
            .unwrap();
        assert_eq!(
            one_left.begin_removal(FULL, &[RangeId(0)]).unwrap_err(),
            ChangeError::LastFull {
                range: RangeId(0),
                replica: FULL
            }
        );
        // A range whose voters changed and are not caught up takes no removal yet.
        let changed = p.remove_replica(WITNESS, &[RangeId(1)]).unwrap();
        assert!(matches!(
            changed.begin_removal(FULL, &[RangeId(1)]).unwrap_err(),
            ChangeError::VotersChanged { .. }
        ));
        // A placement breaking the rule is refused when read.
        let mut broken = p.begin_removal(FULL, &[]).unwrap();
        broken.ranges[0].slots.retain(|s| s.replica != OTHER_FULL);
        assert_eq!(broken.check().unwrap_err().invariant, "leaving-well-formed");
    }
}
