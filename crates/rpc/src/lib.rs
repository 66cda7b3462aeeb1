//! The wire: gRPC services and messages generated from `proto/` (tonic + prost), the
//! conversions between them and the pure protocol and schema types, and the transports
//! that carry them (TLS channels, [`Peers`] — connections to every replica,
//! coordinator and lockd node — and the lockd client).
//!
//! Responsibility: turning bytes from the network into `megastore-paxos`,
//! `megastore-coordinator`, `megastore-lock` and `megastore-schema` values and back,
//! and getting them to a peer — nothing else. Conversions happen here and only here
//! (the edge), the public API's too ([`public`]); no protocol decision is taken. The
//! one exception is the client library's own results (its errors, a commit's
//! attempt, versioned entries): they live above this crate, so the replica's gateway
//! turns them into answers. Not here: any server (lockd's Raft and storage live in
//! `megastore-lockd`, so a client of the lock service never links them).
//!
//! Invariants:
//! - every pure value survives `to wire → from wire` unchanged (tested for every
//!   message kind);
//! - a malformed message from a peer is a [`WireError`] naming the field, never a
//!   panic.

mod admin_auth;
mod call_queue;
mod coordinator;
mod copy_pages;
mod error;
mod lock;
mod lockd_client;
mod peers;
pub mod public;
mod relay;
mod replication;
mod rows;
mod session;
mod transport;

pub use admin_auth::{
    OperatorAuth, members_only, peer_common_name, peer_is_member, with_operator_token,
};
pub use coordinator::{
    reply_from_wire as coordinator_reply_from_wire, reply_to_wire as coordinator_reply_to_wire,
};
pub use copy_pages::{
    exported_pages_from_wire, exported_pages_to_wire, final_copy_refusal, final_copy_refused_status,
};
pub use error::WireError;
pub use lockd_client::{BlockingLockdClient, LockdClient, NodeStatus};
pub use peers::Peers;
pub use relay::{relayed_outcome_from_wire, relayed_outcome_to_wire};
pub use replication::{entry_from_wire, entry_to_wire};
pub use transport::{Transport, TransportError};

/// Generated code, one module per protobuf package.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod pb {
    /// `megastore.replication.v1`.
    pub mod replication {
        tonic::include_proto!("megastore.replication.v1");
    }
    /// `megastore.coordinator.v1`.
    pub mod coordinator {
        tonic::include_proto!("megastore.coordinator.v1");
    }
    /// `megastore.lock.v1`.
    pub mod lock {
        tonic::include_proto!("megastore.lock.v1");
    }
    /// `megastore.client.v1`: the public API.
    pub mod client {
        tonic::include_proto!("megastore.client.v1");
    }
    /// `megastore.admin.v1`: operations on one running replica.
    pub mod admin {
        tonic::include_proto!("megastore.admin.v1");
    }
}
