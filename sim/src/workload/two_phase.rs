//! Transactions across groups in the workload: a client reads two or three groups
//! (current reads, each a recorded operation), writes some of their keys — read-
//! modify-write or blind, per group — and commits them by two-phase commit; an unknown
//! outcome is resolved by the coordinator group's decision row, as the client library
//! does. A quarter of them plan a crash of their client during the commit (the world
//! carries it out: a new process, under a new client id), so that prepared
//! transactions are left for others to settle. Clients also settle a random group's
//! prepared transactions now and then, as a replica's sweep does.

use std::collections::BTreeSet;

use megastore_paxos::{
    ClientOutput, DecideOutcome, Decision, OpId, OpResult, Participant, ReadResult, ReadSet,
    TwoPhaseResult, TxnFacts,
};
use megastore_types::{ClientId, EgId, Position, Time, TxnId};

use super::{ClientNode, State, group};
use crate::history::{OpKind, OpRecord, Outcome, TwoPhaseOutcome};

/// One group as the transaction read it: its position, what it read there (the keys
/// it depends on), and the read's answer.
#[derive(Debug)]
pub(crate) struct Part {
    eg: EgId,
    read: ReadResult,
    read_keys: BTreeSet<Vec<u8>>,
}

/// Where a cross-group operation stands.
#[derive(Debug)]
pub(crate) enum Multi {
    /// Reading the groups, one after another.
    Reading {
        op: OpId,
        start: u64,
        read_start: u64,
        groups: Vec<EgId>,
        parts: Vec<Part>,
    },
    /// Committing.
    Committing {
        op: OpId,
        start: u64,
        /// When the commit itself began (its reads done).
        commit_start: u64,
        txn: TxnId,
        parts: Vec<Part>,
        prepared_ms: u64,
        serial: u64,
    },
    /// The commit's outcome was unknown: looking up its decision.
    Resolving {
        op: OpId,
        start: u64,
        txn: TxnId,
        groups: Vec<EgId>,
        prepared_ms: u64,
        since: Time,
    },
    /// Settling a group's prepared transactions.
    Settling { op: OpId, eg: EgId, start: u64 },
    /// Collecting a page of a group's old decisions.
    Collecting { op: OpId, eg: EgId, start: u64 },
}

impl Multi {
    pub(crate) fn op(&self) -> OpId {
        match self {
            Multi::Reading { op, .. }
            | Multi::Committing { op, .. }
            | Multi::Resolving { op, .. }
            | Multi::Settling { op, .. }
            | Multi::Collecting { op, .. } => *op,
        }
    }
}

impl ClientNode {
    /// The groups cross-group operations choose among (at least two).
    fn two_phase_groups(&self) -> u64 {
        u64::from(self.groups.max(2))
    }

    /// Starts a transaction across two or three groups: reads the first.
    pub(super) fn start_two_phase(&mut self, real: u64, now: Time) -> Vec<ClientOutput> {
        let count = self.two_phase_groups().min(2 + self.rng.below(2));
        let mut groups: Vec<EgId> = Vec::new();
        while (groups.len() as u64) < count {
            let eg = group(self.rng.below(self.two_phase_groups()) as u16);
            if !groups.contains(&eg) {
                groups.push(eg);
            }
        }
        self.read_next_group(real, now, real, groups, Vec::new())
    }

    fn read_next_group(
        &mut self,
        real: u64,
        now: Time,
        start: u64,
        groups: Vec<EgId>,
        parts: Vec<Part>,
    ) -> Vec<ClientOutput> {
        let eg = groups[parts.len()].clone();
        let query = self.group_query(&eg);
        let (op, out) = self
            .core
            .read(now, eg, megastore_paxos::ReadMode::Current, query);
        self.state = State::TwoPhase(Multi::Reading {
            op,
            start,
            read_start: real,
            groups,
            parts,
        });
        out
    }

    /// Settles a random group's prepared transactions.
    pub(super) fn start_settle(&mut self, real: u64, now: Time) -> Vec<ClientOutput> {
        let eg = group(self.rng.below(self.two_phase_groups()) as u16);
        self.settle_group(real, now, eg)
    }

    /// Settles `eg`'s prepared transactions (for the world's model of the full
    /// replicas' sweep, which has no client of its own here).
    pub(crate) fn settle_group(&mut self, real: u64, now: Time, eg: EgId) -> Vec<ClientOutput> {
        let (op, out) = self.core.settle_prepared(now, eg.clone());
        self.state = State::TwoPhase(Multi::Settling {
            op,
            eg,
            start: real,
        });
        out
    }

