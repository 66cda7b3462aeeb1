//! A coordinator placed on one of many servers (docs/protocol.md, "Placement"): it
//! vouches only for groups of ranges its server holds and is not moving away, and
//! starts a new epoch when a range arrives.
//!
//! The coordinator is its own process and keeps nothing durable, so it cannot know
//! its replica's freezes. It judges by the placement alone, more strictly than the
//! replica: a range with a move away from its server under way counts as gone from
//! the move's first placement on. Its host reads the placement from the lock service
//! before it answers anything, and the operator freezes a move's source only once the
//! source's coordinator confirms it has read the move
//! ([`Coordinator::knows_placement`]).
//!
//! The rules, each against a way a move or a removal could make a local read stale:
//! - *vouch-only-served*: a query for a group of a range this server does not hold, or
//!   is moving away, or whose slot here is leaving (`Placement::begin_removal`), is not
//!   vouched, and a validate for it is ignored.
//! - *invalidate-where-served*: an invalidation is always recorded, but acknowledged
//!   ([`CoordinatorReply::Invalidated`]) only for a group it serves; otherwise the
//!   answer is [`CoordinatorReply::NotServed`] and it does not count for the writer's
//!   invalidation step. A writer routing by an old placement must not finish its
//!   commit on a coordinator whose vouching no longer matters while the coordinator
//!   that will vouch for the group never heard of the write: by the time a move
//!   finishes, its source's coordinator has stopped acknowledging.
//! - *new-epoch-on-arrival*: when a range becomes served here (a move to this server
//!   finished, or a move away aborted), the coordinator restarts its epoch, so nothing
//!   it remembered about the range's groups from an earlier stay, and no validate sent
//!   before, counts: their readers catch the state up from a majority first.
//! - *placement-read-after-lock*: in each new epoch it vouches for nothing (and
//!   acknowledges no invalidation) until a placement read from the lock service after
//!   it took its lock came back. So an operator who finds its lock free after storing
//!   a placement knows it will judge by that placement or a newer one before it
//!   vouches again: how a dead full replica's removal is fenced
//!   (`Placement::removal_fence`).
//!
//! [`CoordinatorReply::Invalidated`]: crate::CoordinatorReply::Invalidated
//! [`CoordinatorReply::NotServed`]: crate::CoordinatorReply::NotServed

use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_placement::{
    PLACEMENT_FILE, Placement, Range, ServerId, Span, Version, spans_of, uncovered,
};
use megastore_types::{EgId, Epoch, ReplicaId, Time};

use super::{Coordinator, LockRequestKind, Output};

/// Whether a placed coordinator has read the placement since it took its lock
/// (*placement-read-after-lock*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PlacementCheck {
    /// Read since it took its lock (or it is not placed).
    Read,
    /// Asked in this epoch; no answer yet.
    Asking(Epoch),
    /// The read in this epoch failed: asked again at this time, if still serving in
    /// it (a new epoch asks anew).
    RetryAt(Epoch, Time),
}

impl PlacementCheck {
    /// When to ask again, serving in epoch `serving`.
    pub(super) fn retry_at(self, serving: Option<Epoch>) -> Option<Time> {
        match self {
            PlacementCheck::RetryAt(epoch, at) if Some(epoch) == serving => Some(at),
            _ => None,
        }
    }
}

impl Coordinator {
    /// This coordinator, vouching only for the ranges `view` (the newest placement its
    /// host read) puts its replica's slot on `server`, and not moving away.
    pub fn placed(mut self, server: ServerId, view: Placement) -> Self {
        self.placement = Some((server, view));
        self
    }

