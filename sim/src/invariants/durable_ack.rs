//! Invariant 5, **durable-ack**: an acknowledged write is chosen at its position, and
//! stays so through any crash or restart (paper §4.6.3: the commit point); a write
//! answered or resolved as not committed is chosen nowhere. Checked at
//! the acknowledgement against the chosen log — which is read from the replicas'
//! durable state, so a value that a crash could lose is never "chosen" — and kept for
//! good by single-value.

use super::ChosenLog;
use crate::history::{OpRecord, Outcome};

/// A transaction answered as not committed — a conflict, nothing sent, or resolved
/// so — must be chosen nowhere: not when it was answered, and not later (a retry
/// would then apply it twice).
fn check_not_committed(
    chosen: &ChosenLog,
    record: &OpRecord,
    found: &mut Vec<(&'static str, String)>,
) {
    let (txn, how) = match &record.outcome {
        Outcome::ResolvedNotCommitted { txn, position } => {
            (txn, format!("{position}: resolved as not committed"))
        }
        Outcome::NotCommitted { txn } => (txn, "answered not committed".to_string()),
        _ => return,
    };
    let holds = chosen.positions_of(&record.eg, *txn);
    if !holds.is_empty() {
        found.push((
            "durable-ack",
            format!("{} {how}: {txn}, but it is chosen at {holds:?}", record.eg),
        ));
    }
}

/// After the run: no transaction resolved as not committed was chosen since.
pub(crate) fn check_history(
    chosen: &ChosenLog,
    history: &[OpRecord],
    found: &mut Vec<(&'static str, String)>,
) {
    for record in history {
        check_not_committed(chosen, record, found);
    }
}

pub(crate) fn on_op_done(
    chosen: &ChosenLog,
    record: &OpRecord,
    found: &mut Vec<(&'static str, String)>,
) {
    check_not_committed(chosen, record, found);
    let Outcome::Committed { txn, position, .. } = &record.outcome else {
        return;
    };
    match chosen.get(&record.eg, *position) {
        Some(entry) if entry.holds(*txn) => {}
        Some(entry) => found.push((
            "durable-ack",
            format!(
                "{} {position}: {txn} acknowledged, but {:?} is chosen",
                record.eg, entry.txn
            ),
        )),
        None => found.push((
            "durable-ack",
            format!(
                "{} {position}: {txn} acknowledged but not chosen",
                record.eg
            ),
        )),
    }
}
