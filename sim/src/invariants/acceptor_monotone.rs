//! Invariant 8, **acceptor-monotone**: a voter never goes back on a ballot at a (group,
//! position) — across its restarts too. Once it promised b it answers no prepare at or
//! below b and accepts nothing below b; once it accepted b (answered so, or holds it in
//! its store) it promises nothing at or below b and accepts nothing below b, and the
//! ballot of its stored slot never decreases. This is the acceptor's half of Paxos
//! (Lamport, "Paxos Made Simple", P1a), and why the paper's acceptors keep their state in
//! the log row rather than in memory (§4.6).
//!
//! And what a restart would reload keeps those promises: an acceptor refuses accepts
//! below the ballots in its `promise:<p>` cells, so after every vote at p (and before
//! its reply leaves) that cell must be at least every nonzero ballot the voter promised
//! or accepted there, until the position is decided (visible) or truncated, when the
//! cell is dropped and no ballot matters any more. An acceptor that persisted part of what it answered breaks this
//! at once, before any crash shows it.
//!
//! The stored slot (until it is marked visible) counts even when no reply left (a crash right after the durable
//! write): a reader learning a position counts stored slots, so a slot that goes back
//! can turn a chosen value into an unchosen one. A voter whose store was lost (a wipe)
//! starts a new record: it rejoins by its own rule (no vote until it cleared the group,
//! then only above a floor), which the rejoin checks cover.
//!
//! Unlike single-value, this needs no second proposer to win with the forgotten ballot:
//! one late accept below the forgotten promise, taken after a restart, is enough to see
//! that the promise was lost.

use std::collections::BTreeMap;

use megastore_paxos::messages::ReplicaError;
use megastore_paxos::{ReplicaReply, ReplicaRequest};
use megastore_types::{Ballot, EgId, Position, ReplicaId};

use crate::observation::Observation;

/// What one voter committed itself to at one position.
#[derive(Debug, Default, Clone, Copy)]
struct Bound {
    /// The highest ballot it answered `Promised` to.
    promised: Option<Ballot>,
    /// The highest ballot it answered `Accepted` to, or held in its stored slot.
    accepted: Option<Ballot>,
}

/// Every voter's bound at every position, per store it had.
#[derive(Debug, Default)]
pub(crate) struct Bounds {
    bounds: BTreeMap<(ReplicaId, u32, EgId, Position), Bound>,
}

impl Bounds {
    /// After replica `r` handled `request` and sent `replies`.
    pub(crate) fn after_step(
        &mut self,
        obs: &Observation<'_>,
        r: ReplicaId,
        request: &ReplicaRequest,
        replies: &[ReplicaReply],
        found: &mut Vec<(&'static str, String)>,
    ) {
        let Some(wipes) = obs.wipes(r) else {
            return;
        };
        let (eg, position, ballot, is_prepare) = match request {
            ReplicaRequest::Prepare {
                eg,
                position,
                ballot,
                ..
            } => (eg, *position, *ballot, true),
            ReplicaRequest::Accept {
                eg,
                position,
                ballot,
                ..
            } => (eg, *position, *ballot, false),
            _ => return,
        };
        let id = request.id();
        // A server that refused for its placement (the slot's range is not its own, or
        // frozen) did not act as the voter: its store's state of the range is not the
        // slot's (it may have retired it), and the slot's holder is checked when it
        // votes.
        let not_its_own = replies.iter().any(|reply| {
            matches!(
                reply,
                ReplicaReply::Error {
                    id: reply_id,
                    error: ReplicaError::WrongServer { .. } | ReplicaError::Frozen { .. },
                } if *reply_id == id
            )
        });
        if not_its_own {
            return;
        }
        let answered_yes = super::voted(id, replies);
        // A visible slot is decided: it may carry the (lower) ballot the value was
        // chosen at, and no ballot matters there any more.
        let slot = obs.stored_slot(r, eg, position);
        let decided = slot.as_ref().is_some_and(|s| s.visible);
        let stored = slot.filter(|s| !s.visible).map(|s| s.ballot);
        let bound = self
            .bounds
            .entry((r, wipes, eg.clone(), position))
            .or_default();
        let before = *bound;
        let mut broken = Vec::new();
        if answered_yes {
            let what = if is_prepare { "promised" } else { "accepted" };
            let below_promise = before
                .promised
                .is_some_and(|p| if is_prepare { ballot <= p } else { ballot < p });
            let below_accepted = before
                .accepted
                .is_some_and(|a| if is_prepare { ballot <= a } else { ballot < a });
            if below_promise || below_accepted {
                broken.push(format!("{what} ballot {ballot:?}"));
            }
            if is_prepare {
                bound.promised = bound.promised.max(Some(ballot));
            } else {
                bound.accepted = bound.accepted.max(Some(ballot));
            }
        }
        let reloaded = obs.stored_promise(r, eg, position);
        let owed = bound.promised.max(bound.accepted).filter(|b| !b.is_zero());
        if let Some(owed) = owed
            && !decided
            && obs.stored_truncated(r, eg) < position
            && reloaded.is_none_or(|promise| promise < owed)
        {
            broken.push(format!(
                "would reload promise {reloaded:?} after a crash, below ballot {owed:?} it answered"
            ));
        }
        if let Some(stored) = stored {
            if before.accepted.is_some_and(|a| stored < a) {
                broken.push(format!("stores a slot of ballot {stored:?}"));
            }
            bound.accepted = bound.accepted.max(Some(stored));
        }
        for what in broken {
            found.push((
                "acceptor-monotone",
                format!(
                    "replica {} {what} at {eg} position {} after it had promised {:?} and \
                     accepted {:?} there",
                    r.0, position.0, before.promised, before.accepted
                ),
            ));
        }
    }
}
