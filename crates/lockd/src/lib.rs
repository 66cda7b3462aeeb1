//! lockd: the lock service ([`megastore_lock::LockCore`]) replicated with openraft.
//!
//! Responsibility: run the lock service as a fault-tolerant cluster — a Raft log and
//! state on each node's RocksDB directory (through `rowstore-rocksdb`), Raft and the
//! lock service served over gRPC. (Its client, which finds the leader, is
//! `megastore_rpc::LockdClient`: programs that only talk to lockd do not link RocksDB.)
//!
//! ```text
//!   client ──Lock.Call──► leader ──client_write(LockEntry{at: leader clock, cmd})──► Raft log
//!                                                  majority stored (synced) ──► apply LockCore
//!   client ──Lock.Call(ReadFile)──► leader ──ensure_linearizable (heartbeats)──► LockCore::read
//! ```
//!
//! Invariants:
//! - durable before acknowledged: votes, log entries and the commit index are synced
//!   before openraft is told they are stored, so no acknowledged command is lost by a
//!   restart of every node;
//! - applying is deterministic: an entry carries the proposing leader's clock, never
//!   the applying node's;
//! - a leader serves no command but a read of a file before its own `RestartLeases`
//!   entry (naming its term and process incarnation) is applied, so no session lapses
//!   early — or lives on a stale deadline — because leadership moved to another clock,
//!   or a restarted node leads again with its clock starting from zero;
//! - only the leader takes commands (`NotLeader` elsewhere), so every answer —
//!   including holder queries — is linearizable;
//! - a command that only reads (a file, `LockCommand::only_reads`) is answered from
//!   the applied state without a log entry, but only after a read-index round
//!   confirmed the node leads and applied every entry committed before the read;
//! - a command is applied at most once: a resend with the same request id gets the
//!   first application's result (`dedup`), so clients may resend after any failure;
//! - a data directory is stamped with its cluster and node id; another node refuses it.

mod dedup;
mod network;
mod server;
mod state_machine;
mod storage;
mod types;

pub use server::LockdNode;
pub use types::{LeaseClock, LockEntry, LockResult, TypeConfig};

/// Why a lockd node cannot run.
#[derive(Debug, thiserror::Error)]
pub enum LockdError {
    /// `--id` names no lockd node of the config.
    #[error("no lockd node is called {name:?} in the config (lockd nodes: {known})")]
    UnknownNode {
        /// The name given.
        name: String,
        /// The names the config has.
        known: String,
    },
    /// The data directory belongs to another cluster or node.
    #[error("data directory {dir} belongs to {found}, not {expected}; point data_dir elsewhere")]
    WrongDataDir {
        /// The directory.
        dir: String,
        /// Its stamp.
        found: String,
        /// What this node expected.
        expected: String,
    },
    /// The store failed.
    #[error("storage: {0}")]
    Storage(String),
    /// A setting is unusable.
    #[error("config: {0}")]
    Config(String),
    /// The address could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(String, String),
    /// openraft failed to start.
    #[error("raft: {0}")]
    Raft(String),
}
