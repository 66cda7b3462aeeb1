//! **decision-stable**: a cross-group transaction's decision never changes once
//! recorded — in its coordinator group's chosen log, the first entry that writes its
//! decision row fixes it; a later entry may only delete it (its collection, once the
//! transaction is finished everywhere), and after that no entry writes it again
//! (docs/protocol.md, "Two-phase commit"). What makes recovery safe: a participant told
//! "abort" by a recorded abort can never meet a commit decision later, and a finished
//! transaction is never decided afresh — except an aborted one recorded abort again (a
//! prepare whose client never learned its outcome can land after the collection; the
//! decision is the same). Catches an abort recorded without reading the decision row
//! (`record-abort-blind`), which lands after a commit decision, and an absent decision
//! trusted without a record read pending after it (`trust-absent-decision`), which
//! records abort after a collected commit.

use std::collections::BTreeMap;

use megastore_paxos::two_phase::{self, Decision};
use megastore_types::Position;

use super::ChosenLog;

pub(crate) fn check(chosen: &ChosenLog, found: &mut Vec<(&'static str, String)>) {
    for (eg, _) in chosen.groups() {
        // Per decision row: its first decision and where, and where it was collected.
        let mut seen: BTreeMap<Vec<u8>, (Option<Decision>, Position, Option<Position>)> =
            BTreeMap::new();
        for (p, entry) in chosen.entries(eg) {
            for (row, decision) in two_phase::decisions_in(eg, entry) {
                let name = row.escape_ascii().to_string();
                match seen.get_mut(&row) {
                    None if decision.is_none() => found.push((
                        "decision-stable",
                        format!("{eg} {p}: the decision at {name} is collected, never recorded"),
                    )),
                    None => {
                        seen.insert(row, (decision, p, None));
                    }
                    // A prepare whose outcome its client never learned can land after
                    // the collector read its record absent (only of a transaction
                    // decided abort: commit waits for every prepare); whoever meets
                    // that record records abort again — the same decision.
                    Some((Some(Decision::Abort), _, Some(_)))
                        if decision == Some(Decision::Abort) || decision.is_none() => {}
                    Some((was, at, Some(collected))) => found.push((
                        "decision-stable",
                        format!(
                            "{eg} {p}: the decision at {name} is written ({decision:?}) after its collection at {collected}; it was {was:?}, recorded at {at}"
                        ),
                    )),
                    Some((_, _, collected)) if decision.is_none() => *collected = Some(p),
                    Some((was, at, None)) if *was != decision => found.push((
                        "decision-stable",
                        format!(
                            "{eg} {p}: the decision at {name} is now {decision:?}; it was {was:?}, recorded at {at}"
                        ),
                    )),
                    Some(_) => {}
                }
            }
        }
    }
}
