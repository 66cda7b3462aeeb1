//! Learning a cross-group transaction's decision from its coordinator group — and,
//! when there is none after the prepared timeout, recording **abort** there first, so
//! that a late `commit` can never contradict what the transaction's participants are
//! then told (docs/protocol.md, "Two-phase commit", recovery). A decision read absent
//! counts only once a record of the transaction is read present afterwards
//! (*absent-decision-confirmed*, in the parent module): decisions are collected.

use std::time::Duration;

use megastore_types::{EgId, Position, ReplicaId, Time, TxnId};

use super::{
    Decision, TxnFacts, decided_at, decision_of, decision_row, decision_write, record_row,
    watermark_of, watermark_row,
};
use crate::bugs::ProtocolBugs;
use crate::messages::DataQuery;
use crate::proposer::commit::{CommitResult, ReadSet};
use crate::proposer::read::ReadResult;
use crate::steps::{Ended, Step};

/// Tries to record abort (each after a fresh read of the decision) before giving up.
const RECORD_ATTEMPTS_MAX: u32 = 8;

/// The clock and limits the two-phase operations run by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TwoPhaseClock {
    /// How long a prepared transaction may stay undecided before anyone who meets it
    /// records abort.
    pub(crate) timeout: Duration,
    /// The wall clock (ms since the Unix epoch) minus the core's clock, in ms: how the
    /// core dates records and judges their age from the host's `Time`.
    pub(crate) wall_offset_ms: i64,
    /// How often a writer blocked by an undecided transaction asks again.
    pub(crate) poll: Duration,
    /// The knobs.
    pub(crate) bugs: ProtocolBugs,
}

impl TwoPhaseClock {
    /// The wall clock at the core's time `now`.
    pub(crate) fn wall_ms(&self, now: Time) -> u64 {
        let ms = i64::try_from(now.as_nanos() / 1_000_000).unwrap_or(i64::MAX);
        u64::try_from(ms.saturating_add(self.wall_offset_ms)).unwrap_or(0)
    }

    /// Whether a transaction prepared at `prepared_ms` has expired at the core's time
    /// `now`.
    pub(crate) fn expired(&self, prepared_ms: u64, now: Time) -> bool {
        self.wall_ms(now) >= self.expiry_wall_ms(prepared_ms)
    }

    fn expiry_wall_ms(&self, prepared_ms: u64) -> u64 {
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        prepared_ms.saturating_add(timeout_ms)
    }

    /// The core's time at which a transaction prepared at `prepared_ms` expires.
    fn expiry(&self, prepared_ms: u64) -> Time {
        let wall = i64::try_from(self.expiry_wall_ms(prepared_ms)).unwrap_or(i64::MAX);
        let core_ms = u64::try_from(wall.saturating_sub(self.wall_offset_ms)).unwrap_or(0);
        Time::from_nanos(core_ms.saturating_mul(1_000_000))
    }
}

/// What to do while the decision is not there and the transaction has not expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// Say it is undecided (a reader serializes before it; a sweep comes back later).
    Report,
    /// Ask again until it is decided or expired (a writer it blocks).
    Wait,
}

/// What a decision lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecideOutcome {
    /// Decided (now, or before).
    Decided(Decision),
    /// No decision yet, and it may not be aborted yet.
    Undecided,
    /// The coordinator group could not be read or written in time.
    Failed(String),
    /// No decision, and no record of the transaction pending in the participants
    /// rechecked: it finished everywhere (its decision since collected) or never
    /// prepared there. Nothing is left to settle.
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Reading,
    /// The decision was read absent at `position` (which named `leader`): re-reading
    /// the record in the `next`th participant to recheck.
    Rechecking {
        next: usize,
        position: Position,
        leader: Option<ReplicaId>,
    },
    /// Every record rechecked was gone: reading the decision once more.
    Rereading,
    Recording,
    Waiting,
    Done,
}

