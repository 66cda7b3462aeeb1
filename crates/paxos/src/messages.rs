//! Messages of the replication protocol, as plain Rust types (the `rpc` crate maps them
//! to protobuf at the edge). Every request carries an `id` chosen by its sender and
//! echoed in the reply.

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_lock::{LockRequest, LockResponse};
use megastore_placement::{RangeId, ServerId, Version};
use megastore_rowstore::{KeyRange, Row};
use megastore_types::{Ballot, EgId, Position, ReplicaId, TxnId};
use serde::{Deserialize, Serialize};

use crate::cells::SlotRecord;
use crate::entry::LogEntry;

/// Which state a data read sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// Exactly the state after this position (current reads); refused if the replica
    /// has not applied it.
    Position(Position),
    /// The replica's applied position (snapshot reads).
    Applied,
    /// The newest cells, log ignored (inconsistent reads; may see half an entry).
    Latest,
    /// A vouched current read's one request: the replica's visible position, if it
    /// applied it and has seen nothing beyond it (no position accepted, promised or
    /// granted above); the `Data` answer then names the next position's leader. Else
    /// the answer is the replica's `LogState`, from which the reader catches up as
    /// after a `LogState` request. Asked only once the coordinator vouched: the
    /// position must not predate the vouch (docs/protocol.md, "Reads").
    Settled,
}

/// What to read from a group's data rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataQuery {
    /// These rows (absent rows are left out of the answer).
    Rows(Vec<Vec<u8>>),
    /// Rows of a key range inside the group.
    Scan {
        /// The rows.
        range: KeyRange,
        /// At most this many.
        limit: Option<usize>,
        /// In descending key order (with `limit`: the last rows of the range).
        reverse: bool,
    },
}

/// A request to a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaRequest {
    /// Paxos phase 1 at `position`.
    Prepare {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
        /// Position.
        position: Position,
        /// The proposer's ballot (never zero).
        ballot: Ballot,
        /// The version of the voter set the proposer counts (its placement's
        /// `Range::voters_since` for the group's range; 0 when not placed): a voter
        /// whose range's set is newer refuses (*votes-by-the-current-voters*).
        voters_at: Version,
    },
    /// Paxos phase 2. With `grant`, this asks the position leader for ballot 0
    /// (write step 2); ballot-0 accepts without `grant` go out only after a grant.
    Accept {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
        /// Position.
        position: Position,
        /// The ballot.
        ballot: Ballot,
        /// The value.
        entry: LogEntry,
        /// Ask for the ballot-0 grant.
        grant: bool,
        /// With `grant`: the writer finished `position - 1` itself — chosen at this
        /// ballot, invalidation step done, its visible marks on their way — so the
        /// leader, holding that position's value at that ballot (one value per ballot
        /// at a position), marks it visible before judging the grant instead of
        /// refusing it for a mark that is merely slower than this request.
        previous_visible: Option<Ballot>,
        /// The version of the voter set the proposer counts, as for `Prepare`.
        voters_at: Version,
    },
    /// The value at `position` is chosen and its invalidation step is done: record it
    /// as visible (and apply it, on replicas with data).
    MarkVisible {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
        /// Position.
        position: Position,
        /// The ballot it was chosen at.
        ballot: Ballot,
        /// The chosen value.
        entry: LogEntry,
    },
    /// The replica's log positions for the group.
    LogState {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
    },
    /// What the replica holds at one position.
    ReadLog {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
        /// Position.
        position: Position,
    },
    /// The replica's log positions for the group, once its visible position is past
    /// `past`, or after `wait` if that comes first (a watcher's long poll; answered as
    /// [`ReplicaRequest::LogState`]).
    AwaitVisible {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
        /// The visible position the caller already knows.
        past: Position,
        /// How long the replica may hold the request (it caps this at
        /// [`crate::replica::AWAIT_MAX`]).
        wait: std::time::Duration,
    },
    /// Read data rows.
    Read {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
        /// Which state.
        at: ReadAt,
        /// What.
        query: DataQuery,
    },
    /// The group's data as of the replica's applied position, with the visible entry
    /// there: for a replica behind the others' truncation point.
    Snapshot {
        /// Request id.
        id: u64,
        /// Entity group.
        eg: EgId,
    },
    /// Global index rows (within [`crate::global_index_range`]), newest versions: what
    /// this replica has applied of every group (docs/protocol.md, "Global indexes").
    ScanGlobal {
        /// Request id.
        id: u64,
        /// The rows.
        range: KeyRange,
        /// At most this many rows.
        limit: Option<usize>,
        /// In descending key order.
        reverse: bool,
        /// Which of the slot's servers to ask (`None`: its first server). A server
        /// holds the global index rows of its own groups only, so a scan asks every
        /// server that holds the slot in some range and merges (docs/protocol.md,
        /// "Global indexes").
        server: Option<ServerId>,
        /// The version of the placement the asker chose the servers by (`None`: it is
        /// not placed). A server judging by a newer one refuses
        /// ([`ReplicaError::PlacementNewer`]): the servers holding the slot may have
        /// changed.
        routed_by: Option<Version>,
    },
    /// Up to `limit` of the groups this replica holds (its registry) after `after`, in
    /// key order: a replica back from a restart lists its peers' to find the groups
    /// first written while it was down, which its own registry lacks (`peer_listing`).
    ListGroups {
        /// Request id.
        id: u64,
        /// Where the listing stands (`None`: from the first group).
        after: Option<EgId>,
        /// At most this many (the replica answers at most [`LIST_GROUPS_MAX`]).
        limit: usize,
        /// Which of the slot's servers to ask (`None`: its first server); a placed
        /// replica lists every server holding a slot of its ranges.
        server: Option<ServerId>,
    },
}

