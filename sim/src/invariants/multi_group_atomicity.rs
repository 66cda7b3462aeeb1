//! **multi-group-atomicity**: a transaction across groups takes effect in all of its
//! groups or in none (docs/protocol.md, "Two-phase commit"; megastore-spec §2.4), judged
//! from the chosen logs and the clients' history:
//!
//! - decided commit (its coordinator group chose the `commit` decision) only if every
//!   other participant chose its prepare; a participant applies its staged writes (its
//!   finish) only if the decision is commit, and drops them only if it is abort;
//! - while it is prepared in a group (from its prepare to its finish), no other entry
//!   there writes a row it read or writes, and no transaction that read a row it writes
//!   commits there: its locks hold;
//! - no current read of a participant that began once the commit could be known —
//!   acknowledged, or seen by a current read of the coordinator group — misses its
//!   writes there (it is at or after the finish);
//! - and a transaction that ended fifteen seconds or more before the end of the run
//!   (five before clients stop) is finished in every group that prepared it: no
//!   prepared record blocks for ever.
//!
//! Catches a decision that does not wait for every prepare (`decide-before-all-
//! prepared`), a recovery that aborts a participant without recording abort first
//! (`abort-without-recording`), commits that ignore the locks
//! (`ignore-prepared-on-commit`), and current reads that do not settle what they meet
//! (`read-ignores-prepared`).

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::two_phase::{self, Decision, Prepared, Record};
use megastore_paxos::{LogEntry, RowWrite};
use megastore_rowstore::KeyRange;
use megastore_types::{EgId, Position, TxnId};

use super::ChosenLog;
use crate::history::{OpKind, OpRecord, Outcome, TwoPhaseOutcome};

/// How long before the end of the run a transaction must have ended for the check that
/// it is finished everywhere: clients start operations until ten seconds before the
/// end, the prepared timeout is at most 1.5 s here, and clients settle random groups
/// all the time.
const FINISHED_WITHIN_NS: u64 = 15_000_000_000;

/// One transaction's prepare in one group.
struct Prepare {
    at: Position,
    record: Record,
    /// Where it finished, and whether that applied its writes.
    finish: Option<(Position, bool)>,
}

/// What the chosen logs say of every cross-group transaction.
#[derive(Default)]
struct Transactions {
    prepares: BTreeMap<TxnId, BTreeMap<EgId, Prepare>>,
    /// Per transaction, its coordinator group and the decision chosen first (with its
    /// position).
    decisions: BTreeMap<TxnId, (EgId, Decision, Position)>,
    groups: BTreeMap<TxnId, BTreeSet<EgId>>,
}

/// The record a prepare write stages.
fn record_of_write(eg: &EgId, write: &RowWrite) -> Option<Record> {
    Record::of_write(eg, write)
}

