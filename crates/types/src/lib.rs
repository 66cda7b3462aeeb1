//! Identifiers, time and topology shared by the protocol crates (`paxos`,
//! `coordinator`, `lock`) and their drivers.
//!
//! Responsibility: plain value types with no behaviour beyond ordering and arithmetic,
//! so the protocol crates can name the same things without depending on each other;
//! and the size [`limits`] every path checks (with the log bound the config's
//! validation shares with the sweep), so they are the same everywhere.
//!
//! Also the [`bug_knobs!`] macro, so each protocol crate declares its deliberate
//! mistakes the same way and production builds compile them away.
//!
//! Not here: messages (each protocol crate owns its own), encodings, IO.
//!
//! Invariants: [`Ballot::ZERO`] is the only ballot with round 0 and is reserved for
//! the position leader's fast path; every other ballot names its proposer, so two
//! proposers never use the same ballot.

mod bug_knobs;
mod ids;
pub mod limits;
pub mod reserved;
mod time;
mod topology;

pub use ids::{
    Ballot, ClientId, EgId, Epoch, LockNodeId, NodeId, Position, ProposerId, ReplicaId, SiteId,
    TxnId,
};
pub use time::Time;
pub use topology::{ReplicaInfo, ReplicaKind, Topology, TopologyError};