/// Groups one [`ReplicaRequest::ListGroups`] is answered with at most.
pub const LIST_GROUPS_MAX: usize = 1024;

impl ReplicaRequest {
    /// The entity group it concerns (`None`: a global index scan, of no one group).
    pub fn eg(&self) -> Option<&EgId> {
        Some(match self {
            ReplicaRequest::Prepare { eg, .. }
            | ReplicaRequest::Accept { eg, .. }
            | ReplicaRequest::MarkVisible { eg, .. }
            | ReplicaRequest::LogState { eg, .. }
            | ReplicaRequest::ReadLog { eg, .. }
            | ReplicaRequest::AwaitVisible { eg, .. }
            | ReplicaRequest::Read { eg, .. }
            | ReplicaRequest::Snapshot { eg, .. } => eg,
            ReplicaRequest::ScanGlobal { .. } | ReplicaRequest::ListGroups { .. } => {
                return None;
            }
        })
    }

    /// The server it names, of the slot it is sent to (a global index scan's; `None`:
    /// the host routes it by its group, or to the slot's first server).
    pub fn named_server(&self) -> Option<ServerId> {
        match self {
            ReplicaRequest::ScanGlobal { server, .. }
            | ReplicaRequest::ListGroups { server, .. } => *server,
            _ => None,
        }
    }

    /// The request id.
    pub fn id(&self) -> u64 {
        match self {
            ReplicaRequest::Prepare { id, .. }
            | ReplicaRequest::Accept { id, .. }
            | ReplicaRequest::MarkVisible { id, .. }
            | ReplicaRequest::LogState { id, .. }
            | ReplicaRequest::ReadLog { id, .. }
            | ReplicaRequest::AwaitVisible { id, .. }
            | ReplicaRequest::Read { id, .. }
            | ReplicaRequest::Snapshot { id, .. }
            | ReplicaRequest::ScanGlobal { id, .. }
            | ReplicaRequest::ListGroups { id, .. } => *id,
        }
    }
}

