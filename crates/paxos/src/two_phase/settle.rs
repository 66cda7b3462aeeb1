//! Recovery: whoever meets a prepared transaction finishes it — a current read of a row
//! it writes ([`SettlingRead`]), a commit it locks out ([`Blocked`]), a replica's sweep
//! or a program asking for a group ([`SettleGroup`]). Each learns the decision (or,
//! after the prepared timeout, records abort), then finishes the transaction in the
//! group it met it in ([`SettlePrepared`]).

use std::collections::BTreeMap;

use megastore_types::{EgId, Time, TxnId};

use super::decide::{Decide, DecideOutcome, MayAbort, Patience, TwoPhaseClock};
use super::finish::{Finish, FinishOutcome};
use super::{Decision, Prepared};
use crate::messages::DataQuery;
use crate::proposer::commit::CommitResult;
use crate::proposer::read::{ReadError, ReadResult};
use crate::steps::{Ended, Step, Tagged};

/// How settling one prepared transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// Decided, and finished in the group.
    Finished(Decision),
    /// Not decided, and not expired: left as it is.
    Undecided,
    /// Its coordinator group or this group could not be read or written in time.
    Failed(String),
    /// Its record here is gone and no decision remains: someone finished it, and its
    /// decision has since been collected.
    Gone,
}

/// Settling one prepared transaction met in `eg`: its decision, then its finish there.
#[derive(Debug)]
pub(crate) struct SettlePrepared {
    eg: EgId,
    txn: TxnId,
    decide: Decide,
    finish: Option<(Decision, Finish)>,
    outcome: Option<SettleOutcome>,
}

impl SettlePrepared {
    pub(crate) fn start(
        eg: EgId,
        prepared: &Prepared,
        patience: Patience,
        clock: TwoPhaseClock,
    ) -> (Self, Step) {
        let (decide, step) = Decide::start(
            prepared.coordinator.clone(),
            prepared.txn,
            MayAbort::After(prepared.facts()),
            vec![eg.clone()],
            patience,
            clock,
        );
        let settle = Self {
            eg,
            txn: prepared.txn,
            decide,
            finish: None,
            outcome: None,
        };
        (settle, step)
    }

    pub(crate) fn on_ended(&mut self, now: Time, ended: Ended) -> Option<Step> {
        if let Some((decision, finish)) = &mut self.finish {
            let step = finish.on_ended(ended);
            match finish.outcome() {
                Some(FinishOutcome::Finished) => {
                    self.outcome = Some(SettleOutcome::Finished(*decision))
                }
                Some(FinishOutcome::Failed(why)) => {
                    self.outcome = Some(SettleOutcome::Failed(why.clone()))
                }
                None => {}
            }
            return step;
        }
        if let Some(step) = self.decide.on_ended(now, ended) {
            return Some(step);
        }
        match self.decide.outcome().cloned() {
            Some(DecideOutcome::Decided(decision)) => {
                let (finish, step) = Finish::start(self.eg.clone(), self.txn, decision);
                self.finish = Some((decision, finish));
                Some(step)
            }
            Some(DecideOutcome::Undecided) => {
                self.outcome = Some(SettleOutcome::Undecided);
                None
            }
            Some(DecideOutcome::Failed(why)) => {
                self.outcome = Some(SettleOutcome::Failed(why));
                None
            }
            Some(DecideOutcome::Gone) => {
                self.outcome = Some(SettleOutcome::Gone);
                None
            }
            None => None,
        }
    }

    pub(crate) fn outcome(&self) -> Option<&SettleOutcome> {
        self.outcome.as_ref()
    }
}

/// Several settles at once, tagged from 1.
#[derive(Debug, Default)]
struct Settles {
    running: BTreeMap<u32, SettlePrepared>,
}

impl Settles {
    fn start(
        &mut self,
        eg: &EgId,
        prepared: &[Prepared],
        patience: Patience,
        clock: TwoPhaseClock,
    ) -> Vec<Tagged> {
        self.running.clear();
        prepared
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let tag = u32::try_from(i + 1).expect("fewer than u32::MAX records");
                let (settle, step) = SettlePrepared::start(eg.clone(), p, patience, clock);
                self.running.insert(tag, settle);
                (tag, step)
            })
            .collect()
    }

    fn on_ended(&mut self, now: Time, tag: u32, ended: Ended) -> Vec<Tagged> {
        self.running
            .get_mut(&tag)
            .and_then(|s| s.on_ended(now, ended))
            .map(|step| vec![(tag, step)])
            .unwrap_or_default()
    }

    /// Every outcome, once every settle has one.
    fn outcomes(&self) -> Option<Vec<&SettleOutcome>> {
        self.running.values().map(SettlePrepared::outcome).collect()
    }
}

/// What settling a group's prepared transactions did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettledGroup {
    /// Finished as committed.
    pub committed: u64,
    /// Finished as aborted.
    pub aborted: u64,
    /// Still undecided and not expired.
    pub undecided: u64,
    /// Could not be settled this time.
    pub failed: u64,
}

/// Settling every prepared transaction pending in a group (a replica's sweep, or a
/// program): those undecided past the timeout are aborted.
#[derive(Debug)]
pub(crate) struct SettleGroup {
    eg: EgId,
    clock: TwoPhaseClock,
    settles: Settles,
    read: Option<Result<(), ReadError>>,
}

impl SettleGroup {
    pub(crate) fn start(eg: EgId, clock: TwoPhaseClock) -> (Self, Tagged) {
        let step = Step::Read {
            eg: eg.clone(),
            query: DataQuery::Rows(Vec::new()),
            settle: false,
        };
        let settle = Self {
            eg,
            clock,
            settles: Settles::default(),
            read: None,
        };
        (settle, (0, step))
    }

