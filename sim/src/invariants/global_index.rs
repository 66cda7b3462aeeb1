//! Liveness, **global-index**: once faults are healed and writes stop, every full and
//! read-only replica server's global index rows are exactly what the mirrors of the
//! groups in its store hold — each entry a group's mirror has is in the global index
//! with the same value, and no entry a mirror no longer has (deleted, or never
//! written, or its group moved away) is left there.
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
    // Per server: a slot whose ranges lie on several servers (a home and its spare) has
    // its global index split among them, each server's holding the entries of the
    // groups in its store (a move's copy brings a range's entries, its retirement
    // takes them away).
    let servers = obs
        .topology
        .replicas()
        .iter()
        .filter(|info| info.kind != ReplicaKind::Witness)
        .flat_map(|info| obs.servers_of(info.id));
    for server in servers {
        let mut mirrored: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for (eg, _) in chosen.groups() {
            for row in obs.latest_rows(server, &global_mirror_range(eg)) {
                if let (Some(global), Some(value)) =
                    (mirrored_global_row(eg, &row.key), row.value(COLUMN))
                {
                    mirrored.insert(global.to_vec(), value.to_vec());
                }
            }
        }
        let indexed: BTreeMap<Vec<u8>, Vec<u8>> = obs
            .latest_rows(server, &global_index_range())
            .into_iter()
            .filter_map(|row| Some((row.key.clone(), row.value(COLUMN)?.to_vec())))
            .collect();
        if indexed != mirrored {
            let stale = indexed.iter().find(|(k, v)| mirrored.get(*k) != Some(v));
            let missing = mirrored.iter().find(|(k, v)| indexed.get(*k) != Some(v));
            found.push((
                "global-index",
                format!(
                    "server {} (replica {}): its global index differs from its groups' mirrors ({} entries against {}); first stale entry {:?}, first missing {:?}",
                    server.0,
                    obs.slot_of(server).0,
                    indexed.len(),
                    mirrored.len(),
                    stale.map(|(k, _)| k.escape_ascii().to_string()),
                    missing.map(|(k, _)| k.escape_ascii().to_string()),
                ),
            ));
        }
    }
}
