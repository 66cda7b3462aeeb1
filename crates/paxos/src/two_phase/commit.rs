//! Committing one cross-group transaction: prepare every participant but the first,
//! then decide in the first (the coordinator group) — its own writes and the decision
//! in one entry — then finish every other participant (docs/protocol.md, "Two-phase
//! commit"). Round trips, uncontended: one for the prepares (in parallel), one for the
//! decision, one for the finishes (in parallel); the result is reported after the
//! finishes, so the client's next current read in any participant sees its writes at
//! once.

use std::collections::{BTreeMap, BTreeSet};

use megastore_types::{EgId, Position, ReplicaId, Time, TxnId};

use super::decide::{Decide, DecideOutcome, MayAbort, Patience, TwoPhaseClock};
use super::finish::{Finish, FinishOutcome};
use super::{
    Decision, Prepared, Record, TwoPhaseError, TxnFacts, check_no_reserved_writes, decision_row,
    decision_write, prepare_write,
};
use crate::entry::RowWrite;
use crate::proposer::commit::{CommitResult, ReadSet};
use crate::proposer::resolve::Resolution;
use crate::steps::{Ended, Step, Tagged};

/// One group of a cross-group transaction, as its client read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// The group.
    pub eg: EgId,
    /// The position its reads of this group saw.
    pub read_position: Position,
    /// The next position's leader that position named.
    pub leader: Option<ReplicaId>,
    /// Its writes in this group.
    pub writes: Vec<RowWrite>,
    /// What it read in this group (with the prepared transactions its reads saw there).
    pub reads: ReadSet,
}

/// How a cross-group commit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwoPhaseResult {
    /// Decided commit, at `position` of the coordinator group: every current read in
    /// every participant sees its writes from now on. `finished`: every participant
    /// applied them already (otherwise the next reader there, or a replica's sweep,
    /// finishes it first).
    Committed {
        /// The coordinator group's position holding the decision and its writes there.
        position: Position,
        /// Where each other participant (in the order given) prepared it: its
        /// transaction's entry there.
        prepared: Vec<Position>,
        /// Every participant finished.
        finished: bool,
    },
    /// Not committed anywhere, and never will be: running it again is safe. `keys` are
    /// rows it read (or would write) that another transaction wrote or locked in
    /// between; empty when it lost elsewhere.
    Aborted {
        /// The conflicting rows, sorted.
        keys: Vec<Vec<u8>>,
    },
    /// Its decision could not be learned: the decision row of its transaction in
    /// `coordinator` tells, once a majority is reachable (its participants stay
    /// prepared until someone finishes them, aborting after the prepared timeout).
    Unknown {
        /// The coordinator group.
        coordinator: EgId,
        /// When it began preparing (ms since the Unix epoch, by this client's clock):
        /// once that is past the prepared timeout, whoever resolves it may abort it.
        prepared_ms: u64,
    },
}

/// Where a participant's prepare stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prepare {
    Sent,
    Prepared(Position),
    NotPrepared,
    MaybePrepared,
}

/// The tag of the decision's commit (and of its resolution).
const DECISION: u32 = 0;
/// The tag of the abort's recording.
const RECORD_ABORT: u32 = u32::MAX;
/// Finishing participant `i` is tagged `FINISH + i`; preparing it, `i`.
const FINISH: u32 = 1 << 16;

struct Part {
    participant: Participant,
    /// Its record (every participant but the coordinator).
    record: Option<Record>,
    prepare: Prepare,
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("eg", &self.participant.eg)
            .field("prepare", &self.prepare)
            .finish()
    }
}

/// One cross-group commit in progress.
#[derive(Debug)]
pub(crate) struct TwoPhaseCommit {
    txn: TxnId,
    parts: Vec<Part>,
    /// When it began preparing (its records' date).
    prepared_ms: u64,
    /// The leader the prepare entries name (this client's preferred one): a finish of
    /// a participant it prepared goes through it.
    leader: Option<ReplicaId>,
    clock: TwoPhaseClock,
    decision_sent: bool,
    /// The decision's commit ended without committing (while prepares still ran: only
    /// when it went out early).
    decision_failed: bool,
    decided_at: Option<Position>,
    conflicts: BTreeSet<Vec<u8>>,
    record_abort: Option<Decide>,
    finishes: BTreeMap<u32, Finish>,
    all_finished: bool,
    result: Option<TwoPhaseResult>,
}

