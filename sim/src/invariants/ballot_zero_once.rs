//! Invariant 2, **ballot-zero-once**: ballot 0 at (group, p) is granted at most once, by
//! `position_leader(p)` only, and the grant survives that replica's restart. Paper
//! §4.4.2: "the leader ... arbitrates which value may use proposal number 0".

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::ReplicaRequest;
use megastore_types::{EgId, Position, ReplicaId, TxnId};

use super::ChosenLog;
use crate::observation::Observation;

/// Every grant seen.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    granted: BTreeMap<(EgId, Position), BTreeSet<TxnId>>,
}

impl Grants {
    /// After a grant request was handled: what the replica durably granted at that
    /// position (its `grant:<p>` cell), whatever it replied.
    pub(crate) fn after_accept(
        &mut self,
        obs: &Observation<'_>,
        chosen: &ChosenLog,
        r: ReplicaId,
        request: &ReplicaRequest,
        found: &mut Vec<(&'static str, String)>,
    ) {
        let ReplicaRequest::Accept {
            eg,
            position,
            grant: true,
            ..
        } = request
        else {
            return;
        };
        let Some(txn) = obs.stored_grant(r, eg, *position) else {
            return;
        };
        let txns = self.granted.entry((eg.clone(), *position)).or_default();
        if !txns.insert(txn) {
            return; // seen before
        }
        if txns.len() > 1 {
            found.push((
                "ballot-zero-once",
                format!("{eg} {position}: ballot 0 granted to {txns:?}"),
            ));
        }
        let leader = chosen
            .get(eg, position.prev())
            .and_then(|prev| prev.next_leader);
        if leader != Some(obs.slot_of(r)) {
            found.push((
                "ballot-zero-once",
                format!("{eg} {position}: replica {} granted ballot 0, but position_leader is {leader:?}", r.0),
            ));
        }
    }
}