/// A replica's log positions for one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogState {
    /// The highest position this replica promised, accepted, granted or saw visible
    /// (after a wipe: at least its rejoin floor).
    pub highest: Position,
    /// Every position up to this one is visible here.
    pub visible: Position,
    /// Every position up to this one is applied here.
    pub applied: Position,
    /// Positions up to this one are truncated.
    pub truncated: Position,
    /// The `next_leader` of the visible entry at `visible`, if there is one.
    pub next_leader: Option<ReplicaId>,
}

/// Why a ballot-0 grant was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantRefusal {
    /// This replica is not the position leader (or does not know it is).
    NotLeader,
    /// Ballot 0 was granted to another transaction.
    Taken(TxnId),
}

/// The answer to a [`ReplicaRequest::Prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareResult {
    /// Promised; the value accepted here so far, if any.
    Promised(Option<(Ballot, LogEntry)>),
    /// A ballot at least as high was promised or accepted.
    Rejected {
        /// That ballot.
        promised: Ballot,
    },
    /// The position is already visible here with this value.
    Visible(Ballot, LogEntry),
    /// The position is truncated here.
    Truncated,
}

/// The answer to a [`ReplicaRequest::Accept`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcceptResult {
    /// Accepted (durably).
    Accepted,
    /// Accepted (durably), and ballot 0 granted, while another client's grant request
    /// for the position before (or this one) was refused here: the group is contended,
    /// and the grantee should relay its next commits (docs/protocol.md, "Relayed
    /// commits"). Only liveness depends on it.
    GrantedContended,
    /// A higher ballot was promised, or ballot 0 holds another value.
    Rejected {
        /// The ballot in the way.
        promised: Ballot,
    },
    /// The grant of ballot 0 was refused.
    GrantRefused(GrantRefusal),
    /// The position is already visible here with this value.
    Visible(Ballot, LogEntry),
    /// The position is truncated here.
    Truncated,
}

impl AcceptResult {
    /// Whether the value was accepted (durably), contended or not.
    pub fn accepted(&self) -> bool {
        matches!(
            self,
            AcceptResult::Accepted | AcceptResult::GrantedContended
        )
    }
}

/// What was chosen at a position, as a replica remembers it after truncating the entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChosenTxn {
    /// This transaction's entry.
    Txn(TxnId),
    /// A no-op.
    NoOp,
    /// An entry combining these transactions (two or more, in serial order).
    Combined(Vec<TxnId>),
}

impl ChosenTxn {
    /// What an entry of the transactions `txns` (in serial order) is remembered as.
    pub fn of(txns: impl IntoIterator<Item = TxnId>) -> Self {
        let txns: Vec<TxnId> = txns.into_iter().collect();
        match txns.as_slice() {
            [] => Self::NoOp,
            [one] => Self::Txn(*one),
            _ => Self::Combined(txns),
        }
    }

    /// What `entry` is remembered as.
    pub fn of_entry(entry: &LogEntry) -> Self {
        Self::of(
            entry
                .txn
                .into_iter()
                .chain(entry.joined.iter().map(|j| j.txn)),
        )
    }

    /// The transactions of the chosen entry, in serial order.
    pub fn txns(&self) -> &[TxnId] {
        match self {
            Self::Txn(txn) => std::slice::from_ref(txn),
            Self::NoOp => &[],
            Self::Combined(txns) => txns,
        }
    }

    /// Whether `txn` committed there.
    pub fn holds(&self, txn: TxnId) -> bool {
        self.txns().contains(&txn)
    }
}