    /// Collects a page of `eg`'s decisions older than `retention` (for the world's
    /// model of the full replicas' collection, `group_work.rs` on a real server; the
    /// page after `after`).
    pub(crate) fn collect_group(
        &mut self,
        real: u64,
        now: Time,
        eg: EgId,
        after: Option<Vec<u8>>,
        retention: std::time::Duration,
    ) -> Vec<ClientOutput> {
        let (op, out) = self
            .core
            .collect_decisions(now, eg.clone(), after, retention);
        self.state = State::TwoPhase(Multi::Collecting {
            op,
            eg,
            start: real,
        });
        out
    }

    /// A planned crash, once (real time from now, ns): the world carries it out.
    pub(crate) fn take_planned_crash(&mut self) -> Option<(u64, u64)> {
        self.planned_crash
            .take()
            .map(|after| (after, self.two_phase_serial))
    }

    /// Crashes the client if it is still in cross-group commit `serial`: its process
    /// is gone, and a new one (a new client id, so new ballots and transaction ids)
    /// starts idle. The commit's record says its outcome is unknown.
    pub(crate) fn crash_in_two_phase(
        &mut self,
        real: u64,
        serial: u64,
        new_id: ClientId,
        seed: u64,
    ) -> Option<OpRecord> {
        let State::TwoPhase(Multi::Committing {
            start,
            txn,
            ref parts,
            serial: running,
            ..
        }) = self.state
        else {
            return None;
        };
        if running != serial {
            return None;
        }
        let groups = parts.iter().map(|p| p.eg.clone()).collect();
        let mut config = self.core.config().clone();
        config.id = new_id;
        config.proposer.proposer = megastore_types::ProposerId::client(new_id);
        config.seed = seed;
        self.core = super::restarted(&self.core, config);
        self.state = State::Idle;
        Some(self.two_phase_record(start, real, txn, groups, TwoPhaseOutcome::Unknown))
    }

    fn two_phase_record(
        &self,
        start: u64,
        end: u64,
        txn: TxnId,
        groups: Vec<EgId>,
        result: TwoPhaseOutcome,
    ) -> OpRecord {
        OpRecord {
            client: self.id,
            eg: groups[0].clone(),
            kind: OpKind::TwoPhase,
            start,
            end,
            outcome: Outcome::TwoPhase {
                txn,
                groups,
                result,
            },
        }
    }

    /// A step of a cross-group operation finished.
    pub(super) fn on_two_phase_done(
        &mut self,
        real: u64,
        now: Time,
        multi: Multi,
        result: OpResult,
    ) -> (Vec<OpRecord>, Vec<ClientOutput>) {
        match (multi, result) {
            (
                Multi::Reading {
                    start,
                    read_start,
                    groups,
                    mut parts,
                    ..
                },
                OpResult::Read(read),
            ) => {
                let eg = groups[parts.len()].clone();
                let outcome = match &read {
                    Ok(read) => super::read_outcome(&eg, read, None),
                    Err(_) => Outcome::Failed,
                };
                let record = OpRecord {
                    client: self.id,
                    eg: eg.clone(),
                    kind: OpKind::CurrentRead,
                    start: read_start,
                    end: real,
                    outcome,
                };
                let Ok(read) = read else {
                    return (vec![record], Vec::new());
                };
                let rows = self.some_rows(&eg);
                let read_keys = if self.rng.chance(0.7) {
                    rows.into_iter().collect()
                } else {
                    BTreeSet::new()
                };
                parts.push(Part {
                    eg,
                    read,
                    read_keys,
                });
                let out = if parts.len() < groups.len() {
                    self.read_next_group(real, now, start, groups, parts)
                } else {
                    self.commit_two_phase(real, now, start, parts)
                };
                (vec![record], out)
            }
            (
                Multi::Committing {
                    start,
                    commit_start,
                    txn,
                    parts,
                    prepared_ms,
                    ..
                },
                OpResult::TwoPhase { result, .. },
            ) => {
                let groups: Vec<EgId> = parts.iter().map(|p| p.eg.clone()).collect();
                match result {
                    TwoPhaseResult::Committed {
                        position, prepared, ..
                    } => {
                        let positions = std::iter::once(position).chain(prepared);
                        let mut records: Vec<OpRecord> = parts
                            .into_iter()
                            .zip(positions)
                            // A participant the decision did not wait for (a knob) has
                            // no entry of its own to pin.
                            .filter(|(_, position)| *position > Position::NONE)
                            .map(|(part, position)| OpRecord {
                                client: self.id,
                                eg: part.eg,
                                kind: OpKind::Commit,
                                start,
                                end: real,
                                outcome: Outcome::Committed {
                                    txn,
                                    position,
                                    read_position: part.read.position.unwrap_or(Position::NONE),
                                    read_keys: part.read_keys,
                                },
                            })
                            .collect();
                        // Dated from the commit call: what its latency is measured by.
                        records.push(self.two_phase_record(
                            commit_start,
                            real,
                            txn,
                            groups,
                            TwoPhaseOutcome::Committed,
                        ));
                        (records, Vec::new())
                    }
                    TwoPhaseResult::Aborted { .. } => {
                        let record = self.two_phase_record(
                            start,
                            real,
                            txn,
                            groups,
                            TwoPhaseOutcome::Aborted,
                        );
                        (vec![record], Vec::new())
                    }
                    TwoPhaseResult::Unknown { .. } => (
                        Vec::new(),
                        self.resolve_two_phase(now, start, txn, groups, prepared_ms, now),
                    ),
                }
            }
            (
                Multi::Resolving {
                    start,
                    txn,
                    groups,
                    prepared_ms,
                    since,
                    ..
                },
                OpResult::Decision(outcome),
            ) => {
                let result = match outcome {
                    DecideOutcome::Decided(Decision::Commit) => TwoPhaseOutcome::Committed,
                    DecideOutcome::Decided(Decision::Abort) => TwoPhaseOutcome::Aborted,
                    DecideOutcome::Undecided | DecideOutcome::Gone | DecideOutcome::Failed(_) => {
                        // As the client library does: until its resolve patience runs out.
                        if self.core.timeouts().keeps_resolving(now.since(since)) {
                            return (
                                Vec::new(),
                                self.resolve_two_phase(now, start, txn, groups, prepared_ms, since),
                            );
                        }
                        TwoPhaseOutcome::Unknown
                    }
                };
                (
                    vec![self.two_phase_record(start, real, txn, groups, result)],
                    Vec::new(),
                )
            }
            (Multi::Settling { eg, start, .. }, OpResult::Settled(result)) => {
                let outcome = match result {
                    Ok(settled) => Outcome::Settled {
                        committed: settled.committed,
                        aborted: settled.aborted,
                        left: settled.undecided + settled.failed,
                    },
                    Err(_) => Outcome::Failed,
                };
                let record = OpRecord {
                    client: self.id,
                    eg,
                    kind: OpKind::Settle,
                    start,
                    end: real,
                    outcome,
                };
                (vec![record], Vec::new())
            }
            (Multi::Collecting { eg, start, .. }, OpResult::Collected(result)) => {
                let outcome = match result {
                    Ok(done) => Outcome::Collected {
                        collected: done.collected,
                        kept: done.kept,
                        next: done.next,
                    },
                    Err(_) => Outcome::Failed,
                };
                let record = OpRecord {
                    client: self.id,
                    eg,
                    kind: OpKind::Collect,
                    start,
                    end: real,
                    outcome,
                };
                (vec![record], Vec::new())
            }
            (multi, result) => unreachable!("{multi:?} ended with {result:?}"),
        }
    }

