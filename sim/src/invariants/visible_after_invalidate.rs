//! Invariant 3, **visible-after-invalidate**: a position is returned to any client (write
//! acknowledgement or read) only after every full replica has accepted it or no longer
//! has a coordinator vouching for the group. Paper §4.6.3 ("before a write is committed
//! and ready to apply, all full replicas must have accepted or had their coordinator
//! invalidated") and §4.7.

use megastore_types::ReplicaKind;

use super::{ChosenLog, holds};
use crate::history::OpRecord;
use crate::observation::Observation;

pub(crate) fn on_op_done(
    obs: &Observation<'_>,
    chosen: &ChosenLog,
    record: &OpRecord,
    found: &mut Vec<(&'static str, String)>,
) {
    let Some(p) = record.pinned_position().filter(|p| p.0 > 0) else {
        return;
    };
    for slot in obs.topology.of_kind(ReplicaKind::Full) {
        // Every server of the slot: whichever holds it, a coordinator that vouches must
        // sit beside a store that has the position.
        for r in obs.servers_of(slot) {
            if !holds(obs, chosen, r, &record.eg, p) && obs.coordinator_vouches(r, &record.eg) {
                found.push((
                    "visible-after-invalidate",
                    format!(
                        "{} {p} returned to client {} ({:?}) while replica {} (server at {}) lacks it and its coordinator vouches",
                        record.eg, record.client.0, record.kind, slot.0, r.0
                    ),
                ));
            }
        }
    }
}
