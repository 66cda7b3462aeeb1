//! Lock service requests and responses as messages between nodes.

use serde::{Deserialize, Serialize};

use crate::core::{LockCommand, LockError, LockReply};

/// A request to a lock node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRequest {
    /// Chosen by the requester; echoed in the response.
    pub id: u64,
    /// What to do.
    pub command: LockCommand,
}

/// A lock node's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockResponse {
    /// The request's id.
    pub id: u64,
    /// What happened. [`LockError::NotLeader`] and [`LockError::Unavailable`] mean
    /// the command was not applied by this node.
    pub result: Result<LockReply, LockError>,
}
