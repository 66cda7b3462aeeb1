//! The simulated processes as the world holds them — each protocol core beside the
//! storage and the site it runs on — the mistakes a run re-introduces, and the run's
//! counters. Plain data: the world (`world/`) drives them, checkers see them only
//! through an [`Observation`](crate::observation::Observation).

use std::collections::BTreeMap;

use megastore_coordinator::{Coordinator, CoordinatorBugs};
use megastore_lock::QuorumModel;
use megastore_paxos::{ProtocolBugs, Replica};
use megastore_placement::{OperatorBugs, PlacementBugs};
use megastore_rowstore::MemoryStore;
use megastore_types::{LockNodeId, ReplicaId, SiteId};

/// The mistakes a run re-introduces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bugs {
    /// In the replication protocol.
    pub protocol: ProtocolBugs,
    /// In the coordinator.
    pub coordinator: CoordinatorBugs,
    /// In a server's side of placement (what it serves, what copy it takes in).
    pub placement: PlacementBugs,
    /// In the operator's steps of a move.
    pub operator: OperatorBugs,
}

/// A replica server: its protocol core (absent while crashed) and its store. The
/// world keys its servers by address, `ReplicaId(server)` (`world/routing.rs`); every
/// server so far is its slot's home, whose address is the slot's replica id.
pub(crate) struct ReplicaNode {
    /// The replica whose slots it holds (its core's replica id).
    pub slot: ReplicaId,
    /// The protocol state machine.
    pub core: Option<Replica>,
    /// Its storage; survives crashes except for unsynced writes (and wipes).
    pub store: MemoryStore,
    /// Where it runs.
    pub site: SiteId,
    /// Its store was wiped once: it restarts rejoining.
    pub rejoining: bool,
    /// How many times its store was lost (each loss begins a new acceptor record).
    pub wipes: u32,
    /// How many times its process started again (a copy under way at it dies with
    /// the process).
    pub starts: u32,
}

/// A coordinator process (absent while crashed: it keeps no state), beside the
/// replica server of the same address.
pub(crate) struct CoordinatorNode {
    /// The replica whose slots its server holds.
    pub slot: ReplicaId,
    /// The state machine.
    pub core: Option<Coordinator>,
    /// Where it runs.
    pub site: SiteId,
}

/// The lock service: `megastore_lock::QuorumModel` (one replicated state machine,
/// served by its leader node while that node reaches a majority), and where its nodes
/// run.
pub(crate) struct LockModel {
    /// Who answers what.
    pub model: QuorumModel,
    /// Each node's site.
    pub sites: BTreeMap<LockNodeId, SiteId>,
}

/// Counters for the summary line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Messages sent.
    pub messages: u64,
    /// Faults injected.
    pub faults: u64,
    /// Writes acknowledged.
    pub commits: u64,
    /// Chosen entries that combine two or more transactions.
    pub combined: u64,
    /// Blind writes committed without a read of their own (on the read of their
    /// client's commit in flight).
    pub committed_unread: u64,
    /// Commits relayed to a relay that was up to take them.
    pub relayed: u64,
    /// Of those, a relay's own commits, relayed to the position leader's relay.
    pub relayed_by_relays: u64,
    /// Current reads a commit of their own client woke as it settled the position
    /// they waited for.
    pub reads_woken: u64,
    /// Writes that did not commit (conflict or aborted).
    pub conflicts: u64,
    /// Writes with unknown outcome (after trying to resolve it).
    pub unknown: u64,
    /// Writes of unknown outcome that resolution found not committed.
    pub resolved_not_committed: u64,
    /// Current reads served locally (vouched) / by majority read.
    pub reads_local: u64,
    /// Current reads served by a majority read.
    pub reads_majority: u64,
    /// Snapshot reads.
    pub reads_snapshot: u64,
    /// Inconsistent reads.
    pub reads_inconsistent: u64,
    /// Reads at the position an earlier current read found.
    pub reads_at_position: u64,
    /// Global index hits a verified scan kept (found current in their group).
    pub hits_verified: u64,
    /// Global index hits a verified scan dropped (stale: the group's mirror changed).
    pub hits_stale: u64,
    /// Queue messages committed into inboxes by deliveries.
    pub messages_delivered: u64,
    /// Transactions across groups committed, aborted, of unknown outcome (their
    /// clients died or gave up resolving).
    pub two_phase_committed: u64,
    /// See `two_phase_committed`.
    pub two_phase_aborted: u64,
    /// See `two_phase_committed`.
    pub two_phase_unknown: u64,
    /// Prepared transactions a settle of their group finished.
    pub prepared_settled: u64,
    /// Decision rows of cross-group transactions collected.
    pub decisions_collected: u64,
    /// Operations that failed.
    pub failed: u64,
    /// Replica stores wiped.
    pub wipes: u64,
    /// Snapshots installed.
    pub installs: u64,
    /// Snapshot installs asked for that did not happen (no answer, or refused).
    pub failed_installs: u64,
    /// Garbage-collection passes over a group's data.
    pub collections: u64,
    /// Groups replicas dropped from memory (a bounded cache) and loaded again later.
    pub evictions: u64,
    /// Ranges the operator split.
    pub splits: u64,
    /// Replicas the operator removed from ranges (`SimConfig::removals`).
    pub removals: u64,
    /// Of those, full replicas' (a slot leaving, its coordinators fenced, then gone).
    pub full_removals: u64,
    /// Ranges' voter changes the operator recorded caught up (`world/catch_up.rs`).
    pub catch_ups: u64,
    /// Spare servers run (`SimConfig::spares`).
    pub spares: u64,
    /// Moves of a slot between its home and its spare that finished.
    pub moves_finished: u64,
    /// Moves given up (the source serves the slot again).
    pub moves_aborted: u64,
    /// Pages of moves' copies applied at their targets (a copy takes one per operator
    /// step).
    pub copy_pages: u64,
    /// Final copies of only the groups the source changed since the bulk copy (a
    /// short freeze), begun.
    pub short_final_copies: u64,
    /// Server processes up at the end of the run that judge by an older placement than
    /// the newest (each had seconds to read it: none should).
    pub placements_behind: u64,
    /// Clients that route by an older placement than the newest at the end of the run
    /// (they read it only when refused).
    pub clients_behind: u64,
    /// Clients that scanned the whole global index after the run
    /// (*global-scan-complete*).
    pub final_scans: u64,
}
