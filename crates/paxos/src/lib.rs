//! Megastore's replication protocol as pure state machines (docs/protocol.md).
//!
//! Responsibility: every protocol decision, once. [`Replica`] is the acceptor and
//! apply side of a replica server; the proposer side (settling positions, the
//! invalidation step, reads, commits, the verification of global index hits against
//! their groups, the delivery of queue messages, and two-phase commit across groups
//! with its recovery) is hosted by [`ClientCore`] in the client library and by
//! replicas finishing abandoned positions. Time, randomness and
//! messages are inputs; outputs are messages and storage mutations, with the
//! durability order stated by the output types.
//!
//! Not here: IO of any kind (no tokio, no sockets, no clocks, no ambient randomness),
//! wire encodings (`rpc`), the coordinator and lock service (their own crates).
//!
//! ```text
//!   client ──Accept(p, b0, grant)──► position leader ─┐
//!          ──Accept(p, b0)─────────► other voters ────┼─ majority at one ballot: chosen
//!          ──Invalidate(eg, p)─────► coordinators of full replicas not known to hold it
//!          ──MarkVisible(p)────────► every replica ── apply ── reads may now see p
//! ```
//!
//! Invariants kept here and checked by the simulator (docs/protocol.md, "Invariants"): single-value,
//! ballot-zero-once, visible-after-invalidate, vouched-is-current (with the
//! coordinator), durable-ack, linearizable-eg, prefix-snapshots; and across groups
//! queue-exactly-once-in-order, multi-group-atomicity and decision-stable; with a
//! bounded group cache, open-is-indexed (`replica/registry.rs`); placed over many
//! servers, loaded-only-if-served and arrivals-are-looked-after (`replica/placed.rs`,
//! tests/placed.rs), and voters counted over each group's replica set by the caller's
//! placement, so a removed slot is counted by no one who read its removal
//! ([`replica_set`]; the removed server's silence is *votes-where-placed*); a voter
//! refuses votes counted over an older voter set (*votes-by-the-current-voters*, the
//! placement crate's), and its catch-up pass reports a range's groups held only for
//! the change its placement shows (*pass-over-one-change*, `replica/voter_pass.rs`,
//! tests/placed.rs); a move's final copy is of the groups its source changed since
//! the bulk copy only on a clean base (*delta-on-a-clean-base*,
//! `replica/move_deltas.rs`, tests/short_freeze.rs), and every copy copies the global
//! rows the target's mirrors named before it first and last
//! (*copied-globals-resynced*, `replica/range_copy.rs`, tests/range_copy.rs); a
//! replica knows which of its groups hold prepared records, and a read at a position
//! looks for locks only there (*locks-known*, `replica/group/locks.rs`, asserted by
//! every read of a debug build). For
//! watchers, kept where they are stated (the simulator runs no watchers):
//! watch-reads-committed ([`watch`]) and awaiting-bounded (the replica's held long
//! polls). For relayed commits, by construction: relayed-once (`client/relay.rs`,
//! tests/duelling_relays.rs).

pub mod bugs;
pub mod cells;
mod client;
pub mod entry;
pub mod messages;
pub mod proposer;
pub mod queue;
pub mod replica;
pub mod replica_set;
mod steps;
pub mod two_phase;
pub mod verify;
pub mod watch;

pub use bugs::ProtocolBugs;
pub use client::{
    Basis, BasisStep, ClientConfig, ClientCore, Input as ClientInput, OpId, OpResult,
    Output as ClientOutput, RELAY_DOWN_FOR, RELAY_DOWN_MAX, RELAY_HOT_FOR, RelayRole,
    RelayedCommit, relay_wait,
};
pub use entry::{
    CellWrite, EntryError, JoinedTxn, LogEntry, RowWrite, check_proposed_writes, check_write_sizes,
    data_range, global_index_range, global_mirror_range, group_of_root_row, group_range,
    mirror_row_of, mirrored_global_row, root_row,
};
pub use messages::{
    ChosenTxn, DataQuery, LogState, Message, ReadAt, ReplicaError, ReplicaReply, ReplicaRequest,
};
pub use proposer::commit::{COMMIT_SPAN, CommitResult, ReadSet, commit_span};
pub use proposer::read::{ReadError, ReadMode, ReadPath, ReadResult};
pub use proposer::resolve::Resolution;
pub use proposer::{ProposerConfig, Timeouts};
pub use replica::{
    Batch, BatchCounts, CHANGED_GROUPS_MAX, CHOSEN_REMEMBERED, ChangeToken, CopyMark,
    DRIVER_CLIENT, DUE_PROBES_MAX, FailedInstall, GroupList, GroupLog, GroupSnapshot, HISTORY_KEPT,
    Input as ReplicaInput, InstallFailure, Output as ReplicaOutput, REGISTRY_PREFIX, RangeCopy,
    Rejoin, Released, Replica, ReplicaConfig, ReplicaLag, SERVER_PLACEMENT_ROW,
    ServerPlacementError, SweepConfig, TRUNCATE_EVERY, VoterPassHeld, VoterPassRefused,
    VoterPassReport, answer_read, answer_snapshot, copy_range, export_pages, group_state_spans,
    list_groups, load_group, load_server_placement, range_bytes, register_group, registered_in,
    retire_range, span_keys,
};
pub use two_phase::collect::{AfterPage, COLLECT_PAGE, CollectedDecisions, CollectionPass};
pub use two_phase::commit::{Participant, TwoPhaseResult};
pub use two_phase::decide::DecideOutcome;
pub use two_phase::settle::{SettleOutcome, SettledGroup};
pub use two_phase::{Decision, Prepared, TwoPhaseError, TxnFacts};
pub use verify::{CheckedHit, GlobalHit};
