//! What readers and writers say to a coordinator.

use megastore_types::{EgId, Epoch, Position};
use serde::{Deserialize, Serialize};

/// A request to a coordinator. `id` is the requester's, echoed in the reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorRequest {
    /// Does the local replica hold every visible position of `eg`? (Read step 1.)
    Query {
        /// Request id.
        id: u64,
        /// The entity group.
        eg: EgId,
    },
    /// A reader caught the local replica up through `position`, having queried this
    /// coordinator in `epoch` first. Not acknowledged.
    Validate {
        /// The entity group.
        eg: EgId,
        /// Caught up through this position.
        position: Position,
        /// The epoch the reader's query returned.
        epoch: Epoch,
    },
    /// A writer chose `position` without this replica's accept. (Write step 5.)
    Invalidate {
        /// Request id.
        id: u64,
        /// The entity group.
        eg: EgId,
        /// The position the replica may lack.
        position: Position,
    },
}

impl CoordinatorRequest {
    /// The entity group it concerns (a host routes it by the group's placement).
    pub fn eg(&self) -> &EgId {
        match self {
            Self::Query { eg, .. } | Self::Validate { eg, .. } | Self::Invalidate { eg, .. } => eg,
        }
    }
}

/// A coordinator's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorReply {
    /// The answer to a query.
    Query {
        /// The query's id.
        id: u64,
        /// Whether the coordinator vouches that its replica is current for the group.
        vouched: bool,
        /// The current epoch, if the coordinator holds its lock (to send back with a
        /// validate).
        epoch: Option<Epoch>,
        /// It stopped for good (disabled by an operator, or stopping): it will not
        /// vouch again until its process restarts.
        retired: bool,
    },
    /// The invalidation is recorded.
    Invalidated {
        /// The invalidate's id.
        id: u64,
    },
    /// The invalidation is recorded, but this coordinator's server does not serve the
    /// group's slot now (its range moved away, or is frozen for a move): it does not
    /// count for the invalidation step. The writer routes again by a newer placement.
    NotServed {
        /// The invalidate's id.
        id: u64,
    },
}

impl CoordinatorReply {
    /// The id of the request it answers.
    pub fn id(&self) -> u64 {
        match self {
            Self::Query { id, .. } | Self::Invalidated { id } | Self::NotServed { id } => *id,
        }
    }
}