    /// Commits the transaction over the groups it read (the first coordinates).
    fn commit_two_phase(
        &mut self,
        real: u64,
        now: Time,
        start: u64,
        parts: Vec<Part>,
    ) -> Vec<ClientOutput> {
        let txn = self.next_txn();
        let participants: Vec<Participant> = parts
            .iter()
            .map(|part| {
                let rows: Vec<Vec<u8>> = if part.read_keys.is_empty() {
                    self.some_rows(&part.eg)
                } else {
                    part.read_keys.iter().cloned().collect()
                };
                let mut reads = ReadSet::from(part.read_keys.clone());
                reads.saw_prepared(&part.read.prepared);
                Participant {
                    eg: part.eg.clone(),
                    read_position: part.read.position.unwrap_or(Position::NONE),
                    leader: part.read.next_leader,
                    writes: self.writes_of(now, &part.eg, &rows, txn),
                    reads,
                }
            })
            .collect();
        let prepared_ms = self.core.wall_ms(now);
        let (op, out) = self
            .core
            .commit_two_phase(now, txn, participants)
            .expect("the workload's cross-group transactions are well formed");
        self.two_phase_serial += 1;
        if !self.two_phase_only && self.rng.chance(0.25) {
            // Somewhere in its prepares or its decision (a round trip is at most
            // 140 ms here): its participants are then left prepared.
            self.planned_crash = Some(self.rng.below(400_000_000));
        }
        self.state = State::TwoPhase(Multi::Committing {
            op,
            start,
            commit_start: real,
            txn,
            parts,
            prepared_ms,
            serial: self.two_phase_serial,
        });
        out
    }

    fn resolve_two_phase(
        &mut self,
        now: Time,
        start: u64,
        txn: TxnId,
        groups: Vec<EgId>,
        prepared_ms: u64,
        since: Time,
    ) -> Vec<ClientOutput> {
        let facts = TxnFacts {
            prepared_ms,
            participants: groups.clone(),
        };
        let (op, out) = self
            .core
            .two_phase_decision(now, groups[0].clone(), txn, Some(facts));
        self.state = State::TwoPhase(Multi::Resolving {
            op,
            start,
            txn,
            groups,
            prepared_ms,
            since,
        });
        out
    }
}
