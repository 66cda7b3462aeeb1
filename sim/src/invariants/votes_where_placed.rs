//! **votes-where-placed** (docs/protocol.md, "Voter changes"): a server votes for a
//! group's slot — promises at a prepare, or accepts — only while its own placement
//! gives it that slot of the group's range. A server whose slot was removed from a
//! range has retired the range's rows: were it to vote still, a proposer that counts
//! the old voter set could gather a majority with a member that forgot every promise
//! and vote it made. Removing a voter is safe exactly because the removed server
//! falls silent, so this is the property the removal leans on. Read from the
//! server's own placed core after the step (a placement arrives as a step of its own,
//! so it is the placement the step judged by).

use megastore_paxos::{ReplicaReply, ReplicaRequest};
use megastore_types::ReplicaId;

use crate::observation::Observation;

/// After the server at `r` handled `request` and replied `replies`.
pub(crate) fn check(
    obs: &Observation<'_>,
    r: ReplicaId,
    request: &ReplicaRequest,
    replies: &[ReplicaReply],
    found: &mut Vec<(&'static str, String)>,
) {
    let (eg, position, what) = match request {
        ReplicaRequest::Prepare { eg, position, .. } => (eg, *position, "promised"),
        ReplicaRequest::Accept { eg, position, .. } => (eg, *position, "accepted"),
        _ => return,
    };
    if super::voted(request.id(), replies) && obs.places_here(r, eg) == Some(false) {
        found.push((
            "votes-where-placed",
            format!(
                "server {} {what} {eg} at {position} as slot {}, which its placement does not give it",
                r.0,
                obs.slot_of(r).0
            ),
        ));
    }
}
