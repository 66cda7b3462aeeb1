//! A coordinator placed on one of many servers (docs/protocol.md, "Placement"): it
//! vouches only for groups of ranges its server serves, and starts a new epoch when a
//! range arrives.
//!
//! The rules, each against a way a move could make a local read stale:
//! - *vouch-only-served*: a query for a group whose range this server does not serve
//!   (placed elsewhere, or frozen for a move away) is not vouched, and a validate for
//!   it is ignored.
//! - *invalidate-where-served*: an invalidation is always recorded, but acknowledged
//!   ([`CoordinatorReply::Invalidated`]) only for a group this server serves; otherwise
//!   the answer is [`CoordinatorReply::NotServed`] and it does not count for the
//!   writer's invalidation step. A writer routing by an old placement (the range moved
//!   on, or is frozen) must not finish its commit on a coordinator whose vouching no
//!   longer matters, while the coordinator that now vouches for the group never heard.
//! - *new-epoch-on-arrival*: when a range becomes served here (a move to this server
//!   finished, or a freeze lifted), the coordinator restarts its epoch, so nothing it
//!   remembered about the range's groups from an earlier stay, and no validate sent
//!   before, counts: their readers catch the copied state up from a majority first.

use megastore_placement::{Placement, RangeId, ServerPlacement, Serving, Version};
use megastore_types::{EgId, Time};

use super::{Coordinator, Output};

impl Coordinator {
    /// This coordinator, vouching only for the ranges `placement` puts its replica's
    /// slot on its server (the placement the server read, and the freezes it
    /// persisted).
    pub fn placed(mut self, placement: ServerPlacement) -> Self {
        self.placement = Some(placement);
        self
    }

    /// The server's placement, if the coordinator is placed.
    pub fn placement(&self) -> Option<&ServerPlacement> {
        self.placement.as_ref()
    }

    /// Whether this coordinator's server serves its replica's slot of `eg` (always,
    /// unplaced).
    pub(super) fn serves(&self, eg: &EgId) -> bool {
        self.placement.as_ref().is_none_or(|p| {
            matches!(
                p.judge(&eg.0, self.config.replica, None),
                Serving::Serve { .. }
            )
        })
    }

    /// The server read a newer placement; a range arriving restarts the epoch.
    pub(super) fn observe_placement(
        &mut self,
        now: Time,
        placement: Placement,
        out: &mut Vec<Output>,
    ) {
        let Some(server) = &mut self.placement else {
            return;
        };
        let before = server.clone();
        server.observe(placement);
        self.after_placement_change(now, &before, out);
    }

    /// The server froze `range` for `move_id` (its replica persisted the freeze): its
    /// groups are vouched for no more. Ignored unless the placement shows the move
    /// from this server, as the replica's freeze is.
    pub(super) fn freeze(&mut self, range: RangeId, move_id: Version) {
        if let Some(server) = &mut self.placement {
            // A refused freeze changes nothing; the replica refuses it the same way.
            let _ = server.freeze(range, move_id);
        }
    }

    fn after_placement_change(
        &mut self,
        now: Time,
        before: &ServerPlacement,
        out: &mut Vec<Output>,
    ) {
        let Some(server) = &self.placement else {
            return;
        };
        let arrived = !server.newly_served(before, self.config.replica).is_empty();
        if arrived && !self.config.bugs.vouch_moved_in_range() {
            self.restart_epoch(now, out);
        }
    }
}
