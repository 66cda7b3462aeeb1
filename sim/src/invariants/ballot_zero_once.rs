//! Invariant 2, **ballot-zero-once**: ballot 0 at (group, p) holds one value, granted
//! by `position_leader(p)` only, and that value survives every replica's restart. Paper
//! §4.4.2: "the leader ... arbitrates which value may use proposal number 0".
//!
//! Checked on the durable state: after each accept at ballot 0, the value the replica's
//! store holds at ballot 0 there (its `log:<p>` cell) must be the first one any store
//! was seen holding at ballot 0 at that position. A grant is durable only as that slot
//! (a replica keeps its grants in memory), so a grant forgotten in a restart and given
//! to another transaction shows as a second value.

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::{LogEntry, ReplicaReply, ReplicaRequest};
use megastore_types::{EgId, Position, ReplicaId};

use super::ChosenLog;
use crate::observation::Observation;

/// Every ballot-0 value and grant seen.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    /// The first value seen at ballot 0 at each position, in any replica's store.
    ballot_zero: BTreeMap<(EgId, Position), LogEntry>,
    /// The positions whose grant was seen answered.
    granted: BTreeSet<(EgId, Position)>,
}

impl Grants {
    /// After an accept at ballot 0 was handled: what the replica durably holds at ballot
    /// 0 there, whatever it replied; and for a grant it answered accepted, who gave it.
    pub(crate) fn after_accept(
        &mut self,
        obs: &Observation<'_>,
        chosen: &ChosenLog,
        r: ReplicaId,
        request: &ReplicaRequest,
        replies: &[ReplicaReply],
        found: &mut Vec<(&'static str, String)>,
    ) {
        let ReplicaRequest::Accept {
            id,
            eg,
            position,
            ballot,
            grant,
            ..
        } = request
        else {
            return;
        };
        if !ballot.is_zero() {
            return;
        }
        let Some(slot) = obs
            .stored_slot(r, eg, *position)
            .filter(|slot| slot.ballot.is_zero())
        else {
            return;
        };
        let key = (eg.clone(), *position);
        match self.ballot_zero.get(&key) {
            Some(first) if *first != slot.entry => found.push((
                "ballot-zero-once",
                format!(
                    "{eg} {position}: replica {} holds transaction {:?} at ballot 0, where {:?} was held",
                    r.0, slot.entry.txn, first.txn
                ),
            )),
            Some(_) => {}
            None => {
                self.ballot_zero.insert(key.clone(), slot.entry);
            }
        }
        let answered_granted = *grant
            && replies.iter().any(|reply| {
                matches!(reply, ReplicaReply::Accept { id: reply_id, result } if reply_id == id && result.accepted())
            });
        if !answered_granted || !self.granted.insert(key) {
            return;
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
