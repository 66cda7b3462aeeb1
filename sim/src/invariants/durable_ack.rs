//! Invariant 5, **durable-ack**: an acknowledged write is chosen at its position, and
//! stays so through any crash or restart (paper §4.6.3: the commit point). Checked at
//! the acknowledgement against the chosen log — which is read from the replicas'
//! durable state, so a value that a crash could lose is never "chosen" — and kept for
//! good by single-value.

use super::ChosenLog;
use crate::history::{OpRecord, Outcome};

pub(crate) fn on_op_done(
    chosen: &ChosenLog,
    record: &OpRecord,
    found: &mut Vec<(&'static str, String)>,
) {
    let Outcome::Committed { txn, position, .. } = &record.outcome else {
        return;
    };
    match chosen.get(&record.eg, *position) {
        Some(entry) if entry.txn == Some(*txn) => {}
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
