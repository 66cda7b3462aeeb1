//! Liveness, **global-index**: once faults are healed and writes stop, every full and
//! read-only replica's global index rows are exactly what its groups' mirrors hold —
//! each entry a group's mirror has is in the global index with the same value, and
//! no entry a mirror no longer has (deleted, or never written) is left there.
//! (docs/protocol.md, "Global indexes".) Catches an apply or a snapshot install that
//! does not copy a mirror write, or copies it wrong.

use std::collections::BTreeMap;

use megastore_paxos::{global_index_range, global_mirror_range, mirrored_global_row};
use megastore_types::ReplicaKind;

use super::ChosenLog;
use crate::observation::Observation;
use crate::workload::COLUMN;

pub(crate) fn check(
    obs: &Observation<'_>,
    chosen: &ChosenLog,
    found: &mut Vec<(&'static str, String)>,
) {
    // Per slot, at its home server: a slot whose ranges lie on several servers has its
    // global index split among them, which this check does not yet join (every server
    // is its slot's home so far).
    for info in obs.topology.replicas() {
        if info.kind == ReplicaKind::Witness {
            continue;
        }
        let mut mirrored: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for (eg, _) in chosen.groups() {
            for row in obs.latest_rows(info.id, &global_mirror_range(eg)) {
                if let (Some(global), Some(value)) =
                    (mirrored_global_row(eg, &row.key), row.value(COLUMN))
                {
                    mirrored.insert(global.to_vec(), value.to_vec());
                }
            }
        }
        let indexed: BTreeMap<Vec<u8>, Vec<u8>> = obs
            .latest_rows(info.id, &global_index_range())
            .into_iter()
            .filter_map(|row| Some((row.key.clone(), row.value(COLUMN)?.to_vec())))
            .collect();
        if indexed != mirrored {
            let stale = indexed.iter().find(|(k, v)| mirrored.get(*k) != Some(v));
            let missing = mirrored.iter().find(|(k, v)| indexed.get(*k) != Some(v));
            found.push((
                "global-index",
                format!(
                    "replica {}: its global index differs from its groups' mirrors ({} entries against {}); first stale entry {:?}, first missing {:?}",
                    info.id.0,
                    indexed.len(),
                    mirrored.len(),
                    stale.map(|(k, _)| k.escape_ascii().to_string()),
                    missing.map(|(k, _)| k.escape_ascii().to_string()),
                ),
            ));
        }
    }
}