/// Why a replica could not serve a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    /// Paxos requests go to voters only.
    #[error("this replica does not vote")]
    NotVoter,
    /// Witnesses keep no data.
    #[error("this replica serves no reads")]
    NotServing,
    /// The requested position is not applied here yet.
    #[error("applied only through {applied}")]
    NotApplied {
        /// What is applied.
        applied: Position,
    },
    /// The requested position is truncated here.
    #[error("truncated through {truncated}")]
    Truncated {
        /// The truncation point.
        truncated: Position,
        /// Whose transaction was chosen at the requested position, if this replica
        /// still remembers (it keeps that for the last positions it truncated), so an
        /// unknown commit outcome can be resolved after the log moved on.
        chosen: Option<ChosenTxn>,
    },
    /// The entry writes outside its group or its root row.
    #[error("bad entry: {0}")]
    BadEntry(String),
    /// The query reads outside its group.
    #[error("bad query: {0}")]
    BadQuery(String),
    /// The replica's storage failed; it stops serving the group.
    #[error("storage: {0}")]
    Storage(String),
    /// A visible value was offered that differs from the one visible here.
    #[error("a different value is visible at {0}")]
    Conflict(Position),
    /// The replica lost its state and is rejoining: it does not vote at this position
    /// (nor report its log state) until it has learned how far the others got.
    #[error("rejoining after losing its state; not voting here yet")]
    Rejoining,
    /// This server does not hold the replica's slot of the group's range, as of the
    /// range's `epoch` in its placement: the caller refreshes its placement and routes
    /// again (docs/protocol.md, "Placement").
    #[error("{range} is not served here as of its epoch {epoch}")]
    WrongServer {
        /// The group's range, as this server knows it.
        range: RangeId,
        /// Its epoch there.
        epoch: Version,
    },
    /// The group's range is frozen here for a move away: nothing of it is answered
    /// until the move ends (then by this server or the move's target).
    #[error("{range} is frozen here for move {move_id}")]
    Frozen {
        /// The range.
        range: RangeId,
        /// The move.
        move_id: Version,
    },
    /// A global index scan chose its servers by an older placement than this
    /// server's (`version`): the servers holding the slot may have changed, so the
    /// asker reads the placement again and asks again (docs/protocol.md, "Global
    /// indexes").
    #[error("this server's placement (version {version}) is newer than the scan's")]
    PlacementNewer {
        /// The version of this server's placement.
        version: Version,
    },
    /// The group was installed here from a snapshot: no history below it.
    #[error("history starts at {installed} here")]
    HistoryFrom {
        /// The snapshot's position.
        installed: Position,
    },
    /// Nothing is applied here to take a snapshot of.
    #[error("nothing applied to snapshot")]
    NoSnapshot,
}

/// A replica's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaReply {
    /// To [`ReplicaRequest::Prepare`].
    Prepare {
        /// Request id.
        id: u64,
        /// The answer.
        result: PrepareResult,
    },
    /// To [`ReplicaRequest::Accept`].
    Accept {
        /// Request id.
        id: u64,
        /// The answer.
        result: AcceptResult,
    },
    /// To [`ReplicaRequest::MarkVisible`].
    MarkedVisible {
        /// Request id.
        id: u64,
        /// Applied through here after the mark.
        applied: Position,
    },
    /// To [`ReplicaRequest::LogState`].
    LogState {
        /// Request id.
        id: u64,
        /// The positions.
        state: LogState,
    },
    /// To [`ReplicaRequest::ReadLog`].
    Log {
        /// Request id.
        id: u64,
        /// What is held at the position (`None`: nothing).
        slot: Option<SlotRecord>,
    },
    /// To [`ReplicaRequest::Snapshot`].
    Snapshot {
        /// Request id.
        id: u64,
        /// The applied position the rows show.
        at: Position,
        /// The visible entry at `at` (its `next_leader` names the next position's
        /// leader).
        slot: SlotRecord,
        /// The group's data rows, every cell at its newest version at or below `at`.
        rows: Vec<Row>,
    },
    /// To [`ReplicaRequest::Read`].
    Data {
        /// Request id.
        id: u64,
        /// The position whose state the rows show (`None` for a latest read).
        at: Option<Position>,
        /// The rows.
        rows: Vec<Row>,
        /// The group's pending two-phase records at `at` (their summary column only;
        /// none for a latest read): the locks a transaction reading here must respect
        /// (docs/protocol.md, "Two-phase commit").
        pending: Vec<Row>,
        /// For a [`ReadAt::Settled`] read, the next position's leader named by the
        /// entry at `at` (`None` for every other read).
        next_leader: Option<ReplicaId>,
    },
    /// To [`ReplicaRequest::ListGroups`].
    Groups {
        /// Request id.
        id: u64,
        /// Up to the request's limit, in key order (fewer: the registry ended).
        groups: Vec<EgId>,
    },
    /// The request failed.
    Error {
        /// Request id.
        id: u64,
        /// Why.
        error: ReplicaError,
    },
}

