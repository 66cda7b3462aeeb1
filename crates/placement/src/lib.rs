//! Placement: which replica servers hold which entity groups (docs/protocol.md,
//! "Placement").
//!
//! Responsibility: the meaning of a placement, once. The group key space is split into
//! contiguous [`Range`]s of encoded group keys; each range has a replica set of
//! [`Slot`]s — the voters and read-only replicas its groups' Paxos logs know by
//! [`megastore_types::ReplicaId`] — each held by one [`Server`] at the slot's site.
//! [`Placement`] is one version of all of it, stored in the lock service as one file
//! and changed only by compare-and-set, through the changes here: [`Placement::split`],
//! [`Placement::add_replica`], [`Placement::add_server`] and the move of a slot to
//! another server of its site ([`Placement::begin_move`],
//! [`Placement::record_frozen`], [`Placement::finish_move`],
//! [`Placement::abort_move`]), and the removal of a slot from ranges
//! ([`Placement::remove_replica`], `voters.rs`: a range's next voter change waits for
//! [`Placement::record_caught_up`]; a full replica's slot leaves first,
//! [`Placement::begin_removal`] and [`Placement::removal_fence`] in `leaving.rs`,
//! whose [`removal_step`] is the operator's side of a removal). [`ServerPlacement`] is a
//! server's side: which requests
//! it answers ([`ServerPlacement::judge`]), its durable freezes, and what it retires
//! when it reads a newer placement. [`next_step`] is the operator's side of a move:
//! its next write, copy, freeze or fence, from the stored placement alone and what it
//! did since it started, so a move survives the operator's crash. [`plan_rebalance`]
//! plans moves that even out what a replica's servers carry.
//!
//! Not here: storing the placement (the lock service's files), copying a range's rows
//! (`copy_range` in the paxos crate, over the row store's `copy_span`), routing
//! caches, counting a group's voters over its range's slots (the paxos crate's
//! `ReplicaSet`), and the catch-up pass that a voter change's record waits for (the
//! paxos crate's replica core). A move keeps the slot's replica id, so the groups' Paxos state moves
//! with it unchanged and no quorum changes.
//!
//! Invariants ([`Placement::check`], asserted after every change and checked on every
//! decode): *ranges-partition*, *slot-at-its-site*, *one-slot-per-server*,
//! *epochs-from-the-past*, *move-well-formed*, *leaving-well-formed*, *removed-stay-out*; and, across servers,
//! *flip-after-freeze*, *one-server-per-slot* (see [`ServerPlacement`]),
//! *copy-after-seeing-the-move* (see [`ServerPlacement::receive`]) and
//! *moves-keep-writes* (see [`next_step`]); the property test `tests/moves.rs` checks
//! them under arbitrary interleavings, and catches the knobs `serve_while_frozen`,
//! `receive_before_seeing_move` and `finish_without_final_copy`
//! (`record_frozen_unfenced` is caught over real cores, in the paxos crate's
//! `tests/placed_moves.rs`).
//!
//! ```text
//!  operator / rebalancer ──change──▶ Placement v(n) ──CAS──▶ lock service file
//!                                         │ read (any lag)
//!                                         ▼
//!  request(key, slot, epoch) ──▶ ServerPlacement::judge ──▶ Serve | WrongServer | Refresh | Frozen
//! ```

mod change;
mod error;
mod ids;
mod leaving;
mod map;
mod operator;
mod range;
mod rebalance;
mod serving;
mod voters;

pub use change::SplitAt;
pub use error::{ChangeError, Violation};
pub use ids::{RangeId, Server, ServerId, Version};
pub use leaving::{RemovalStep, removal_step};
pub use map::{DecodeError, Placement};
pub use operator::{
    FinalCopyRefused, MoveEnd, MoveRequest, OperatorBugs, OperatorStep, Progress, next_step,
};
pub use range::{Leaving, Move, MovePhase, Range, Slot};
pub use rebalance::plan_rebalance;
pub use serving::{Observed, PlacementBugs, ServerPlacement, Serving, Span, spans_of, uncovered};

/// The lock-service file that holds the placement (writing it is administration).
pub const PLACEMENT_FILE: &str = "placement/ranges";

#[cfg(test)]
mod tests;
