//! The client core's operations made of other operations (`crate::steps`): each is
//! told how its steps ended and says what to run next; the core runs the steps.

use megastore_types::Time;

use super::OpResult;
use crate::queue::Deliver;
use crate::steps::{Ended, Tagged};
use crate::two_phase::collect::CollectDecisions;
use crate::two_phase::commit::TwoPhaseCommit;
use crate::two_phase::decide::Decide;
use crate::two_phase::settle::{Blocked, SettleGroup, SettlingRead};

/// One composite operation.
#[derive(Debug)]
pub(super) enum Composite {
    /// A queue delivery (its steps tagged 0: one at a time).
    Deliver(Deliver),
    /// A cross-group commit.
    TwoPhase(TwoPhaseCommit),
    /// Settling a group's prepared transactions.
    SettleGroup(SettleGroup),
    /// Looking up (and maybe recording) a cross-group transaction's decision (tag 0).
    Decide(Decide),
    /// A commit prepared transactions lock out.
    Blocked(Blocked),
    /// A current read that settles the prepared transactions it meets.
    SettlingRead(SettlingRead),
    /// Collecting a page of a coordinator group's old decision rows.
    CollectDecisions(CollectDecisions),
}

impl Composite {
    /// Step `tag` ended: what to run next.
    pub(super) fn on_ended(&mut self, now: Time, tag: u32, ended: Ended) -> Vec<Tagged> {
        match self {
            Composite::Deliver(deliver) => deliver
                .on_ended(ended)
                .map(|s| (0, s))
                .into_iter()
                .collect(),
            Composite::TwoPhase(commit) => commit.on_ended(now, tag, ended),
            Composite::SettleGroup(settle) => settle.on_ended(now, tag, ended),
            Composite::Decide(decide) => decide
                .on_ended(now, ended)
                .map(|s| (0, s))
                .into_iter()
                .collect(),
            Composite::Blocked(blocked) => blocked.on_ended(now, tag, ended),
            Composite::SettlingRead(read) => read.on_ended(now, tag, ended),
            Composite::CollectDecisions(collect) => collect.on_ended(now, tag, ended),
        }
    }

    /// Its result, once it has one (it is then over).
    pub(super) fn result(&self) -> Option<OpResult> {
        match self {
            Composite::Deliver(deliver) => deliver.result().map(OpResult::Deliver),
            Composite::TwoPhase(commit) => commit.result().map(|result| OpResult::TwoPhase {
                txn: commit.txn(),
                result: result.clone(),
            }),
            Composite::SettleGroup(settle) => settle.result().map(OpResult::Settled),
            Composite::Decide(decide) => decide.outcome().cloned().map(OpResult::Decision),
            Composite::Blocked(blocked) => blocked
                .result()
                .map(|(txn, result)| OpResult::Commit { txn, result }),
            Composite::SettlingRead(read) => read.result().cloned().map(OpResult::Read),
            Composite::CollectDecisions(collect) => {
                collect.result().cloned().map(OpResult::Collected)
            }
        }
    }
}
