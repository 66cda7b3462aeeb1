//! The start pass's listing of the other replicas' registries: how a replica back from
//! a restart finds the groups first written while it was down.
//!
//! Its own registry lists only the groups it ever persisted, so neither the registry
//! walk nor the loaded groups name a group whose every write came while it was away:
//! no later write reaches it either, and its snapshot and inconsistent reads showed such
//! a group empty for good. So after every start the sweep pages through each other
//! replica's registry ([`ReplicaRequest::ListGroups`]), one page of [`PAGE`] groups per
//! replica a sweep; the replica loads every group listed that it does not hold and
//! probes it ([`super::SweepAction::PeersHold`]), which catches it up or installs a
//! snapshot as for any group. A group a majority of voters accepted is registered at
//! one of the others at least, so listing every other replica finds every group
//! written while this one was down (a write it missed after its listing passed the
//! group's key reaches it as a lacking position, or the next start lists it).
//!
//! Placed, each slot is held by several servers, each holding some ranges' groups: a
//! replica lists every server that holds another slot in some range (as a global index
//! scan asks them), and skips the groups it does not serve.
//!
//! Invariant *listing-ends*: each registry's listing moves forward by the last group of
//! each full page and is over once a page comes back short, so the pass ends once
//! every other replica answered through its registry's end. A replica that does not
//! answer is asked again at each sweep after the RPC timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_placement::{Placement, ServerId};
use megastore_types::{EgId, NodeId, ReplicaId, Time, Topology};

use crate::messages::{Message, ReplicaRequest};

/// Groups asked of each registry at one sweep: as many as the start pass probes of its
/// own registry a sweep.
pub(crate) const PAGE: usize = super::sweep::DUE_PROBES_MAX;

/// Whom a listing asks: the slot it is sent to, and the server of the slot (`None`:
/// not placed, the slot's one server).
pub(crate) type Source = (ReplicaId, Option<ServerId>);

#[derive(Debug, Default)]
struct Listing {
    /// The last group listed so far (`None`: none yet).
    after: Option<EgId>,
    /// The request in flight and when it is given up on.
    asked: Option<(u64, Time)>,
    /// A page came back short: the registry's end.
    done: bool,
}

/// The other replicas' registries being listed since this replica started.
#[derive(Debug, Default)]
pub(crate) struct PeerListing {
    /// `None` until the first sweep decides whom to ask ([`PeerListing::start`]).
    listings: Option<BTreeMap<Source, Listing>>,
}

impl PeerListing {
    /// Whether the listing knows whom to ask.
    pub(crate) fn started(&self) -> bool {
        self.listings.is_some()
    }

    /// Lists these registries ([`sources`]).
    pub(crate) fn start(&mut self, sources: Vec<Source>) {
        let listings = sources.into_iter().map(|s| (s, Listing::default()));
        self.listings = Some(listings.collect());
    }

    /// A sweep: asks each registry not yet listed to its end for its next page, unless
    /// a request to it is in flight and not yet timed out (`next_id`: a fresh request
    /// id).
    pub(crate) fn on_sweep(
        &mut self,
        now: Time,
        rpc_timeout: Duration,
        mut next_id: impl FnMut() -> u64,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let Some(listings) = &mut self.listings else {
            return;
        };
        for (&(slot, server), listing) in listings.iter_mut() {
            let waiting = listing.asked.is_some_and(|(_, deadline)| deadline > now);
            if listing.done || waiting {
                continue;
            }
            let id = next_id();
            listing.asked = Some((id, now + rpc_timeout));
            let request = ReplicaRequest::ListGroups {
                id,
                after: listing.after.clone(),
                limit: PAGE,
                server,
            };
            sends.push((NodeId::Replica(slot), Message::ReplicaRequest(request)));
        }
    }

    /// Whether `groups`, the answer to request `id`, is a page of the listing (the
    /// caller then loads and probes those it does not hold); a late answer to a request
    /// given up on is not.
    pub(crate) fn on_groups(&mut self, id: u64, groups: &[EgId]) -> bool {
        let Some(listing) = self.listings.as_mut().and_then(|listings| {
            listings
                .values_mut()
                .find(|l| l.asked.is_some_and(|(asked, _)| asked == id))
        }) else {
            return false;
        };
        listing.asked = None;
        if let Some(last) = groups.last() {
            debug_assert!(
                listing.after.as_ref().is_none_or(|after| last > after),
                "listing-ends: a page moves the listing forward"
            );
            listing.after = Some(last.clone());
        }
        listing.done = groups.len() < PAGE;
        true
    }

    /// Whether every registry was listed to its end.
    pub(crate) fn over(&self) -> bool {
        self.listings
            .as_ref()
            .is_some_and(|listings| listings.values().all(|l| l.done))
    }
}

/// The registries replica `me` lists: every other replica's of `topology` — by the
/// placement, every server holding another slot in some range.
pub(crate) fn sources(
    topology: &Topology,
    me: ReplicaId,
    placement: Option<&Placement>,
) -> Vec<Source> {
    let others = topology
        .replicas()
        .iter()
        .map(|r| r.id)
        .filter(|r| *r != me);
    others
        .flat_map(|slot| match placement {
            Some(placement) => placement
                .servers_of_slot(slot)
                .into_iter()
                .map(|server| (slot, Some(server)))
                .collect(),
            None => vec![(slot, None)],
        })
        .collect()
}
