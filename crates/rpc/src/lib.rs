//! The wire: gRPC services and messages generated from `proto/` (tonic + prost), the
//! conversions between them and the pure protocol types, and the transports that carry
//! them (TLS channels, the lockd client).
//!
//! Responsibility: turning bytes from the network into `megastore-paxos` and
//! `megastore-coordinator` and `megastore-lock` values and back, and getting them to a
//! peer — nothing else. Conversions happen here and only here (the edge); no protocol
//! decision is taken. Not here: any server (lockd's Raft and storage live in
//! `megastore-lockd`, so a client of the lock service never links them).
//!
//! Invariants:
//! - every pure value survives `to wire → from wire` unchanged (tested for every
//!   message kind);
//! - a malformed message from a peer is a [`WireError`] naming the field, never a
//!   panic.

mod coordinator;
mod error;
mod lock;
mod lockd_client;
mod replication;
mod rows;
mod transport;

pub use coordinator::{
    reply_from_wire as coordinator_reply_from_wire, reply_to_wire as coordinator_reply_to_wire,
};
pub use error::WireError;
pub use lockd_client::{BlockingLockdClient, LockdClient, NodeStatus};
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
