//! The megastore client library: transactions and reads against a cluster.
//!
//! Responsibility: drive `megastore-paxos`'s [`ClientCore`](megastore_paxos::ClientCore)
//! over gRPC — carry its messages to replicas, coordinators and lockd, feed their
//! answers and timer ticks back, and hand each operation's result to the caller; and,
//! on top of those operations, typed entities of a schema, index queries, cross-group
//! queries (global index scans, merge-joins, parallel lookups), transactions across
//! groups (the core's two-phase commit, `multi.rs`), watches of a group's committed
//! changes (`watch.rs`), applications' leases, locks with fencing tokens and leased
//! keys in the lock service (`leases.rs`), operator tools' locks (`operator_lock.rs`:
//! one background rebalancer acting at a time), and the backfill of a new index —
//! each a composition of the core's operations. No protocol decision is taken here. Not here either: any server code — the library
//! links neither RocksDB nor openraft (it reaches lockd through
//! `megastore_rpc::LockdClient`), so a program outside this workspace that depends on it
//! compiles in minutes.
//!
//! ```text
//!   Client::read / commit ──► driver task ──► ClientCore::step ──► Send ──► Peers (gRPC)
//!           ▲                      ▲                          └──► Done ──► caller
//!           └── result ────────────┴──── answers come back as messages from their peer
//! ```
//!
//! Invariants:
//! - every client has a proposer id no other client of the cluster has (allocated in
//!   lockd), so two clients never propose the same ballot;
//! - request ids start at a random point on every start;
//! - a transaction's reads all come from one log position (the first read's; later
//!   reads are served at that position); it commits at the next one or reports a
//!   conflict naming the keys written in between; the cross-group transactions its
//!   reads found prepared go with its read set, so their locks hold against its commit;
//! - *rows stay in their group*: row calls take keys within an untyped group and
//!   refuse any other group; entity calls write only rows the schema maps into the
//!   transaction's group; writes over a size limit are refused before anything is sent.

pub mod access_store;
pub mod activity;
pub mod backfill;
mod client;
mod entities;
mod groups;
mod hot_groups;
mod index_queries;
mod leases;
mod lockd_files;
mod multi;
pub mod operator_lock;
pub mod placement_store;
mod queues;
pub mod range_moves;
mod relay;
pub mod replica_removal;
pub mod schema_store;
mod settings;
pub mod status;
mod txn;
mod versioned;
pub mod voter_catch_up;
mod watch;

pub use client::{Client, ClientError, Committed};
pub use entities::{EntityRead, IndexPage, describe_group, entity_group, group_root};
pub use groups::{check_cell_write, group, group_name};
pub use hot_groups::{GroupCount, HOT_GROUPS_TRACKED, HotGroupsNow};
pub use index_queries::{GlobalIndexScan, IndexRead, JoinHit, JoinedScan, LOOKUPS_IN_FLIGHT};
pub use leases::{
    FencingToken, LEASE_TTL_MAX, LEASE_TTL_MIN, LEASED_KEYS_PER_LEASE_MAX, LEASED_NAME_BYTES_MAX,
    LEASED_VALUE_BYTES_MAX, Lease, LeaseError, LeaseId, LeasedEntry, LockHolding,
};
pub use megastore_paxos::SettledGroup;
pub use megastore_paxos::queue::Delivery;
pub use megastore_paxos::watch::Change;
pub use megastore_schema::{IndexQuery, PageToken};
pub use multi::MultiTransaction;
pub use queues::{Message, QUEUE_NAME_BYTES_MAX};
pub use settings::proposer_timeouts;
pub use txn::{Attempt, AttemptFuture, Outcome, Transaction};
pub use versioned::{Assert, Entry, Mutation, TxnResult, VERSION_MISSING, fence_token};
pub use watch::{AWAIT_WAIT, KeyEvent, KeyWatch, POLL_FIRST, POLL_MAX, Watch, WatchEvent};
