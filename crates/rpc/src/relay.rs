//! Relayed commits on the wire (`Replication.Relay`): a [`RelayedCommit`] one way, its
//! [`CommitResult`] back.

use megastore_paxos::{CommitResult, Prepared, ReadSet, RelayedCommit};
use megastore_types::{EgId, Position};

use crate::error::{WireError, required};
use crate::pb::replication as pb;
use crate::replication::{
    replica_from_wire, row_write_from_wire, row_write_to_wire, txn_from_wire, txn_to_wire,
};
use crate::rows::{range_from_wire, range_to_wire};

fn prepared_to_wire(p: Prepared) -> pb::PreparedTxn {
    pb::PreparedTxn {
        txn: Some(txn_to_wire(p.txn)),
        coordinator: p.coordinator.0,
        participants: p.participants.into_iter().map(|g| g.0).collect(),
        prepared_ms: p.prepared_ms,
        writes: p.writes.into_iter().collect(),
        read_rows: p.read_rows.into_iter().collect(),
        read_ranges: p
            .read_ranges
            .into_iter()
            .map(|(start, end)| pb::KeyRange { start, end })
            .collect(),
    }
}

fn prepared_from_wire(p: pb::PreparedTxn) -> Result<Prepared, WireError> {
    Ok(Prepared {
        txn: txn_from_wire(required(p.txn, "reads.prepared.txn")?),
        coordinator: EgId(p.coordinator),
        participants: p.participants.into_iter().map(EgId).collect(),
        prepared_ms: p.prepared_ms,
        writes: p.writes.into_iter().collect(),
        read_rows: p.read_rows.into_iter().collect(),
        read_ranges: p
            .read_ranges
            .into_iter()
            .map(|r| (r.start, r.end))
            .collect(),
    })
}

impl From<RelayedCommit> for pb::RelayedCommit {
    fn from(commit: RelayedCommit) -> Self {
        pb::RelayedCommit {
            txn: Some(txn_to_wire(commit.txn)),
            eg: commit.eg.0,
            read_position: commit.read_position.0,
            leader: commit.leader.map(|r| u32::from(r.0)),
            writes: commit.writes.into_iter().map(row_write_to_wire).collect(),
            reads: Some(pb::ReadSet {
                rows: commit.reads.rows.into_iter().collect(),
                ranges: commit.reads.ranges.into_iter().map(range_to_wire).collect(),
                prepared: commit
                    .reads
                    .prepared
                    .into_iter()
                    .map(prepared_to_wire)
                    .collect(),
            }),
        }
    }
}

impl TryFrom<pb::RelayedCommit> for RelayedCommit {
    type Error = WireError;

    fn try_from(commit: pb::RelayedCommit) -> Result<Self, WireError> {
        let reads = commit.reads.unwrap_or_default();
        Ok(RelayedCommit {
            txn: txn_from_wire(required(commit.txn, "txn")?),
            eg: EgId(commit.eg),
            read_position: Position(commit.read_position),
            leader: commit
                .leader
                .map(|r| replica_from_wire(r, "leader"))
                .transpose()?,
            writes: commit
                .writes
                .into_iter()
                .map(row_write_from_wire)
                .collect::<Result<_, _>>()?,
            reads: ReadSet {
                rows: reads.rows.into_iter().collect(),
                ranges: reads.ranges.into_iter().map(range_from_wire).collect(),
                prepared: reads
                    .prepared
                    .into_iter()
                    .map(prepared_from_wire)
                    .collect::<Result<_, _>>()?,
            },
        })
    }
}

/// A relayed commit's outcome on the wire (`Aborted`: not committed, for good).
pub fn relayed_outcome_to_wire(result: CommitResult) -> pb::RelayedOutcome {
    use pb::relayed_outcome::{Committed, Conflict, NotCommitted, Outcome, Unknown, UnknownInSpan};
    let outcome = match result {
        CommitResult::Committed { position, fast } => Outcome::Committed(Committed {
            position: position.0,
            fast,
        }),
        CommitResult::Conflict { keys } => Outcome::Conflict(Conflict { keys }),
        CommitResult::Unknown { position } => Outcome::Unknown(Unknown {
            position: position.0,
        }),
        CommitResult::UnknownInSpan { first } => {
            Outcome::UnknownInSpan(UnknownInSpan { first: first.0 })
        }
        CommitResult::Aborted => Outcome::NotCommitted(NotCommitted {}),
    };
    pb::RelayedOutcome {
        outcome: Some(outcome),
    }
}

/// A relayed commit's outcome from the wire.
pub fn relayed_outcome_from_wire(outcome: pb::RelayedOutcome) -> Result<CommitResult, WireError> {
    use pb::relayed_outcome::Outcome;
    Ok(match required(outcome.outcome, "outcome")? {
        Outcome::Committed(c) => CommitResult::Committed {
            position: Position(c.position),
            fast: c.fast,
        },
        Outcome::Conflict(c) => CommitResult::Conflict { keys: c.keys },
        Outcome::Unknown(u) => CommitResult::Unknown {
            position: Position(u.position),
        },
        Outcome::NotCommitted(_) => CommitResult::Aborted,
        Outcome::UnknownInSpan(u) => CommitResult::UnknownInSpan {
            first: Position(u.first),
        },
    })
}
