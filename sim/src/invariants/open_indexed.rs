//! **open-is-indexed** (a replica with a bounded group cache): when a replica crashes,
//! every group whose durable state has work left — a log position held above `visible`,
//! or a visible one not applied (not on a witness) — is in its store's open index, so
//! the restarted replica, which loads only the listed groups, still finishes and looks
//! after it. Checked on what survives the crash (the synced state), for the groups
//! whose slot the server holds in the stored placement: a move's target, in the middle
//! of a copy, holds a range's group rows before the copy reaches its open index rows,
//! and serves none of it until a complete copy is made. Catches a listing written
//! after, or without, the state it lists.

use megastore_paxos::GroupList;
use megastore_paxos::cells::StoredGroup;
use megastore_paxos::{GroupLog, ProtocolBugs, root_row};
use megastore_types::ReplicaId;

use crate::observation::Observation;

pub(crate) fn check(obs: &Observation<'_>, r: ReplicaId, found: &mut Vec<(&'static str, String)>) {
    let Some(kind) = obs.topology.kind(obs.slot_of(r)) else {
        return;
    };
    let Some(store) = obs.store(r) else {
        return;
    };
    let listed = |which| {
        megastore_paxos::replica::list(store, which, None, usize::MAX).expect("memory store scans")
    };
    let open = listed(GroupList::Open);
    let slot = obs.slot_of(r);
    for eg in listed(GroupList::Registered) {
        if obs.holder(slot, &eg) != r {
            continue;
        }
        let row = megastore_rowstore::RowRead::read_row(
            store,
            &root_row(&eg),
            &megastore_rowstore::KeyRange::all(),
            megastore_rowstore::LATEST,
        )
        .expect("memory store reads");
        let Ok(stored) = StoredGroup::from_row(row.as_ref()) else {
            continue;
        };
        let group = GroupLog::load(eg.clone(), stored, Vec::new(), &ProtocolBugs::NONE, false);
        if group.unfinished(kind) && !open.contains(&eg) {
            found.push((
                "open-is-indexed",
                format!(
                    "replica {} crashed with work left in {eg} and no open index row for it",
                    r.0
                ),
            ));
        }
    }
}
