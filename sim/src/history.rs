//! What clients did and saw: the input of the linearizability and snapshot checks.

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::ReadPath;
use megastore_types::{ClientId, EgId, Position, ReplicaId, TxnId};

/// Which operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A current read.
    CurrentRead,
    /// A snapshot read.
    SnapshotRead,
    /// An inconsistent read.
    InconsistentRead,
    /// A read at the position an earlier current read of the same client found (a
    /// transaction's later read).
    AtPositionRead,
    /// A commit.
    Commit,
    /// A global index scan's hits in one group, verified by a current read of it.
    VerifiedScan,
    /// A delivery of a group's queue messages.
    Deliver,
    /// A transaction across groups (its record names the coordinator group; each
    /// group it committed in also gets a `Commit` record).
    TwoPhase,
    /// Settling the prepared transactions of a group.
    Settle,
    /// Collecting a page of a coordinator group's old decisions.
    Collect,
}

/// How a transaction across groups ended, as its client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwoPhaseOutcome {
    /// Decided commit, and acknowledged.
    Committed,
    /// Aborted (decided, or never decidable as commit).
    Aborted,
    /// Not known: its client gave up resolving it, or died.
    Unknown,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A read's answer: key → value (`None`: absent).
    Read {
        /// The state's position (`None` for inconsistent reads).
        position: Option<Position>,
        /// The values seen.
        values: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        /// How the position was found.
        path: ReadPath,
        /// Who served it.
        replica: ReplicaId,
    },
    /// A write acknowledged at `position`.
    Committed {
        /// The transaction.
        txn: TxnId,
        /// Its position.
        position: Position,
        /// The position it read at.
        read_position: Position,
        /// The rows it read (and declared for conflicts).
        read_keys: BTreeSet<Vec<u8>>,
    },
    /// A write that certainly did not commit (a conflict, or nothing sent that could
    /// be chosen): `txn` is chosen nowhere, for good.
    NotCommitted {
        /// The transaction.
        txn: TxnId,
    },
    /// A write whose outcome was unknown, then resolved by its transaction id as not
    /// committed: `position` is decided, and `txn` is chosen nowhere.
    ResolvedNotCommitted {
        /// The transaction.
        txn: TxnId,
        /// The position it may have held.
        position: Position,
    },
    /// A write whose outcome the client could not tell: it may be in the log.
    Unknown,
    /// A verified scan's check of its hits in one group, by a current read there.
    Verified {
        /// The position the group was read at.
        position: Position,
        /// The hits, each with whether the verification kept it.
        hits: Vec<VerifiedHit>,
    },
    /// A delivery finished.
    Delivered {
        /// The sender's position its outbox was read at.
        read_at: Option<megastore_types::Position>,
        /// Messages it committed into inboxes.
        delivered: u64,
        /// It handled every receiver of every message it read: every message the
        /// sender chose at or below `read_at` is delivered now.
        complete: bool,
    },
    /// A transaction across groups ended.
    TwoPhase {
        /// The transaction.
        txn: TxnId,
        /// Its groups, the coordinator first.
        groups: Vec<EgId>,
        /// How.
        result: TwoPhaseOutcome,
    },
    /// A settle of a group's prepared transactions finished.
    Settled {
        /// Finished as committed.
        committed: u64,
        /// Finished as aborted.
        aborted: u64,
        /// Left as they were: undecided and not expired, or not settled this time.
        left: u64,
    },
    /// A collection of a page of a group's decisions finished.
    Collected {
        /// Decision rows deleted.
        collected: u64,
        /// Left: young, or a participant not finished.
        kept: u64,
        /// The page was full: the next starts after this row.
        next: Option<Vec<u8>>,
    },
    /// A read that gave up.
    Failed,
}

/// One global index hit a verified scan checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedHit {
    /// The global index row.
    pub row: Vec<u8>,
    /// Its value as the scan found it.
    pub value: Option<Vec<u8>>,
    /// Whether the verification kept it (found it current).
    pub kept: bool,
}

/// One finished operation.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// Who.
    pub client: ClientId,
    /// Which group.
    pub eg: EgId,
    /// What.
    pub kind: OpKind,
    /// Real time it started (ns).
    pub start: u64,
    /// Real time it finished (ns).
    pub end: u64,
    /// How it ended.
    pub outcome: Outcome,
}

impl OpRecord {
    /// The log position the operation is pinned to, if any: a current read's state, an
    /// acknowledged write's position, or the current read a verified scan made.
    pub fn pinned_position(&self) -> Option<Position> {
        match &self.outcome {
            Outcome::Read { position, .. } if self.kind == OpKind::CurrentRead => *position,
            Outcome::Committed { position, .. } | Outcome::Verified { position, .. } => {
                Some(*position)
            }
            _ => None,
        }
    }

    /// Whether it succeeded (for the liveness check).
    pub fn succeeded(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Read { .. }
                | Outcome::Committed { .. }
                | Outcome::Verified { .. }
                | Outcome::Delivered { .. }
                | Outcome::TwoPhase { .. }
                | Outcome::Settled { .. }
                | Outcome::Collected { .. }
        )
    }
}
