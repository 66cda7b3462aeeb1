//! **moves-keep-writes** (docs/protocol.md, "Placement"): when a move finishes, the
//! target's store holds everything the source's store holds of the range's groups —
//! every vote, promise, mark and row, mirrors included, and their registry and open
//! index rows (the global index rows are judged by global-index) — so every
//! acknowledged write (and every vote a quorum counted) survives the move. Checked at the moment the
//! operator's finishing placement is stored: from then on the target may serve, and
//! the source, frozen since before the final copy, will retire its copy. A target
//! that lost its store since is rejoining, and is judged by the rejoin checks instead.

use megastore_paxos::group_state_spans;
use megastore_rowstore::KeyRange;
use megastore_types::ReplicaId;

use crate::observation::Observation;

/// After the move of `groups` from the server at `from` to the server at `to`
/// finished.
pub(crate) fn on_move_finished(
    obs: &Observation<'_>,
    (from, to): (ReplicaId, ReplicaId),
    groups: &KeyRange,
    found: &mut Vec<(&'static str, String)>,
) {
    if obs.rejoining(to) {
        // The target lost its store after the copy: like any server that lost its
        // store, it votes on a group only once it cleared it (the rejoin rule).
        return;
    }
    for span in group_state_spans(groups) {
        let target = obs.latest_rows(to, &span);
        for row in obs.latest_rows(from, &span) {
            let held = target.iter().find(|t| t.key == row.key);
            let missing = row.cells.iter().find(|(column, cell)| {
                held.and_then(|t| t.cells.get(*column))
                    .is_none_or(|copy| copy.value != cell.value)
            });
            if let Some((column, _)) = missing {
                found.push((
                    "moves-keep-writes",
                    format!(
                        "a move from server {} to {} finished, but the target lacks the source's {:?} of row {:?}",
                        from.0,
                        to.0,
                        String::from_utf8_lossy(column),
                        String::from_utf8_lossy(&row.key),
                    ),
                ));
                return;
            }
        }
    }
}
