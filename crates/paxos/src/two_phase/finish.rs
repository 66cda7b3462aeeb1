//! Finishing a prepared transaction in one participant group: a commit that applies
//! its staged writes (or nothing, for an abort) and removes its record, with the record
//! row as its read set — so of any number of finishers racing, one commits and the rest
//! conflict, and a transaction finishes once (docs/protocol.md, "Two-phase commit").

use std::collections::BTreeSet;

use megastore_types::{EgId, Position, ReplicaId, TxnId};

use super::{Decision, Record, finish_writes, record_of, record_row};
use crate::messages::DataQuery;
use crate::proposer::commit::{CommitResult, ReadSet};
use crate::steps::{Ended, Step};

/// Commits tried (each after a fresh read of the record) before giving up.
const ATTEMPTS_MAX: u32 = 8;

/// How finishing ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FinishOutcome {
    /// The record is gone: finished by this finisher or another.
    Finished,
    /// It could not be done in time (the record stays, for the next one who meets it).
    Failed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Reading,
    Committing,
    Done,
}

/// Finishing `txn` in `eg` as `decision`.
#[derive(Debug)]
pub(crate) struct Finish {
    eg: EgId,
    txn: TxnId,
    decision: Decision,
    stage: Stage,
    attempts: u32,
    outcome: Option<FinishOutcome>,
}

impl Finish {
    /// Finishing after reading the record (a finisher that did not prepare it).
    pub(crate) fn start(eg: EgId, txn: TxnId, decision: Decision) -> (Self, Step) {
        let finish = Self::new(eg, txn, decision);
        let step = finish.read();
        (finish, step)
    }

    /// Finishing a record this finisher wrote itself, prepared at `position` by an entry
    /// that named `leader`: no read first (a conflict means another finisher got
    /// there first; anything else, a read and another try).
    pub(crate) fn start_known(
        eg: EgId,
        record: &Record,
        decision: Decision,
        position: Position,
        leader: Option<ReplicaId>,
    ) -> (Self, Step) {
        let mut finish = Self::new(eg, record.prepared.txn, decision);
        let step = finish.commit(record, position, leader);
        (finish, step)
    }

    fn new(eg: EgId, txn: TxnId, decision: Decision) -> Self {
        Self {
            eg,
            txn,
            decision,
            stage: Stage::Reading,
            attempts: 0,
            outcome: None,
        }
    }

    fn read(&self) -> Step {
        Step::Read {
            eg: self.eg.clone(),
            query: DataQuery::Rows(vec![record_row(&self.eg, self.txn)]),
            settle: false,
        }
    }

    fn commit(&mut self, record: &Record, position: Position, leader: Option<ReplicaId>) -> Step {
        self.stage = Stage::Committing;
        // No lock check: the record's own locks cover every row it writes, and no other
        // prepared transaction can lock them (it would have conflicted with this one).
        Step::Commit {
            eg: self.eg.clone(),
            read_position: position,
            leader,
            writes: finish_writes(&self.eg, record, self.decision),
            reads: ReadSet::from(BTreeSet::from([record_row(&self.eg, self.txn)])),
            txn: None,
        }
    }

    fn done(&mut self, outcome: FinishOutcome) -> Option<Step> {
        self.stage = Stage::Done;
        self.outcome = Some(outcome);
        None
    }

    /// A step it asked for ended: its next step, if any.
    pub(crate) fn on_ended(&mut self, ended: Ended) -> Option<Step> {
        match (self.stage, ended) {
            (Stage::Reading, Ended::Read(Err(e))) => {
                self.done(FinishOutcome::Failed(format!("{e:?}")))
            }
            (Stage::Reading, Ended::Read(Ok(read))) => {
                let row = record_row(&self.eg, self.txn);
                let Some(found) = read.rows.iter().find(|r| r.key == row) else {
                    return self.done(FinishOutcome::Finished);
                };
                let Some(record) = record_of(&self.eg, found) else {
                    return self.done(FinishOutcome::Failed(format!(
                        "the record of {} in {} does not decode",
                        self.txn, self.eg
                    )));
                };
                let position = read.position.unwrap_or_default();
                Some(self.commit(&record, position, read.next_leader))
            }
            (Stage::Committing, Ended::Commit(CommitResult::Committed { .. })) => {
                self.done(FinishOutcome::Finished)
            }
            (Stage::Committing, Ended::Commit(_)) => {
                self.attempts += 1;
                if self.attempts >= ATTEMPTS_MAX {
                    return self.done(FinishOutcome::Failed(format!(
                        "could not finish {} in {}",
                        self.txn, self.eg
                    )));
                }
                self.stage = Stage::Reading;
                Some(self.read())
            }
            _ => None,
        }
    }

    /// How it ended, once done.
    pub(crate) fn outcome(&self) -> Option<&FinishOutcome> {
        self.outcome.as_ref()
    }
}
