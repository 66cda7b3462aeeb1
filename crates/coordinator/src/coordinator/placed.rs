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
//! ([`Coordinator::knows_move`]).
//!
//! The rules, each against a way a move could make a local read stale:
//! - *vouch-only-served*: a query for a group of a range this server does not hold, or
//!   is moving away, is not vouched, and a validate for it is ignored.
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
//!
//! [`CoordinatorReply::Invalidated`]: crate::CoordinatorReply::Invalidated
//! [`CoordinatorReply::NotServed`]: crate::CoordinatorReply::NotServed

use megastore_placement::{Placement, Range, ServerId, Span, Version, spans_of, uncovered};
use megastore_types::{EgId, ReplicaId, Time};

use super::{Coordinator, Output};

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

    /// Whether its placement is at least as new as the one that began move `move_id`
    /// (so it shows the move, or its end): from the move's first placement on it serves
    /// nothing of the range, so the operator may freeze the move's source.
    pub fn knows_move(&self, move_id: Version) -> bool {
        self.placement
            .as_ref()
            .is_some_and(|(_, view)| view.version() >= move_id)
    }

    /// Whether this coordinator vouches and acknowledges for `eg` (always, unplaced).
    pub(super) fn serves(&self, eg: &EgId) -> bool {
        let Some((server, view)) = &self.placement else {
            return true;
        };
        served(view.range_of(&eg.0), *server, self.config.replica)
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

/// Whether the coordinator of `replica` on `server` serves `range`: it holds the slot
/// and no move of it away is under way.
fn served(range: &Range, server: ServerId, replica: ReplicaId) -> bool {
    range.slot(replica).is_some_and(|s| s.server == server)
        && range.moving.as_ref().is_none_or(|m| m.from != server)
}

fn served_spans(view: &Placement, server: ServerId, replica: ReplicaId) -> Vec<Span> {
    spans_of(view.ranges().iter().filter(|r| served(r, server, replica)))
}
