//! The changes an operator (or a rebalancer) makes to a placement. Each takes the
//! current placement and returns the next one, one version later, or says why not;
//! the caller writes the result to the lock service only if the version it read is
//! still the stored one (compare-and-set), so changes are linearizable.

use megastore_types::{ReplicaId, ReplicaInfo};

use crate::error::ChangeError;
use crate::ids::Server;
use crate::ids::{RangeId, ServerId, Version};
use crate::map::Placement;
use crate::range::{Move, MovePhase, Range, Slot};

/// What [`Placement::split_at`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitAt {
    /// The split, made: the next placement.
    Made(Placement),
    /// A range already starts at the key (a split made before, perhaps by this same
    /// request, whose answer was lost and which its caller sent again): nothing changes.
    AlreadySplit,
}

impl Placement {
    /// Splits at group key `at` the range that holds it, or `range` if named (which
    /// must hold it) — or finds the split already made: a range starts at `at`, and
    /// `range`, if named, is that range or the one ending there. So a split request
    /// repeated after its answer was lost succeeds again, and changes nothing.
    pub fn split_at(&self, range: Option<RangeId>, at: &[u8]) -> Result<SplitAt, ChangeError> {
        if at.is_empty() {
            return Err(ChangeError::SplitAtStart);
        }
        let holder = self.range_of(at);
        if holder.start == at {
            let named = range.map(|id| self.range(id).ok_or(ChangeError::UnknownRange(id)));
            return match named.transpose()? {
                Some(named) if named.id != holder.id && named.end.as_deref() != Some(at) => {
                    Err(ChangeError::SplitOutside {
                        range: named.id,
                        at: at.to_vec(),
                    })
                }
                _ => Ok(SplitAt::AlreadySplit),
            };
        }
        self.split(range.unwrap_or(holder.id), at)
            .map(SplitAt::Made)
    }

    /// The two ranges that meet at `at`, left then right, if a range starts there
    /// after a split (or the placement's start, which has no left).
    pub fn ranges_meeting_at(&self, at: &[u8]) -> Option<(&Range, &Range)> {
        let right = self.range_of(at);
        if right.start != at {
            return None;
        }
        let left = self.ranges.iter().find(|r| r.end.as_deref() == Some(at))?;
        Some((left, right))
    }

    /// Splits range `range` at group key `at`: the left half keeps the id, the right
    /// half gets a new one; both keep the replica set, and both get the new version as
    /// their epoch, so a request routed by the old bounds is sent back to refresh.
    /// Refused while the range is being moved.
    pub fn split(&self, range: RangeId, at: &[u8]) -> Result<Placement, ChangeError> {
        let index = self.range_index(range)?;
        let old = &self.ranges[index];
        refuse_if_moving(old)?;
        if at <= old.start.as_slice() || !old.contains(at) {
            return Err(ChangeError::SplitOutside {
                range,
                at: at.to_vec(),
            });
        }
        let mut next = self.successor();
        let version = next.version;
        let right = Range {
            id: next.next_range,
            start: at.to_vec(),
            end: old.end.clone(),
            epoch: version,
            slots: old.slots.clone(),
            moving: None,
            voters_changed: old.voters_changed,
            voters_since: old.voters_since,
            leaving: old.leaving,
        };
        next.next_range = RangeId(next.next_range.0 + 1);
        let left = &mut next.ranges[index];
        left.end = Some(at.to_vec());
        left.epoch = version;
        next.ranges.insert(index + 1, right);
        next.assert_checked();
        Ok(next)
    }

    /// Adds a replica that joined the cluster (a `[[replicas]]` entry new to the
    /// config, which rejoins and catches up as any replica that lost its store) to
    /// every range, on a server of its own, `server`: the placement of one server per
    /// replica, grown by one. Each range's epoch becomes the new version. A replica
    /// some range already names is left as it is (the same placement comes back), so a
    /// join retried after a lost answer changes nothing. A voter joining is each
    /// range's voter change, refused if a range's voters changed before (see
    /// [`Placement::remove_replica`]); a removed replica never joins again: its join
    /// leaves the placement as it is.
    pub fn add_replica(
        &self,
        replica: &ReplicaInfo,
        server: ServerId,
    ) -> Result<Placement, ChangeError> {
        if self.ranges.iter().any(|r| r.slot(replica.id).is_some()) {
            return Ok(self.clone());
        }
        if self.removed.contains(&replica.id) {
            // *removed-stay-out*: its join changes nothing, so its server takes the
            // placement as it is and serves nothing.
            return Ok(self.clone());
        }
        if self.servers.contains_key(&server) {
            return Err(ChangeError::ServerTaken {
                replica: replica.id,
                server,
            });
        }
        let voter = replica.kind != megastore_types::ReplicaKind::ReadOnly;
        if voter {
            self.refuse_second_voter_change(self.ranges.iter())?;
        }
        let mut next = self.successor();
        let version = next.version;
        next.servers.insert(
            server,
            Server {
                id: server,
                site: replica.site,
            },
        );
        for range in &mut next.ranges {
            range.slots.push(Slot {
                replica: replica.id,
                site: replica.site,
                kind: replica.kind,
                server,
            });
            range.epoch = version;
            if voter {
                range.voters_changed = Some(version);
                range.voters_since = version;
            }
        }
        next.assert_checked();
        Ok(next)
    }