impl Transactions {
    fn gather(chosen: &ChosenLog, history: &[OpRecord]) -> Self {
        let mut all = Self::default();
        for op in history {
            if let Outcome::TwoPhase { txn, groups, .. } = &op.outcome {
                all.groups
                    .entry(*txn)
                    .or_default()
                    .extend(groups.iter().cloned());
            }
        }
        let groups: Vec<EgId> = chosen.groups().map(|(eg, _)| eg.clone()).collect();
        // Prepares first (a finish names its transaction only by its record's row).
        for eg in &groups {
            for (p, entry) in chosen.entries(eg) {
                for write in &entry.writes {
                    let Some(record) = two_phase::records_range(eg)
                        .contains(&write.row)
                        .then(|| record_of_write(eg, write))
                        .flatten()
                    else {
                        continue;
                    };
                    let txn = record.prepared.txn;
                    all.groups
                        .entry(txn)
                        .or_default()
                        .extend(record.prepared.participants.iter().cloned());
                    all.prepares.entry(txn).or_default().insert(
                        eg.clone(),
                        Prepare {
                            at: p,
                            record,
                            finish: None,
                        },
                    );
                }
            }
        }
        let by_row: BTreeMap<(EgId, Vec<u8>), TxnId> = all
            .prepares
            .iter()
            .flat_map(|(txn, groups)| {
                groups
                    .keys()
                    .map(move |eg| ((eg.clone(), two_phase::record_row(eg, *txn)), *txn))
            })
            .collect();
        for eg in &groups {
            for (p, entry) in chosen.entries(eg) {
                for (row, applied) in two_phase::finished_in(eg, entry) {
                    if let Some(txn) = by_row.get(&(eg.clone(), row))
                        && let Some(prepare) = all.prepares.get_mut(txn).and_then(|g| g.get_mut(eg))
                        && prepare.finish.is_none()
                    {
                        prepare.finish = Some((p, applied));
                    }
                }
            }
        }
        // Decisions: the coordinator is the first participant.
        let txns: Vec<(TxnId, EgId)> = all
            .prepares
            .iter()
            .filter_map(|(txn, g)| {
                Some((*txn, g.values().next()?.record.prepared.coordinator.clone()))
            })
            .chain(history.iter().filter_map(|op| match &op.outcome {
                Outcome::TwoPhase { txn, groups, .. } => Some((*txn, groups.first()?.clone())),
                _ => None,
            }))
            .collect();
        for (txn, coordinator) in txns {
            if all.decisions.contains_key(&txn) {
                continue;
            }
            let row = two_phase::decision_row(&coordinator, txn);
            let first = chosen.entries(&coordinator).find_map(|(p, entry)| {
                two_phase::decisions_in(&coordinator, entry)
                    .into_iter()
                    .find(|(r, _)| *r == row)
                    .and_then(|(_, d)| d.map(|d| (d, p)))
            });
            if let Some((decision, p)) = first {
                all.decisions.insert(txn, (coordinator, decision, p));
            }
        }
        all
    }
}

fn locked_for_writers(prepared: &Prepared, row: &[u8]) -> bool {
    prepared.writes.contains(row)
        || prepared.read_rows.contains(row)
        || prepared.read_ranges.iter().any(|(start, end)| {
            KeyRange {
                start: start.clone(),
                end: end.clone(),
            }
            .contains(row)
        })
}