/// When a lookup that finds no decision records abort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MayAbort {
    /// Never: it only looks (a resolution by the transaction's id).
    Never,
    /// Once the transaction (whose decision row would record these facts) has expired.
    After(TxnFacts),
    /// At once: the transaction's own client, which decided nothing, aborts it.
    Now(TxnFacts),
}

/// One lookup of `txn`'s decision in `coordinator`.
#[derive(Debug)]
pub(crate) struct Decide {
    coordinator: EgId,
    txn: TxnId,
    /// When it may record abort.
    may_abort: MayAbort,
    /// The participants whose record of `txn` confirms a decision read absent when the
    /// collection watermark does not (one read present suffices).
    recheck: Vec<EgId>,
    patience: Patience,
    clock: TwoPhaseClock,
    stage: Stage,
    attempts: u32,
    outcome: Option<DecideOutcome>,
    /// Where the decision it read was chosen (none when it recorded it or read none).
    found_at: Option<Position>,
}

impl Decide {
    /// A lookup, and its first step.
    pub(crate) fn start(
        coordinator: EgId,
        txn: TxnId,
        may_abort: MayAbort,
        recheck: Vec<EgId>,
        patience: Patience,
        clock: TwoPhaseClock,
    ) -> (Self, Step) {
        let decide = Self {
            coordinator,
            txn,
            may_abort,
            recheck,
            patience,
            clock,
            stage: Stage::Reading,
            attempts: 0,
            outcome: None,
            found_at: None,
        };
        let step = decide.read();
        (decide, step)
    }

    fn read(&self) -> Step {
        Step::Read {
            eg: self.coordinator.clone(),
            // With the collection watermark: an absence above it is real.
            query: DataQuery::Rows(vec![
                decision_row(&self.coordinator, self.txn),
                watermark_row(&self.coordinator),
            ]),
            settle: false,
        }
    }

    /// The decision `read` of the decision row found, if any (and where it was chosen).
    fn found(&mut self, read: &ReadResult) -> Option<Decision> {
        let row = decision_row(&self.coordinator, self.txn);
        let row = read.rows.iter().find(|r| r.key == row);
        let decision = decision_of(row)?;
        self.found_at = decided_at(row);
        Some(decision)
    }

    fn done(&mut self, outcome: DecideOutcome) -> Option<Step> {
        self.stage = Stage::Done;
        self.outcome = Some(outcome);
        None
    }

    fn read_record(&self, next: usize) -> Step {
        let eg = self.recheck[next].clone();
        Step::Read {
            query: DataQuery::Rows(vec![record_row(&eg, self.txn)]),
            eg,
            settle: false,
        }
    }

