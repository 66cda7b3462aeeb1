//! The server processes of a replica site — the replica server ([`ReplicaProcess`],
//! which also serves the public API through an embedded client library) and the
//! coordinator ([`CoordinatorProcess`]) — as thin drivers of the pure state machines.
//!
//! Responsibility: move messages, time and storage for `megastore-paxos` and
//! `megastore-coordinator`; never decide anything about the protocol. Each process owns
//! its state machine in one place (the replica: a driver thread; the coordinator: a
//! task), feeds it gRPC requests, peers' answers, lock service responses and timer
//! ticks, and carries out what it outputs.
//!
//! Invariants:
//! - time given to a state machine is a monotonic clock of this process (never the
//!   wall clock), so it never runs backwards;
//! - request ids towards other processes start at a random point on every start;
//! - a reply leaves only after the step that produced it (and, for the replica, after
//!   the storage writes it depends on are durable: one WAL sync per batch);
//! - a process answers nothing before it has read a placement, and hands its core
//!   only newer ones (`placement_follower`): it judges by the newest placement it read
//!   (a replica server restarts from the one it persisted);
//! - a data directory serves only the replica and cluster it is stamped for, and a
//!   replica that lost its store — or runs on a restored copy — rejoins (see `stamp`,
//!   `backup`);
//! - *session-in-flight-bounded*: a session's server holds at most
//!   `SESSION_IN_FLIGHT_MAX` of its requests unanswered, and reads no more until
//!   answers leave (`batched_calls`).

mod admin;
mod admin_moves;
mod backup;
mod batched_calls;
mod clock;
mod coordinator;
mod coordinator_service;
mod gateway;
mod gateway_access;
mod gateway_catalog;
mod gateway_indexes;
mod gateway_leases;
mod gateway_multi;
mod gateway_queues;
mod gateway_sessions;
mod gateway_watch;
mod group_work;
mod moves_driver;
mod placement_follower;
mod range_activity;
mod range_sizes;
mod registry;
mod replica_server;
mod replication_service;
mod settings;
mod stamp;

pub use backup::{BackupCopy, BackupError, backup_replica, backup_running_replica};
pub use clock::Clock;
pub use coordinator::{
    CoordinatorProcess, DisableOutcome, coordinator_config, disable_coordinator,
};
pub use gateway_catalog::CATALOG_FRESH;
pub use replica_server::ReplicaProcess;
pub use settings::sweep_config;

/// Why a process cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// `--id` names nothing suitable in the config.
    #[error("{0}")]
    UnknownName(String),
    /// A setting is unusable.
    #[error("config: {0}")]
    Config(String),
    /// The data directory's store cannot be opened or read (the message names it).
    #[error("{0}")]
    Store(String),
    /// The address could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(String, String),
    /// The lock service could not be reached or refused.
    #[error("lock service: {0}")]
    Lock(String),
}