    /// The placement it judges by, if placed.
    pub fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref().map(|(_, view)| view)
    }

    /// The lock it holds while it serves: its server's when placed.
    pub(super) fn lock_name(&self) -> String {
        match &self.placement {
            Some((server, _)) => crate::coordinator_lock(*server),
            None => crate::lock_name(self.config.replica),
        }
    }

    /// Whether its placement is at least as new as `version`: the one that began a
    /// move (so it shows the move, or its end: from the move's first placement on it
    /// serves nothing of the range, so the operator may freeze the move's source), or
    /// the one that began a removal of its slot (so it vouches for none of the range:
    /// the removal's fence). Placements it reads only get newer, in every epoch.
    pub fn knows_placement(&self, version: Version) -> bool {
        self.placement
            .as_ref()
            .is_some_and(|(_, view)| view.version() >= version)
    }

    /// Whether this coordinator vouches and acknowledges for `eg` (always, unplaced).
    pub(super) fn serves(&self, eg: &EgId) -> bool {
        let Some((server, view)) = &self.placement else {
            return true;
        };
        let read = self.placement_check == PlacementCheck::Read
            || self.config.bugs.vouch_before_placement_read();
        read && served(view.range_of(&eg.0), *server, self.config.replica)
    }

    /// Asks the lock service for the placement in the epoch it now serves in
    /// (*placement-read-after-lock*); a coordinator not placed needs none.
    pub(super) fn read_placement_after_lock(&mut self, now: Time, out: &mut Vec<Output>) {
        let Some(epoch) = self.epoch().filter(|_| self.placement.is_some()) else {
            return;
        };
        self.placement_check = PlacementCheck::Asking(epoch);
        self.send_lock(
            now,
            LockCommand::ReadFile {
                name: PLACEMENT_FILE.into(),
            },
            LockRequestKind::ReadPlacement { epoch },
            out,
        );
    }

    /// The placement read of epoch `epoch` came back: judged by, and from then on
    /// the coordinator vouches in that epoch. An answer from an earlier epoch is
    /// ignored; a failed read or an unusable placement is tried again.
    pub(super) fn on_placement_read(
        &mut self,
        now: Time,
        epoch: Epoch,
        result: Result<LockReply, LockError>,
        out: &mut Vec<Output>,
    ) {
        if self.placement_check != PlacementCheck::Asking(epoch) || self.epoch() != Some(epoch) {
            return;
        }
        let read = match result {
            // Nothing stored yet: the default placement it judges by is the newest.
            Ok(LockReply::File(None)) => Ok(None),
            Ok(LockReply::File(Some(file))) => {
                Placement::decode(&file.contents).map(Some).map_err(|_| ())
            }
            _ => Err(()),
        };
        match read {
            Ok(placement) => {
                self.placement_check = PlacementCheck::Read;
                if let Some(placement) = placement {
                    // A range arriving with it restarts the epoch, which reads again.
                    self.observe_placement(now, placement, out);
                }
            }
            Err(_unreadable) => {
                self.placement_check =
                    PlacementCheck::RetryAt(epoch, now + self.config.retry_delay);
            }
        }
    }

    /// The server read a newer placement; a range arriving restarts the epoch.
    pub(super) fn observe_placement(
        &mut self,
        now: Time,
        placement: Placement,
        out: &mut Vec<Output>,
    ) {
        let replica = self.config.replica;
        let Some((server, view)) = &mut self.placement else {
            return;
        };
        if placement.version() <= view.version() {
            return;
        }
        let before = served_spans(view, *server, replica);
        *view = placement;
        let after = served_spans(view, *server, replica);
        let arrived = !uncovered(&after, &before).is_empty();
        if arrived && !self.config.bugs.vouch_moved_in_range() {
            self.restart_epoch(now, out);
        }
    }
}

/// Whether the coordinator of `replica` on `server` serves `range`: it holds the slot,
/// no move of it away is under way, and the slot is not leaving.
fn served(range: &Range, server: ServerId, replica: ReplicaId) -> bool {
    range.slot(replica).is_some_and(|s| s.server == server)
        && range.moving.as_ref().is_none_or(|m| m.from != server)
        && range.leaving.is_none_or(|l| l.replica != replica)
}

fn served_spans(view: &Placement, server: ServerId, replica: ReplicaId) -> Vec<Span> {
    spans_of(view.ranges().iter().filter(|r| served(r, server, replica)))
}