    /// Adds `server`, holding nothing yet, so that slots of its site can be moved to
    /// it (the first step of adding a server to a site). No range changes, so no
    /// epoch does. A server listed already at the same site leaves the placement as it
    /// is (an add retried after a lost answer); at another site it is refused.
    pub fn add_server(&self, server: Server) -> Result<Placement, ChangeError> {
        if let Some(listed) = self.servers.get(&server.id) {
            return if listed.site == server.site {
                Ok(self.clone())
            } else {
                Err(ChangeError::ServerElsewhere {
                    server: server.id,
                    listed: listed.site,
                    asked: server.site,
                })
            };
        }
        let mut next = self.successor();
        next.servers.insert(server.id, server);
        next.assert_checked();
        Ok(next)
    }

    /// Begins moving slot `replica` of `range` to server `to` (at the slot's site,
    /// holding no slot of the range). Nothing changes for the range's readers and
    /// writers yet: its server still serves it while `to` copies it.
    pub fn begin_move(
        &self,
        range: RangeId,
        replica: ReplicaId,
        to: ServerId,
    ) -> Result<Placement, ChangeError> {
        let index = self.range_index(range)?;
        let current = &self.ranges[index];
        refuse_if_moving(current)?;
        if let Some(leaving) = current.leaving {
            return Err(ChangeError::Leaving {
                range,
                replica: leaving.replica,
            });
        }
        let slot = current
            .slot(replica)
            .ok_or(ChangeError::UnknownSlot { range, replica })?;
        let target = self.server(to).ok_or(ChangeError::UnknownServer(to))?;
        if target.site != slot.site {
            return Err(ChangeError::WrongSite {
                range,
                replica,
                slot_site: slot.site,
                server: to,
                server_site: target.site,
            });
        }
        if let Some(held) = current.slot_held_by(to) {
            return Err(ChangeError::AlreadyHolds {
                range,
                server: to,
                replica: held.replica,
            });
        }
        let from = slot.server;
        let mut next = self.successor();
        let id = next.version;
        next.ranges[index].moving = Some(Move {
            id,
            replica,
            from,
            to,
            phase: MovePhase::Copying,
        });
        next.assert_checked();
        Ok(next)
    }

    /// Records that the move's source answered that it froze the range durably. Made
    /// only with that answer in hand: it is what lets the move finish.
    pub fn record_frozen(
        &self,
        range: RangeId,
        move_id: Version,
    ) -> Result<Placement, ChangeError> {
        let (index, _) = self.move_index(range, move_id)?;
        let mut next = self.successor();
        if let Some(m) = next.ranges[index].moving.as_mut() {
            m.phase = MovePhase::Frozen;
        }
        next.assert_checked();
        Ok(next)
    }

    /// Finishes the move: its target holds the slot from now on, at a new epoch. Only
    /// after [`Placement::record_frozen`] (*flip-after-freeze*), and only once the
    /// target copied everything the frozen source holds of the range.
    pub fn finish_move(&self, range: RangeId, move_id: Version) -> Result<Placement, ChangeError> {
        let (index, m) = self.move_index(range, move_id)?;
        if m.phase != MovePhase::Frozen {
            return Err(ChangeError::NotFrozen { range, move_id });
        }
        let mut next = self.successor();
        let version = next.version;
        let moved = &mut next.ranges[index];
        moved.moving = None;
        moved.epoch = version;
        for slot in &mut moved.slots {
            if slot.replica == m.replica {
                slot.server = m.to;
            }
        }
        next.assert_checked();
        Ok(next)
    }

    /// Gives the move up: the source keeps the slot (it unfreezes when it sees this),
    /// the target throws its copy away. The epoch stays: who serves did not change.
    pub fn abort_move(&self, range: RangeId, move_id: Version) -> Result<Placement, ChangeError> {
        let (index, _) = self.move_index(range, move_id)?;
        let mut next = self.successor();
        next.ranges[index].moving = None;
        next.assert_checked();
        Ok(next)
    }

    /// The index of `range` and its move `move_id`, if that move is under way.
    fn move_index(&self, range: RangeId, move_id: Version) -> Result<(usize, Move), ChangeError> {
        let index = self.range_index(range)?;
        match &self.ranges[index].moving {
            Some(m) if m.id == move_id => Ok((index, m.clone())),
            _ => Err(ChangeError::NoSuchMove { range, move_id }),
        }
    }

    /// A copy one version later (the caller then changes it).
    pub(crate) fn successor(&self) -> Placement {
        let mut next = self.clone();
        next.version = Version(self.version.0 + 1);
        next
    }
}

pub(crate) fn refuse_if_moving(range: &Range) -> Result<(), ChangeError> {
    match &range.moving {
        Some(m) => Err(ChangeError::Moving {
            range: range.id,
            move_id: m.id,
        }),
        None => Ok(()),
    }
}
