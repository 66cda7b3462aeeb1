//! Invariant 4, **vouched-is-current**: a replica whose coordinator vouches for a group
//! holds every visible position of it. Paper §4.4.1 ("the coordinator ... tracks the set
//! of entity groups for which its replica has observed all Paxos writes") and §4.7.2
//! (the validate/invalidate races and epochs).

use std::collections::BTreeMap;

use megastore_types::{EgId, Position, ReplicaId, ReplicaKind};

use super::{ChosenLog, holds};
use crate::observation::Observation;

/// How far each server's log is known to hold the chosen values without a gap (by
/// address).
#[derive(Debug, Default)]
pub(crate) struct HeldPrefixes {
    held: BTreeMap<(ReplicaId, EgId), Position>,
}

impl HeldPrefixes {
    pub(crate) fn check(
        &mut self,
        obs: &Observation<'_>,
        chosen: &ChosenLog,
        found: &mut Vec<(&'static str, String)>,
    ) {
        // Every server of every full slot: its coordinator vouches for its own store.
        let full: Vec<ReplicaId> = obs
            .topology
            .of_kind(ReplicaKind::Full)
            .flat_map(|slot| obs.servers_of(slot).collect::<Vec<_>>())
            .collect();
        for (eg, visible) in chosen.groups() {
            for &r in &full {
                if !obs.coordinator_vouches(r, eg) {
                    continue;
                }
                let held = self.held.entry((r, eg.clone())).or_default();
                while *held < visible && holds(obs, chosen, r, eg, held.next()) {
                    *held = held.next();
                }
                if *held < visible {
                    found.push((
                        "vouched-is-current",
                        format!("coordinator {} vouches for {eg}, but its replica lacks {} (visible through {visible})", r.0, held.next()),
                    ));
                }
            }
        }
    }
}
