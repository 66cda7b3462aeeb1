//! Liveness, **decisions-collected**: cross-group transactions' decision rows do not
//! pile up. Every decision row carries the facts its collection needs, and by the
//! run's end the row of every transaction *finished* early enough — its decision
//! written, and no record of it left in any participant, both before a time the world
//! leaves room after for the sweeps to look at it (twice its retention and more) — is
//! collected (docs/protocol.md, "Two-phase commit", collection). Judged on the chosen
//! logs' final rows, the ground truth every converged replica holds, with when each
//! position was first seen chosen. How long finishing takes is not judged here:
//! records left pending are multi-group-atomicity's ("nothing stays prepared for
//! ever"). Catches a collector that never finds a row old enough
//! (`retention-unit-slip`), and a collection pass that forgets the rows it kept
//! (`forget-kept-decisions`).

use std::collections::BTreeMap;

use megastore_paxos::two_phase::{
    decisions_range, facts_of, record_row, two_phase_range, txn_of_decision_row,
};
use megastore_paxos::{CellWrite, RowWrite};
use megastore_types::{EgId, Position};

use super::ChosenLog;

/// A group's two-phase rows after its last visible position.
#[derive(Default)]
struct Rows {
    /// Row → column → value, for the rows left.
    left: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Every row ever written → the last position that wrote it.
    written_at: BTreeMap<Vec<u8>, Position>,
}

/// Checks every decision row of the final state: `finished_before` is the real time
/// (ns) before which a finished transaction's row must be gone.
pub(crate) fn check(
    chosen: &ChosenLog,
    finished_before: u64,
    found: &mut Vec<(&'static str, String)>,
) {
    let finals: BTreeMap<&EgId, Rows> = chosen
        .groups()
        .filter_map(|(eg, last)| Some((eg, final_rows(chosen, eg, last)?)))
        .collect();
    // When the last write of `row` in `eg` was chosen (0: never written); none when it
    // is still there, or the checker cannot tell.
    let gone_since = |eg: &EgId, row: &[u8]| -> Option<u64> {
        let rows = finals.get(eg)?;
        if rows.left.contains_key(row) {
            return None;
        }
        match rows.written_at.get(row) {
            None => Some(0),
            Some(p) => chosen.chosen_at(eg, *p),
        }
    };
    for (eg, rows) in &finals {
        let decisions = decisions_range(eg);
        for (key, cells) in &rows.left {
            if !decisions.contains(key) {
                continue;
            }
            let Some(txn) = txn_of_decision_row(eg, key) else {
                continue;
            };
            let Some(facts) = facts_of(&as_row(key, cells)) else {
                // Every decision the protocol writes carries its facts: without them the
                // row can never be collected.
                found.push((
                    "decisions-collected",
                    format!("{eg}: the decision of {txn} has no facts"),
                ));
                continue;
            };
            let Some(written) = rows
                .written_at
                .get(key)
                .and_then(|p| chosen.chosen_at(eg, *p))
            else {
                continue;
            };
            let finished = facts
                .recorded_in()
                .iter()
                .map(|participant| gone_since(participant, &record_row(participant, txn)))
                .try_fold(written, |latest, gone| Some(latest.max(gone?)));
            if let Some(finished) = finished.filter(|at| *at < finished_before) {
                found.push((
                    "decisions-collected",
                    format!(
                        "{eg}: the decision of {txn} (prepared at {} ms) is never collected; it was finished everywhere at {:.3}s",
                        facts.prepared_ms,
                        finished as f64 / 1e9
                    ),
                ));
            }
        }
    }
}

/// The two-phase rows of `eg` after positions `1..=last`, or `None` if some position
/// was never seen chosen.
fn final_rows(chosen: &ChosenLog, eg: &EgId, last: Position) -> Option<Rows> {
    let range = two_phase_range(eg);
    let mut rows = Rows::default();
    for (p, write) in chosen.writes_through(eg, last, |row| range.contains(row))? {
        rows.written_at.insert(write.row.clone(), p);
        let cells = rows.left.entry(write.row.clone()).or_default();
        for cell in &write.cells {
            match cell {
                CellWrite::Set { column, value } => {
                    cells.insert(column.clone(), value.clone());
                }
                CellWrite::Delete { column } => {
                    cells.remove(column);
                }
            }
        }
        if cells.is_empty() {
            rows.left.remove(&write.row);
        }
    }
    Some(rows)
}

/// The row `cells` make, as a replica would read it.
fn as_row(key: &[u8], cells: &BTreeMap<Vec<u8>, Vec<u8>>) -> megastore_rowstore::Row {
    RowWrite {
        row: key.to_vec(),
        cells: cells
            .iter()
            .map(|(column, value)| CellWrite::Set {
                column: column.clone(),
                value: value.clone(),
            })
            .collect(),
    }
    .as_row(0)
}
