//! Why a placement, or a change to one, is refused.

use megastore_types::{ReplicaId, SiteId};
use thiserror::Error;

use crate::ids::{RangeId, ServerId, Version};

/// A change to the placement that cannot be made. Each names what and where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChangeError {
    /// No range has this id.
    #[error("{0} does not exist")]
    UnknownRange(RangeId),
    /// No server has this id.
    #[error("{0} is not a server of this cluster")]
    UnknownServer(ServerId),
    /// A server id given twice.
    #[error("{0} is listed twice")]
    DuplicateServer(ServerId),
    /// The range has no such slot.
    #[error("{range} has no replica {}", replica.0)]
    UnknownSlot {
        /// The range.
        range: RangeId,
        /// The slot asked for.
        replica: ReplicaId,
    },
    /// A split key at or outside a range's bounds.
    #[error("{range} cannot be split at {at:?}: the key must lie strictly inside it")]
    SplitOutside {
        /// The range.
        range: RangeId,
        /// The key given.
        at: Vec<u8>,
    },
    /// A split at the empty key, where the key space starts.
    #[error("the key space starts at the empty key; a split needs a key after it")]
    SplitAtStart,
    /// The range is being moved: it is neither split nor moved again until that ends.
    #[error("{range} is being moved (move {move_id}); finish or abort that first")]
    Moving {
        /// The range.
        range: RangeId,
        /// The move under way.
        move_id: Version,
    },
    /// A slot must stay at its site.
    #[error("{server} is at site {}, but replica {} of {range} is at site {}", server_site.0, replica.0, slot_site.0)]
    WrongSite {
        /// The range.
        range: RangeId,
        /// The slot.
        replica: ReplicaId,
        /// The slot's site.
        slot_site: SiteId,
        /// The server named.
        server: ServerId,
        /// Its site.
        server_site: SiteId,
    },
    /// A server is listed already, at another site.
    #[error("{server} is listed at site {}, not {}", listed.0, asked.0)]
    ServerElsewhere {
        /// The server.
        server: ServerId,
        /// Its site in the placement.
        listed: megastore_types::SiteId,
        /// The site asked for.
        asked: megastore_types::SiteId,
    },
    /// A server would hold two slots of one range.
    #[error("{server} already holds replica {} of {range}", replica.0)]
    AlreadyHolds {
        /// The range.
        range: RangeId,
        /// The server.
        server: ServerId,
        /// The slot it holds.
        replica: ReplicaId,
    },
    /// No move of this id is under way for the range.
    #[error("{range} has no move {move_id} under way")]
    NoSuchMove {
        /// The range.
        range: RangeId,
        /// The move named.
        move_id: Version,
    },
    /// A move finishes only after its source froze the range (*flip-after-freeze*).
    #[error("move {move_id} of {range} cannot finish: its source has not frozen the range")]
    NotFrozen {
        /// The range.
        range: RangeId,
        /// The move.
        move_id: Version,
    },
    /// A replica new to the placement joins on a server of its own, but a server of
    /// that id is already placed.
    #[error("replica {} joins on {server}, but {server} is already a server of the placement", replica.0)]
    ServerTaken {
        /// The replica joining.
        replica: ReplicaId,
        /// Its server.
        server: ServerId,
    },
    /// A default placement cannot be made.
    #[error("no default placement: {0}")]
    Initial(String),
    /// A full replica's slot is removed only after its removal began and its
    /// coordinator was fenced ([`crate::Placement::begin_removal`]).
    #[error("replica {} of {range} is a full replica whose removal has not begun: `megastore range remove-replica` begins it, fences its coordinator, then removes it", replica.0)]
    RemoveFull {
        /// The range.
        range: RangeId,
        /// The slot asked for.
        replica: ReplicaId,
    },
    /// The range's voter set changed at `at`, and that change is not caught up yet: a
    /// second change needs every group's log held by a majority of the voters after
    /// the first (`megastore range catch-up`, [`crate::Placement::record_caught_up`]).
    #[error(
        "the voters of {range} changed at {at} and that change is not caught up yet: run `megastore range catch-up {range}` first (docs/protocol.md, \"Voter changes\")"
    )]
    VotersChanged {
        /// The range.
        range: RangeId,
        /// The placement version of its earlier voter change.
        at: Version,
    },
    /// A range keeps at least one full replica that is not leaving.
    #[error("replica {} is the last full replica of {range}: a range keeps one", replica.0)]
    LastFull {
        /// The range.
        range: RangeId,
        /// The slot asked for.
        replica: ReplicaId,
    },
    /// Another full replica's removal from the range is under way.
    #[error("replica {} is leaving {range}: finish its removal (`megastore range remove-replica`) first", replica.0)]
    Leaving {
        /// The range.
        range: RangeId,
        /// The replica leaving it.
        replica: ReplicaId,
    },
    /// No range has a slot of this replica, and it was never removed.
    #[error("replica {} holds no slot of any range", .0.0)]
    NotPlaced(ReplicaId),
}

/// An invariant a placement breaks (one read from the lock service, or a bug).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("placement {version} breaks *{invariant}*: {detail}")]
pub struct Violation {
    /// The placement's version.
    pub version: Version,
    /// The invariant's name, as docs/protocol.md spells it.
    pub invariant: &'static str,
    /// What and where.
    pub detail: String,
}
