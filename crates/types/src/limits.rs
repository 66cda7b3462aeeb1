//! Size limits every path checks before anything reaches Paxos (the client library,
//! hence the gRPC gateway and the shell), and replicas check again on every entry they
//! are asked to accept, so no client can stall a group with an oversized one.
//!
//! The numbers follow FoundationDB's (key ≤ 10 kB, value ≤ 100 kB, transaction ≤ 10 MB):
//! a log entry travels whole in one accept to every voter and sits in the root row until
//! truncation, so an entry must stay small next to the gRPC message limit
//! ([`MESSAGE_BYTES_MAX`]) and to what a replica batches per sync.
//!
//! Also one bound on a log's length that the config's validation shares with the
//! replica's sweep: [`TRUNCATE_EVERY`].

/// The longest name of an untyped entity group.
pub const GROUP_NAME_BYTES_MAX: usize = 1_000;

/// The longest key inside a group: an untyped group's row key, or the part of a typed
/// row's key after its group prefix (table id and primary key).
pub const KEY_BYTES_MAX: usize = 10_000;

/// The longest column name.
pub const COLUMN_BYTES_MAX: usize = 10_000;

/// The largest value of one cell.
pub const VALUE_BYTES_MAX: usize = 100_000;

/// The most one transaction may write to one row: its key, columns and values.
pub const ROW_BYTES_MAX: usize = 1_000_000;

/// The most one transaction may write in all: every row's key, columns and values.
pub const TRANSACTION_BYTES_MAX: usize = 10_000_000;

/// The longest group prefix in the row key space: an untyped group's encoded name (each
/// byte may be escaped to two, plus a tag and a terminator) or a typed group's table id
/// and encoded root key.
pub const GROUP_PREFIX_BYTES_MAX: usize = 2 * GROUP_NAME_BYTES_MAX + 8;

/// The longest row key the row store is asked to hold.
pub const ROW_KEY_BYTES_MAX: usize = GROUP_PREFIX_BYTES_MAX + 1 + KEY_BYTES_MAX;

/// The largest gRPC message any megastore process sends or accepts: room for the
/// largest transaction in one accept, and for a group's snapshot sent to a replica
/// behind the others' truncation point.
pub const MESSAGE_BYTES_MAX: usize = 64 << 20;

/// The largest reply of the replication protocol (a replica's to another cluster
/// member): a group's snapshot travels whole in one, to a replica behind the others'
/// truncation point — a wiped one, or one away past `[history] outage_log_positions`.
/// At [`MESSAGE_BYTES_MAX`] a group past 64 MiB could never be installed: the replica
/// asked for it at every sweep, the source read the whole group each time, and the
/// reply failed (measured: a 71 MB group, the read-only replica back from an outage
/// stuck at its old position for good). Requests stay within [`MESSAGE_BYTES_MAX`],
/// so nothing a client sends grows; a group past this one still cannot be installed
/// (snapshots are not paged).
pub const REPLICATION_REPLY_BYTES_MAX: usize = 1 << 30;

/// The most requests one batched call to a replica carries (`CallMany`).
pub const BATCH_REQUESTS_MAX: usize = 256;

/// A sender stops adding requests to a batch once it holds this many bytes: with one
/// more request of at most a transaction, a batch stays within [`MESSAGE_BYTES_MAX`].
pub const BATCH_BYTES_TARGET: usize = 1 << 20;

const _: () = assert!(VALUE_BYTES_MAX < ROW_BYTES_MAX);
const _: () = assert!(BATCH_BYTES_TARGET + TRANSACTION_BYTES_MAX + (1 << 20) < MESSAGE_BYTES_MAX);
const _: () = assert!(ROW_BYTES_MAX <= TRANSACTION_BYTES_MAX);
const _: () = assert!(TRANSACTION_BYTES_MAX + (1 << 20) < MESSAGE_BYTES_MAX);

/// A write that is over one of the limits, naming which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A group name is too long.
    #[error("group name is {found} bytes; the limit is {GROUP_NAME_BYTES_MAX}")]
    GroupName {
        /// Its length.
        found: usize,
    },
    /// A key is too long.
    #[error("key is {found} bytes; the limit is {KEY_BYTES_MAX}")]
    Key {
        /// Its length.
        found: usize,
    },
    /// A column name is too long.
    #[error("column name is {found} bytes; the limit is {COLUMN_BYTES_MAX}")]
    Column {
        /// Its length.
        found: usize,
    },
    /// A value is too large.
    #[error("value is {found} bytes; the limit is {VALUE_BYTES_MAX}")]
    Value {
        /// Its length.
        found: usize,
    },
    /// One row's writes are too large.
    #[error("row writes {found} bytes; the limit per row is {ROW_BYTES_MAX}")]
    Row {
        /// What the transaction writes to it.
        found: usize,
    },
    /// The transaction writes too much.
    #[error("transaction writes {found} bytes; the limit is {TRANSACTION_BYTES_MAX}")]
    Transaction {
        /// What it writes in all.
        found: usize,
    },
}

/// Positions a busy group's log grows past what it keeps before a replica's sweep
/// probes it to truncate (`megastore_paxos::SweepConfig::probe_above` is
/// `[history] log_positions` + this): a probe asks every other replica once, so each
/// replica sends one request per other replica per this many commits of a busy group.
/// The config's least `[history] outage_log_positions` is twice `log_positions` + this,
/// so that an outage's truncation to half that bound leaves it.
pub const TRUNCATE_EVERY: u64 = 64;
