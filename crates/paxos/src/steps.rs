//! The steps of operations made of other operations (a queue delivery, a two-phase
//! commit, the settling of a prepared transaction): each asks [`crate::ClientCore`] to
//! run reads, commits, resolutions or a pause, tagged so that several may run at once,
//! and is told how each ended. The core owns the running; these operations own only
//! their decisions.

use megastore_types::{EgId, Position, ReplicaId, Time, TxnId};

use crate::entry::RowWrite;
use crate::messages::DataQuery;
use crate::proposer::commit::{CommitResult, ReadSet};
use crate::proposer::read::{ReadError, ReadResult};
use crate::proposer::resolve::Resolution;

/// What a composite operation asks the core to run next.
#[derive(Debug)]
pub(crate) enum Step {
    /// A current read of `eg`. A read that settles first finishes any prepared
    /// transaction it meets whose writes it reads (what every caller outside the
    /// two-phase protocol wants); the two-phase operations' own reads of records and
    /// decisions do not (`settle: false`), as no prepared transaction writes those.
    Read {
        eg: EgId,
        query: DataQuery,
        settle: bool,
    },
    /// A commit to `eg` after a read at `read_position` (whose entry named `leader`);
    /// `txn: None` lets the core name it (a transaction of its own).
    Commit {
        eg: EgId,
        read_position: Position,
        leader: Option<ReplicaId>,
        writes: Vec<RowWrite>,
        reads: ReadSet,
        txn: Option<TxnId>,
    },
    /// Settle `position` of `eg` and say whether `txn` holds it (`span`: settle the
    /// commit span from `position` until one holds it).
    Resolve {
        eg: EgId,
        position: Position,
        span: bool,
        txn: TxnId,
    },
    /// Call back at `at` (the core's clock).
    Wake { at: Time },
}

/// How a step ended.
#[derive(Debug, Clone)]
pub(crate) enum Ended {
    /// A read (either kind).
    Read(Result<ReadResult, ReadError>),
    /// A commit.
    Commit(CommitResult),
    /// A resolution.
    Resolve(Resolution),
    /// The pause is over.
    Woke,
}

/// A step with the tag its operation knows it by.
pub(crate) type Tagged = (u32, Step);