impl TwoPhaseCommit {
    /// A commit of `txn` over `participants` (the first is the coordinator group), and
    /// its first steps: the prepares. `leader` is the next leader its entries name.
    pub(crate) fn start(
        now: Time,
        txn: TxnId,
        participants: Vec<Participant>,
        leader: Option<ReplicaId>,
        clock: TwoPhaseClock,
    ) -> Result<(Self, Vec<Tagged>), TwoPhaseError> {
        if participants.len() < 2 {
            return Err(TwoPhaseError::TooFewGroups);
        }
        let mut seen = BTreeSet::new();
        for p in &participants {
            if !seen.insert(&p.eg) {
                return Err(TwoPhaseError::GroupTwice(p.eg.clone()));
            }
            check_no_reserved_writes(&p.eg, &p.writes)?;
        }
        let coordinator = participants[0].eg.clone();
        let groups: Vec<EgId> = participants.iter().map(|p| p.eg.clone()).collect();
        let prepared_ms = clock.wall_ms(now);
        let mut parts = Vec::with_capacity(participants.len());
        let mut steps = Vec::new();
        for (i, participant) in participants.into_iter().enumerate() {
            if i == 0 {
                parts.push(Part {
                    participant,
                    record: None,
                    prepare: Prepare::Prepared(Position::NONE),
                });
                continue;
            }
            let prepared = Prepared {
                txn,
                coordinator: coordinator.clone(),
                participants: groups.clone(),
                prepared_ms,
                writes: participant.writes.iter().map(|w| w.row.clone()).collect(),
                read_rows: participant.reads.rows.clone(),
                read_ranges: participant
                    .reads
                    .ranges
                    .iter()
                    .map(|r| (r.start.clone(), r.end.clone()))
                    .collect(),
            };
            let write = prepare_write(&participant.eg, &prepared, &participant.writes)?;
            let record = Record::of_write(&participant.eg, &write)
                .expect("a prepare write reads back as its record");
            steps.push((
                u32::try_from(i).expect("fewer participants than u32::MAX"),
                Step::Commit {
                    eg: participant.eg.clone(),
                    read_position: participant.read_position,
                    leader: participant.leader,
                    writes: vec![write],
                    reads: participant.reads.clone(),
                    txn: Some(txn),
                },
            ));
            parts.push(Part {
                participant,
                record: Some(record),
                prepare: Prepare::Sent,
            });
        }
        let mut commit = Self {
            txn,
            prepared_ms,
            parts,
            leader,
            clock,
            decision_sent: false,
            decision_failed: false,
            decided_at: None,
            conflicts: BTreeSet::new(),
            record_abort: None,
            finishes: BTreeMap::new(),
            all_finished: true,
            result: None,
        };
        if clock.bugs.decide_before_all_prepared() {
            // The mistake: the decision does not wait for the prepares.
            steps.push(commit.decide());
        }
        Ok((commit, steps))
    }

    /// The decision's commit: the coordinator group's own writes and `commit`, its
    /// reads and the decision row (a recorded abort conflicts) as its read set.
    fn decide(&mut self) -> Tagged {
        self.decision_sent = true;
        let coordinator = &self.parts[0].participant;
        let mut writes = coordinator.writes.clone();
        writes.push(decision_write(
            &coordinator.eg,
            self.txn,
            Decision::Commit,
            &self.facts(),
        ));
        let mut reads = coordinator.reads.clone();
        reads.rows.insert(decision_row(&coordinator.eg, self.txn));
        (
            DECISION,
            Step::Commit {
                eg: coordinator.eg.clone(),
                read_position: coordinator.read_position,
                leader: coordinator.leader,
                writes,
                reads,
                txn: Some(self.txn),
            },
        )
    }

    /// What its decision row records beside the decision.
    fn facts(&self) -> TxnFacts {
        TxnFacts {
            prepared_ms: self.prepared_ms,
            participants: self
                .parts
                .iter()
                .map(|p| p.participant.eg.clone())
                .collect(),
        }
    }