/// Entries of `eg` strictly between `from` and `to` (or to the end).
fn between<'a>(
    chosen: &'a ChosenLog,
    eg: &'a EgId,
    from: Position,
    to: Option<Position>,
) -> impl Iterator<Item = (Position, &'a LogEntry)> + 'a {
    chosen
        .entries(eg)
        .filter(move |(p, _)| *p > from && to.is_none_or(|to| *p < to))
}

pub(crate) fn check(
    chosen: &ChosenLog,
    history: &[OpRecord],
    end: u64,
    found: &mut Vec<(&'static str, String)>,
) {
    let mut violation = |detail: String| found.push(("multi-group-atomicity", detail));
    let all = Transactions::gather(chosen, history);
    for (txn, groups) in &all.groups {
        let decision = all.decisions.get(txn);
        let prepares = all.prepares.get(txn);
        let prepared_in = |eg: &EgId| prepares.and_then(|p| p.get(eg));
        if let Some((coordinator, Decision::Commit, at)) = decision {
            for eg in groups.iter().filter(|eg| *eg != coordinator) {
                if prepared_in(eg).is_none() {
                    violation(format!(
                        "{txn} decided commit in {coordinator} at {at}, but {eg} never prepared it"
                    ));
                }
            }
        }
        for (eg, prepare) in prepares.into_iter().flatten() {
            let Some((finished_at, applied)) = prepare.finish else {
                continue;
            };
            let says = decision.map(|(_, d, _)| *d);
            if applied && says != Some(Decision::Commit) {
                violation(format!(
                    "{txn} applied in {eg} at {finished_at}, but its decision is {says:?}"
                ));
            }
            if !applied && !prepare.record.staged.is_empty() && says != Some(Decision::Abort) {
                violation(format!(
                    "{txn} dropped in {eg} at {finished_at}, but its decision is {says:?}"
                ));
            }
        }
    }
    // Its locks hold from its prepare to its finish.
    for (txn, prepares) in &all.prepares {
        for (eg, prepare) in prepares {
            let finish = prepare.finish.map(|(p, _)| p);
            let prepared = &prepare.record.prepared;
            for (q, entry) in between(chosen, eg, prepare.at, finish) {
                if let Some(row) = entry
                    .written_rows()
                    .find(|row| locked_for_writers(prepared, row))
                {
                    violation(format!(
                        "{eg} {q}: {:?} wrote {} while {txn} (prepared at {}) held it",
                        entry.txn,
                        row.escape_ascii(),
                        prepare.at
                    ));
                }
            }
            for op in history {
                let Outcome::Committed {
                    txn: other,
                    position,
                    read_position,
                    read_keys,
                } = &op.outcome
                else {
                    continue;
                };
                if op.eg != *eg || other == txn {
                    continue;
                }
                // Committed after the prepare and before the finish: it went after the
                // prepare (a rebase over it, or a read after it) — so it must not
                // have read what the prepared transaction writes.
                let during = *position > prepare.at && finish.is_none_or(|f| *position < f);
                if during && let Some(row) = read_keys.iter().find(|r| prepared.writes.contains(*r))
                {
                    violation(format!(
                        "{eg}: {other} read {} (at {read_position}), which {txn} (prepared at {}) writes, and committed at {position} before it finished",
                        row.escape_ascii(),
                        prepare.at
                    ));
                }
            }
        }
    }
    // Current reads that began once its commit could be known — acknowledged, or seen by
    // a current read of its coordinator group at or after its decision — see its writes.
    let mut known: BTreeMap<TxnId, u64> = BTreeMap::new();
    let mut learn = |txn: TxnId, at: u64| {
        let t = known.entry(txn).or_insert(at);
        *t = (*t).min(at);
    };
    for op in history {
        if let (
            OpKind::TwoPhase,
            Outcome::TwoPhase {
                txn,
                result: TwoPhaseOutcome::Committed,
                ..
            },
        ) = (op.kind, &op.outcome)
        {
            learn(*txn, op.end);
        }
    }
    for (txn, (coordinator, decision, at)) in &all.decisions {
        if *decision != Decision::Commit {
            continue;
        }
        for op in history {
            if let (
                OpKind::CurrentRead,
                Outcome::Read {
                    position: Some(p), ..
                },
            ) = (op.kind, &op.outcome)
                && op.eg == *coordinator
                && p >= at
            {
                learn(*txn, op.end);
            }
        }
    }
    for (txn, since) in &known {
        for (eg, prepare) in all.prepares.get(txn).into_iter().flatten() {
            if prepare.record.staged.is_empty() {
                continue;
            }
            for op in history {
                let Outcome::Read {
                    position: Some(p), ..
                } = &op.outcome
                else {
                    continue;
                };
                if op.kind != OpKind::CurrentRead || op.eg != *eg || op.start <= *since {
                    continue;
                }
                if prepare.finish.is_none_or(|(f, _)| *p < f) {
                    violation(format!(
                        "{eg}: a current read by client {} at {p}, begun after {txn}'s commit was known, misses its writes (finished at {:?})",
                        op.client.0,
                        prepare.finish.map(|(f, _)| f)
                    ));
                }
            }
        }
    }
    // No prepared record blocks for ever.
    for op in history {
        let Outcome::TwoPhase { txn, .. } = &op.outcome else {
            continue;
        };
        if op.end + FINISHED_WITHIN_NS > end {
            continue;
        }
        for (eg, prepare) in all.prepares.get(txn).into_iter().flatten() {
            if prepare.finish.is_none() {
                violation(format!(
                    "{txn} is still prepared in {eg} (since {}) at the end of the run",
                    prepare.at
                ));
            }
        }
    }
}