    /// A step it asked for ended: its next step, if any.
    pub(crate) fn on_ended(&mut self, now: Time, ended: Ended) -> Option<Step> {
        match (self.stage, ended) {
            (Stage::Reading | Stage::Rechecking { .. } | Stage::Rereading, Ended::Read(Err(e))) => {
                self.done(DecideOutcome::Failed(format!("{e:?}")))
            }
            (Stage::Reading, Ended::Read(Ok(read))) => {
                if let Some(decision) = self.found(&read) {
                    return self.done(DecideOutcome::Decided(decision));
                }
                let position = read.position.unwrap_or_default();
                let watermark = watermark_of(
                    read.rows
                        .iter()
                        .find(|r| r.key == watermark_row(&self.coordinator)),
                );
                let never_collected = match &self.may_abort {
                    MayAbort::After(facts) | MayAbort::Now(facts) => facts.prepared_ms > watermark,
                    // It records nothing: "undecided" is all it can say.
                    MayAbort::Never => true,
                };
                if never_collected || self.clock.bugs.trust_absent_decision() {
                    return self.on_absent(now, position, read.next_leader);
                }
                if self.recheck.is_empty() {
                    // Maybe collected, and no record to confirm by: nothing to finish.
                    return self.done(DecideOutcome::Gone);
                }
                self.stage = Stage::Rechecking {
                    next: 0,
                    position,
                    leader: read.next_leader,
                };
                Some(self.read_record(0))
            }
            (
                Stage::Rechecking {
                    next,
                    position,
                    leader,
                },
                Ended::Read(Ok(read)),
            ) => {
                let row = record_row(&self.recheck[next], self.txn);
                if read.rows.iter().any(|r| r.key == row) {
                    // Pending after the decision was read absent: it was absent then.
                    return self.on_absent(now, position, leader);
                }
                if next + 1 < self.recheck.len() {
                    self.stage = Stage::Rechecking {
                        next: next + 1,
                        position,
                        leader,
                    };
                    return Some(self.read_record(next + 1));
                }
                // Finished everywhere rechecked: decided meanwhile, and maybe collected.
                self.stage = Stage::Rereading;
                Some(self.read())
            }
            (Stage::Rereading, Ended::Read(Ok(read))) => match self.found(&read) {
                Some(decision) => self.done(DecideOutcome::Decided(decision)),
                None => self.done(DecideOutcome::Gone),
            },
            (Stage::Recording, Ended::Commit(CommitResult::Committed { .. })) => {
                self.done(DecideOutcome::Decided(Decision::Abort))
            }
            (Stage::Recording, Ended::Commit(_)) => {
                // Another decision (or another recorder) got there first, or the outcome
                // is unknown: read the decision again.
                self.attempts += 1;
                if self.attempts >= RECORD_ATTEMPTS_MAX {
                    return self.done(DecideOutcome::Failed(
                        "could not record the abort decision".into(),
                    ));
                }
                self.stage = Stage::Reading;
                Some(self.read())
            }
            (Stage::Waiting, Ended::Woke) => {
                self.stage = Stage::Reading;
                Some(self.read())
            }
            _ => None,
        }
    }

    /// The decision was read absent at `position` of the coordinator group (which
    /// named `leader`), and that absence is confirmed: record abort if it may, wait, or
    /// report it undecided.
    fn on_absent(
        &mut self,
        now: Time,
        position: Position,
        leader: Option<ReplicaId>,
    ) -> Option<Step> {
        let (facts, recovering) = match &self.may_abort {
            MayAbort::Never => (None, false),
            MayAbort::After(facts) => (
                self.clock.expired(facts.prepared_ms, now).then_some(facts),
                true,
            ),
            MayAbort::Now(facts) => (Some(facts), false),
        };
        if let Some(facts) = facts {
            if recovering && self.clock.bugs.abort_without_recording() {
                // The mistake: the participants are told "abort" while the
                // coordinator group may still record "commit".
                return self.done(DecideOutcome::Decided(Decision::Abort));
            }
            let write = decision_write(&self.coordinator, self.txn, Decision::Abort, facts);
            self.stage = Stage::Recording;
            // The decision row is read: a `commit` decision chosen meanwhile conflicts
            // with this abort, and the other way round — as does a collection.
            let reads = if self.clock.bugs.record_abort_blind() {
                ReadSet::default()
            } else {
                let row = decision_row(&self.coordinator, self.txn);
                ReadSet::from(std::collections::BTreeSet::from([row]))
            };
            return Some(Step::Commit {
                eg: self.coordinator.clone(),
                read_position: position,
                leader,
                writes: vec![write],
                reads,
                txn: None,
            });
        }
        match (self.patience, &self.may_abort) {
            (Patience::Wait, MayAbort::After(facts)) => {
                self.stage = Stage::Waiting;
                let wake = (now + self.clock.poll).min(self.clock.expiry(facts.prepared_ms));
                Some(Step::Wake { at: wake.max(now) })
            }
            _ => self.done(DecideOutcome::Undecided),
        }
    }

    /// What it found, once done.
    pub(crate) fn outcome(&self) -> Option<&DecideOutcome> {
        self.outcome.as_ref()
    }

    /// Where the decision it read was chosen: the position of the entry that wrote it
    /// (none when it recorded the decision itself, or read none).
    pub(crate) fn found_at(&self) -> Option<Position> {
        self.found_at
    }
}
