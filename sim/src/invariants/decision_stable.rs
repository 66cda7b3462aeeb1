//! **decision-stable**: a cross-group transaction's decision never changes once
//! recorded — in its coordinator group's chosen log, the first entry that writes its
//! decision row fixes it, and no later entry writes another value there or deletes it
//! (docs/protocol.md, "Two-phase commit"). What makes recovery safe: a participant told
//! "abort" by a recorded abort can never meet a commit decision later. Catches an abort
//! recorded without reading the decision row (`record-abort-blind`), which lands after
//! a commit decision.

use std::collections::BTreeMap;

use megastore_paxos::two_phase::{self, Decision};
use megastore_types::Position;

use super::ChosenLog;

pub(crate) fn check(chosen: &ChosenLog, found: &mut Vec<(&'static str, String)>) {
    for (eg, _) in chosen.groups() {
        let mut first: BTreeMap<Vec<u8>, (Option<Decision>, Position)> = BTreeMap::new();
        for (p, entry) in chosen.entries(eg) {
            for (row, decision) in two_phase::decisions_in(eg, entry) {
                match first.get(&row) {
                    None => {
                        first.insert(row, (decision, p));
                    }
                    Some((was, at)) if *was != decision => found.push((
                        "decision-stable",
                        format!(
                            "{eg} {p}: the decision at {} is now {decision:?}; it was {was:?}, recorded at {at}",
                            row.escape_ascii()
                        ),
                    )),
                    Some(_) => {}
                }
            }
        }
    }
}