impl ReplicaReply {
    /// The id of the request it answers.
    pub fn id(&self) -> u64 {
        match self {
            ReplicaReply::Prepare { id, .. }
            | ReplicaReply::Accept { id, .. }
            | ReplicaReply::MarkedVisible { id, .. }
            | ReplicaReply::LogState { id, .. }
            | ReplicaReply::Log { id, .. }
            | ReplicaReply::Data { id, .. }
            | ReplicaReply::Snapshot { id, .. }
            | ReplicaReply::Groups { id, .. }
            | ReplicaReply::Error { id, .. } => *id,
        }
    }
}

/// Any protocol message, as the network carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// To a replica.
    ReplicaRequest(ReplicaRequest),
    /// From a replica.
    ReplicaReply(ReplicaReply),
    /// To a coordinator.
    CoordinatorRequest(CoordinatorRequest),
    /// From a coordinator.
    CoordinatorReply(CoordinatorReply),
    /// To a lock node.
    LockRequest(LockRequest),
    /// From a lock node.
    LockResponse(LockResponse),
    /// To a replica's relay: commit this transaction of another client
    /// (docs/protocol.md, "Relayed commits").
    Relay {
        /// The request's id (the sender's operation).
        id: u64,
        /// The commit.
        commit: Box<crate::client::RelayedCommit>,
    },
    /// From a relay: how the relayed commit `id` ended there.
    RelayOutcome {
        /// The request's id.
        id: u64,
        /// Its transaction (a reply meant for an earlier process of the writer, whose
        /// requests may have had the same ids, names another).
        txn: TxnId,
        /// Its outcome, as [`crate::ClientCore::commit_relayed`] reported it.
        result: crate::proposer::commit::CommitResult,
    },
}

impl Message {
    /// The entity group a request to a replica, its coordinator or its relay concerns:
    /// what a host routes it by, to the server its placement names for the group's
    /// range (`None`: a reply, a lock service message, or a global index scan).
    pub fn routed_group(&self) -> Option<&EgId> {
        match self {
            Message::ReplicaRequest(request) => request.eg(),
            Message::CoordinatorRequest(request) => Some(request.eg()),
            Message::Relay { commit, .. } => Some(&commit.eg),
            Message::ReplicaReply(_)
            | Message::CoordinatorReply(_)
            | Message::LockRequest(_)
            | Message::LockResponse(_)
            | Message::RelayOutcome { .. } => None,
        }
    }

    /// The server of the slot a request names (a global index scan's): a host sends it
    /// there, whatever the group routing says.
    pub fn named_server(&self) -> Option<ServerId> {
        match self {
            Message::ReplicaRequest(request) => request.named_server(),
            _ => None,
        }
    }

    /// The id of a reply from a replica or a coordinator (what a host matches to the
    /// request it answers).
    pub fn reply_id(&self) -> Option<u64> {
        match self {
            Message::ReplicaReply(reply) => Some(reply.id()),
            Message::CoordinatorReply(reply) => Some(reply.id()),
            _ => None,
        }
    }

    /// The id of a request to a replica or a coordinator, if it expects a reply.
    pub fn request_id(&self) -> Option<u64> {
        match self {
            Message::ReplicaRequest(request) => Some(request.id()),
            Message::CoordinatorRequest(CoordinatorRequest::Query { id, .. })
            | Message::CoordinatorRequest(CoordinatorRequest::Invalidate { id, .. }) => Some(*id),
            _ => None,
        }
    }
}