    /// A step it asked for ended: its next steps.
    pub(crate) fn on_ended(&mut self, now: Time, tag: u32, ended: Ended) -> Vec<Tagged> {
        match tag {
            DECISION => self.on_decision(ended),
            RECORD_ABORT => {
                let Some(decide) = self.record_abort.as_mut() else {
                    return Vec::new();
                };
                if let Some(step) = decide.on_ended(now, ended) {
                    return vec![(RECORD_ABORT, step)];
                }
                match decide.outcome().cloned() {
                    Some(DecideOutcome::Decided(Decision::Commit)) => {
                        // Only this client decides commit, so its decision landed after
                        // all: past the span its resolution settled (a decision's span
                        // moves on, `Member::span_moves`), or sent early (a knob).
                        // Finish as decided, at the position the decision row says.
                        self.decided_at = decide.found_at();
                        self.finish_all(Decision::Commit)
                    }
                    Some(DecideOutcome::Decided(Decision::Abort)) => {
                        self.finish_all(Decision::Abort)
                    }
                    // It never decided commit, so no one ever will: aborted. But a
                    // participant drops its writes only once the abort is recorded, so
                    // they stay prepared until someone who meets them records it after
                    // the timeout.
                    _ => {
                        self.finished_one();
                        Vec::new()
                    }
                }
            }
            t if t >= FINISH => {
                let Some(finish) = self.finishes.get_mut(&t) else {
                    return Vec::new();
                };
                if let Some(step) = finish.on_ended(ended) {
                    return vec![(t, step)];
                }
                self.finished_one();
                Vec::new()
            }
            i => self.on_prepared(i as usize, ended),
        }
    }

    fn on_prepared(&mut self, i: usize, ended: Ended) -> Vec<Tagged> {
        let Some(part) = self.parts.get_mut(i) else {
            return Vec::new();
        };
        let Ended::Commit(result) = ended else {
            return Vec::new();
        };
        part.prepare = match result {
            CommitResult::Committed { position, .. } => Prepare::Prepared(position),
            CommitResult::Conflict { keys } => {
                self.conflicts.extend(keys);
                Prepare::NotPrepared
            }
            CommitResult::Aborted => Prepare::NotPrepared,
            CommitResult::Unknown { .. } | CommitResult::UnknownInSpan { .. } => {
                Prepare::MaybePrepared
            }
        };
        if self.parts.iter().any(|p| p.prepare == Prepare::Sent) {
            return Vec::new();
        }
        if self.decision_sent {
            // Out early (a knob): finish as it ended, or wait for it.
            return match (self.decided_at, self.decision_failed) {
                (Some(_), _) => self.finish_all(Decision::Commit),
                (None, true) => self.abort(),
                (None, false) => Vec::new(),
            };
        }
        if self
            .parts
            .iter()
            .all(|p| matches!(p.prepare, Prepare::Prepared(_)))
        {
            vec![self.decide()]
        } else {
            self.abort()
        }
    }

    fn on_decision(&mut self, ended: Ended) -> Vec<Tagged> {
        match ended {
            Ended::Commit(CommitResult::Committed { position, .. })
            | Ended::Resolve(Resolution::Committed(position)) => {
                self.decided_at = Some(position);
                self.maybe_finish_decided()
            }
            Ended::Commit(CommitResult::Conflict { keys }) => {
                self.conflicts.extend(keys);
                self.after_prepares_abort()
            }
            Ended::Commit(CommitResult::Aborted) | Ended::Resolve(Resolution::NotCommitted) => {
                self.after_prepares_abort()
            }
            Ended::Commit(CommitResult::Unknown { position }) => vec![(
                DECISION,
                Step::Resolve {
                    eg: self.parts[0].participant.eg.clone(),
                    position,
                    span: false,
                    txn: self.txn,
                },
            )],
            Ended::Commit(CommitResult::UnknownInSpan { first }) => vec![(
                DECISION,
                Step::Resolve {
                    eg: self.parts[0].participant.eg.clone(),
                    position: first,
                    span: true,
                    txn: self.txn,
                },
            )],
            Ended::Resolve(Resolution::Undecided) => {
                // Its entry may yet be chosen: only the decision row will tell.
                self.done(TwoPhaseResult::Unknown {
                    coordinator: self.parts[0].participant.eg.clone(),
                    prepared_ms: self.prepared_ms,
                });
                Vec::new()
            }
            Ended::Read(_) | Ended::Woke => Vec::new(),
        }
    }