    pub(crate) fn on_ended(&mut self, now: Time, tag: u32, ended: Ended) -> Vec<Tagged> {
        match (tag, ended) {
            (0, Ended::Read(Ok(read))) => {
                self.read = Some(Ok(()));
                self.settles
                    .start(&self.eg, &read.prepared, Patience::Report, self.clock)
            }
            (0, Ended::Read(Err(e))) => {
                self.read = Some(Err(e));
                Vec::new()
            }
            (tag, ended) => self.settles.on_ended(now, tag, ended),
        }
    }

    pub(crate) fn result(&self) -> Option<Result<SettledGroup, ReadError>> {
        match self.read.as_ref()? {
            Err(e) => Some(Err(e.clone())),
            Ok(()) => {
                let mut settled = SettledGroup::default();
                for outcome in self.settles.outcomes()? {
                    match outcome {
                        SettleOutcome::Finished(Decision::Commit) => settled.committed += 1,
                        SettleOutcome::Finished(Decision::Abort) => settled.aborted += 1,
                        SettleOutcome::Undecided => settled.undecided += 1,
                        SettleOutcome::Failed(_) => settled.failed += 1,
                        SettleOutcome::Gone => {}
                    }
                }
                Some(Ok(settled))
            }
        }
    }
}

/// A commit that prepared transactions lock out: it waits until each is decided (or
/// expired, then aborted) and finished, then reports a conflict on the locked rows, so
/// its transaction runs again on the state after them.
#[derive(Debug)]
pub(crate) struct Blocked {
    txn: TxnId,
    keys: Vec<Vec<u8>>,
    settles: Settles,
}

impl Blocked {
    pub(crate) fn start(
        eg: &EgId,
        txn: TxnId,
        blocking: &[Prepared],
        keys: Vec<Vec<u8>>,
        clock: TwoPhaseClock,
    ) -> (Self, Vec<Tagged>) {
        let mut settles = Settles::default();
        let steps = settles.start(eg, blocking, Patience::Wait, clock);
        (Self { txn, keys, settles }, steps)
    }

    pub(crate) fn on_ended(&mut self, now: Time, tag: u32, ended: Ended) -> Vec<Tagged> {
        self.settles.on_ended(now, tag, ended)
    }

    /// The commit's result, once every blocking transaction was settled.
    pub(crate) fn result(&self) -> Option<(TxnId, CommitResult)> {
        self.settles.outcomes()?;
        Some((
            self.txn,
            CommitResult::Conflict {
                keys: self.keys.clone(),
            },
        ))
    }
}

/// Rounds of settling a current read runs before it gives up.
const SETTLING_ROUNDS_MAX: u32 = 4;

/// A current read that settles what it meets: a prepared transaction whose writes it
/// reads is looked up in its coordinator group; decided, it is finished here and the
/// read made again (so it sees all of the transaction or none); undecided, the read
/// stands (it is serialized before the transaction, whose rows nobody can change
/// meanwhile).
#[derive(Debug)]
pub(crate) struct SettlingRead {
    eg: EgId,
    query: DataQuery,
    clock: TwoPhaseClock,
    rounds: u32,
    last: Option<ReadResult>,
    settles: Settles,
    result: Option<Result<ReadResult, ReadError>>,
}

impl SettlingRead {
    pub(crate) fn start(eg: EgId, query: DataQuery, clock: TwoPhaseClock) -> (Self, Tagged) {
        let read = Self {
            eg,
            query,
            clock,
            rounds: 0,
            last: None,
            settles: Settles::default(),
            result: None,
        };
        let step = read.read();
        (read, (0, step))
    }

    fn read(&self) -> Step {
        Step::Read {
            eg: self.eg.clone(),
            query: self.query.clone(),
            settle: false,
        }
    }

    pub(crate) fn on_ended(&mut self, now: Time, tag: u32, ended: Ended) -> Vec<Tagged> {
        match (tag, ended) {
            (0, Ended::Read(Err(e))) => {
                self.result = Some(Err(e));
                Vec::new()
            }
            (0, Ended::Read(Ok(read))) => {
                let met: Vec<Prepared> = read
                    .prepared
                    .iter()
                    .filter(|p| p.writes_any_of(&self.query))
                    .filter(|_| !self.clock.bugs.read_ignores_prepared())
                    .cloned()
                    .collect();
                if met.is_empty() {
                    self.result = Some(Ok(read));
                    return Vec::new();
                }
                if self.rounds >= SETTLING_ROUNDS_MAX {
                    self.result = Some(Err(ReadError::Unavailable(
                        "prepared transactions kept locking the rows read".into(),
                    )));
                    return Vec::new();
                }
                self.rounds += 1;
                self.last = Some(read);
                self.settles
                    .start(&self.eg, &met, Patience::Report, self.clock)
            }
            (tag, ended) => {
                let mut steps = self.settles.on_ended(now, tag, ended);
                if steps.is_empty()
                    && let Some(outcomes) = self.settles.outcomes()
                {
                    if let Some(SettleOutcome::Failed(why)) = outcomes
                        .iter()
                        .find(|o| matches!(o, SettleOutcome::Failed(_)))
                    {
                        self.result = Some(Err(ReadError::Unavailable(format!(
                            "a prepared transaction's decision: {why}"
                        ))));
                    } else if outcomes
                        .iter()
                        .any(|o| matches!(o, SettleOutcome::Finished(_) | SettleOutcome::Gone))
                    {
                        steps.push((0, self.read()));
                    } else {
                        self.result = self.last.take().map(Ok);
                    }
                }
                steps
            }
        }
    }

    pub(crate) fn result(&self) -> Option<&Result<ReadResult, ReadError>> {
        self.result.as_ref()
    }
}
