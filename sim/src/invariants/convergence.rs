//! Liveness, **convergence**: once faults are healed and writes stop, every replica
//! catches up — every full and read-only replica applies, and every witness holds,
//! every position visible anywhere. (Conventions 11: the liveness phase requires
//! convergence and service.) Catches a sweep that stalls, or a truncation that runs
//! ahead of a replica that still needed the log.

use megastore_paxos::cells::{APPLIED, VISIBLE};
use megastore_types::ReplicaKind;

use super::ChosenLog;
use crate::observation::Observation;

pub(crate) fn check(
    obs: &Observation<'_>,
    chosen: &ChosenLog,
    found: &mut Vec<(&'static str, String)>,
) {
    for (eg, visible) in chosen.groups() {
        for info in obs.topology.replicas() {
            if !obs.in_replica_set(info.id, eg) {
                // Removed from the group's range: it keeps nothing of the group.
                continue;
            }
            let (column, what) = if info.kind == ReplicaKind::Witness {
                (VISIBLE, "holds")
            } else {
                (APPLIED, "applied")
            };
            let reached = obs.stored_watermark(obs.holder(info.id, eg), eg, column);
            if reached < visible {
                found.push((
                    "convergence",
                    format!(
                        "replica {} {what} {eg} only through {reached}; {visible} is visible",
                        info.id.0
                    ),
                ));
            }
        }
    }
}