    /// Decided commit: finishes once every prepare answered (they all have, unless the
    /// decision went out early).
    fn maybe_finish_decided(&mut self) -> Vec<Tagged> {
        if self.decided_at.is_none() || self.parts.iter().any(|p| p.prepare == Prepare::Sent) {
            return Vec::new();
        }
        self.finish_all(Decision::Commit)
    }

    /// The decision was not recorded commit: abort, once the prepares answered.
    fn after_prepares_abort(&mut self) -> Vec<Tagged> {
        if self.parts.iter().any(|p| p.prepare == Prepare::Sent) {
            self.decision_failed = true;
            return Vec::new();
        }
        self.abort()
    }

    /// Records abort in the coordinator group, then finishes the participants.
    fn abort(&mut self) -> Vec<Tagged> {
        // Only this client decides commit, and it has not (or not yet, when its
        // decision went out early or moved past the span its resolution settled: then
        // a commit is read). But another may have met a record, recorded abort,
        // finished it and — this client slow past the retention — collected the
        // decision: an absent decision counts only above the collection watermark, or
        // with a record still pending where one may be.
        let recheck = self
            .parts
            .iter()
            .skip(1)
            .filter(|p| matches!(p.prepare, Prepare::Prepared(_) | Prepare::MaybePrepared))
            .map(|p| p.participant.eg.clone())
            .collect();
        let (decide, step) = Decide::start(
            self.parts[0].participant.eg.clone(),
            self.txn,
            MayAbort::Now(self.facts()),
            recheck,
            Patience::Report,
            self.clock,
        );
        self.record_abort = Some(decide);
        vec![(RECORD_ABORT, step)]
    }

    /// Finishes every participant that is (or may be) prepared as `decision`.
    fn finish_all(&mut self, decision: Decision) -> Vec<Tagged> {
        if decision == Decision::Commit && self.decided_at.is_none() {
            self.decided_at = Some(Position::NONE);
        }
        let mut steps = Vec::new();
        for (i, part) in self.parts.iter().enumerate().skip(1) {
            let tag = FINISH + u32::try_from(i).expect("fewer participants than u32::MAX");
            let eg = part.participant.eg.clone();
            let (finish, step) = match (part.prepare, &part.record) {
                (Prepare::Prepared(position), Some(record)) => {
                    Finish::start_known(eg, record, decision, position, self.leader)
                }
                (Prepare::MaybePrepared, _) => Finish::start(eg, self.txn, decision),
                _ => continue,
            };
            self.finishes.insert(tag, finish);
            steps.push((tag, step));
        }
        if steps.is_empty() {
            self.finished_one();
        }
        steps
    }

    /// A finish ended (or there were none): reports once every one did.
    fn finished_one(&mut self) {
        if self.finishes.values().any(|f| f.outcome().is_none()) {
            return;
        }
        self.all_finished = self
            .finishes
            .values()
            .all(|f| f.outcome() == Some(&FinishOutcome::Finished));
        let result = match self.decided_at {
            Some(position) => TwoPhaseResult::Committed {
                position,
                prepared: self
                    .parts
                    .iter()
                    .skip(1)
                    .map(|p| match p.prepare {
                        Prepare::Prepared(at) => at,
                        _ => Position::NONE,
                    })
                    .collect(),
                finished: self.all_finished,
            },
            None => TwoPhaseResult::Aborted {
                keys: std::mem::take(&mut self.conflicts).into_iter().collect(),
            },
        };
        self.done(result);
    }

    fn done(&mut self, result: TwoPhaseResult) {
        self.result = Some(result);
    }

    /// The transaction.
    pub(crate) fn txn(&self) -> TxnId {
        self.txn
    }

    /// How it ended, once it did.
    pub(crate) fn result(&self) -> Option<&TwoPhaseResult> {
        self.result.as_ref()
    }
}
