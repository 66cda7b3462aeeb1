//! What lockd's Raft log carries and returns.

use std::io::Cursor;

use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_types::Time;
use serde::{Deserialize, Serialize};

/// One entry of lockd's Raft log. Entries carry the leader's clock reading so every
/// node applies them to the same result: the state machine never reads a clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockEntry {
    /// A client's command, timed by the leader that proposed it.
    Command {
        /// The leader's clock when it proposed the command.
        at: Time,
        /// The command.
        command: LockCommand,
        /// The client's request id: a resend with the same id is answered from the
        /// first application instead of applied again.
        #[serde(default)]
        request: Option<u64>,
    },
    /// A leader restarts every session's lease on its own clock before serving:
    /// lease deadlines set earlier are readings of another clock — another node's, or
    /// this node's before it restarted (a restarted node may lead again in the same
    /// term, its clock starting again from zero).
    RestartLeases {
        /// The leader's clock.
        at: Time,
        /// Which leader: its term and the incarnation of its process.
        clock: LeaseClock,
    },
}

/// Whose clock the leases are counted on: a leader's term and the random incarnation
/// id its process drew at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseClock {
    /// The Raft term.
    pub term: u64,
    /// The leader process's incarnation.
    pub incarnation: u64,
}

/// What applying an entry returned.
pub type LockResult = Result<LockReply, LockError>;

openraft::declare_raft_types!(
    /// openraft's types for lockd: node ids are the config's lockd ids; nodes are
    /// addressed by `host:port`.
    pub TypeConfig:
        D = LockEntry,
        R = LockResult,
);

/// A lockd node id as openraft sees it.
pub(crate) type RaftNodeId = u64;
