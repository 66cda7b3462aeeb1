//! The coordinator as a pure state machine (docs/protocol.md, paper §4.4.1 and §4.7).
//!
//! Responsibility: answer "is my full replica current for this entity group?" safely.
//! Per group it keeps `Valid { through }` or `Invalid { at }` (absent: not vouched), in
//! memory only, for one *epoch* — the sequencer of the lock it holds in the lock
//! service, so the epoch changes on every restart, lock loss and re-acquire, and every
//! change empties the state. It also drives its own lock session (open, acquire,
//! keep-alive) through [`megastore_lock::LockClient`].
//!
//! Not here: networking, clocks (time is an input), anything about the log.
//!
//! Invariants:
//! - `Invalidate` is always recorded (also for an unknown group, also without the lock)
//!   and never forgotten within an epoch: one invalid group more than `invalid_max`
//!   instead stops it vouching for every group and starts a new epoch
//!   (*invalid-never-forgotten*);
//! - a valid group may be forgotten at any time (past `valid_max`): that only costs its
//!   readers a majority read;
//! - `Validate(eg, p, epoch)` takes effect only while holding the lock and its lease,
//!   only in the current epoch, and only if no invalidate above `p` was recorded;
//! - it vouches only while its lease holds, the lease counted from when the keep-alive
//!   was *sent*, shortened by the drift bound and a margin, so it ends before the lock
//!   service can call the lock lapsed;
//! - revoked ("disabled") or stopping means never vouching again in this process;
//! - *release-after-last-vouch*: it closes its session (giving its lock back, so writers
//!   may skip it at once instead of waiting out the lease) only in the step that stopped
//!   its vouching, or later;
//! - placed on one of many servers ([`Coordinator::placed`], `coordinator/placed.rs`):
//!   *vouch-only-served* (a range held and not moving away), *invalidate-where-served*
//!   (an invalidation for a group not served here is recorded but answered
//!   [`CoordinatorReply::NotServed`]) and *new-epoch-on-arrival* (a range becoming
//!   served restarts the epoch).
//!
//! Memory: one entry per group remembered in the epoch — its key and 8 bytes of state
//! in one allocation, about 46 bytes beside the key (`tests/memory.rs`) — at most
//! `valid_max` valid and `invalid_max` invalid ones.

mod coordinator;
mod groups;
pub mod messages;

pub use coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorConfig, GroupState, INVALID_TRACKED_MAX, Input,
    Output, VALID_TRACKED_MAX, coordinator_lock, lock_name,
};
pub use messages::{CoordinatorReply, CoordinatorRequest};
