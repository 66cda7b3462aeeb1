//! What the checkers see of a run: the replicas' durable stores, what each
//! coordinator would vouch for at this moment, the topology, the time and the
//! clients' finished operations — read-only, and nothing a protocol core believes
//! about its own progress (a core's memory is checked against the stores, never
//! trusted).
//!
//! Servers and slots (`world/routing.rs`): a store or a coordinator is read by its
//! server's *address*; a checker that asks about a *slot* — the replica the groups'
//! logs know — finds the servers holding it with [`Observation::servers_of`], or the
//! one the stored placement names for a group with [`Observation::holder`]. Every
//! server so far is its slot's home, whose address is the slot's id.

use std::collections::BTreeMap;

use megastore_paxos::cells::{
    APPLIED, SlotRecord, TRUNCATED, VISIBLE, log_column, promise_column, stored_visible,
};
use megastore_paxos::root_row;
use megastore_placement::{Placement, Span};
use megastore_rowstore::{KeyRange, LATEST, Row, RowRead, ScanOptions};
use megastore_types::{Ballot, EgId, NodeId, Position, ReplicaId, Topology};

use crate::clock::Clock;
use crate::history::OpRecord;
use crate::nodes::{CoordinatorNode, ReplicaNode};

/// One moment of a run, as a checker may look at it.
pub struct Observation<'a> {
    /// Real time (ns since the start).
    pub now: u64,
    /// The run's replicas, their kinds and sites.
    pub topology: &'a Topology,
    /// Every finished client operation so far.
    pub history: &'a [OpRecord],
    /// At the run's end: the real time (ns) before which every cross-group transaction
    /// finished everywhere must have its decision collected (*decisions-collected*);
    /// none without two-phase work.
    pub decisions_finished_before: Option<u64>,
    replicas: &'a BTreeMap<ReplicaId, ReplicaNode>,
    coordinators: &'a BTreeMap<ReplicaId, CoordinatorNode>,
    clocks: &'a BTreeMap<NodeId, Clock>,
    placement: &'a Placement,
}

impl<'a> Observation<'a> {
    /// The world's parts a checker may read.
    pub(crate) fn new(
        now: u64,
        topology: &'a Topology,
        history: &'a [OpRecord],
        replicas: &'a BTreeMap<ReplicaId, ReplicaNode>,
        coordinators: &'a BTreeMap<ReplicaId, CoordinatorNode>,
        clocks: &'a BTreeMap<NodeId, Clock>,
        placement: &'a Placement,
    ) -> Self {
        Self {
            now,
            topology,
            history,
            decisions_finished_before: None,
            replicas,
            coordinators,
            clocks,
            placement,
        }
    }

    /// The slot of the server at `address`: the replica its core is.
    pub(crate) fn slot_of(&self, address: ReplicaId) -> ReplicaId {
        self.replicas.get(&address).map_or(address, |n| n.slot)
    }

    /// The addresses of the servers holding slot `slot` somewhere (each with its store,
    /// and its coordinator if the slot is full).
    pub(crate) fn servers_of(&self, slot: ReplicaId) -> impl Iterator<Item = ReplicaId> + '_ {
        self.replicas
            .iter()
            .filter(move |(_, n)| n.slot == slot)
            .map(|(address, _)| *address)
    }

    /// Whether some slot has more than one server (a world with spares).
    pub(crate) fn has_spares(&self) -> bool {
        self.replicas.len() > self.topology.replicas().len()
    }

    /// The key spans in which the server at `r` serves its slot now, if it is up: where
    /// its placed core answers a request routed by key alone.
    pub(crate) fn served_spans(&self, r: ReplicaId) -> Option<Vec<Span>> {
        let node = self.replicas.get(&r)?;
        let placement = node.core.as_ref()?.placement()?;
        Some(placement.served_spans(node.slot))
    }

    /// Whether the server at `r`, if it is up and placed, holds its slot of `eg`'s
    /// range by its own placement (and has not frozen the range).
    pub(crate) fn places_here(&self, r: ReplicaId, eg: &EgId) -> Option<bool> {
        let node = self.replicas.get(&r)?;
        let placement = node.core.as_ref()?.placement()?;
        let range = placement.view().range_of(&eg.0);
        let held = range
            .slot(node.slot)
            .is_some_and(|slot| slot.server == crate::world::server_at(r));
        Some(held && !placement.frozen().contains_key(&range.id))
    }

    /// Whether the stored placement keeps slot `slot` in `eg`'s range (a slot
    /// removed from it is no longer the group's replica).
    pub(crate) fn in_replica_set(&self, slot: ReplicaId, eg: &EgId) -> bool {
        self.placement.range_of(&eg.0).slot(slot).is_some()
    }

    /// The stored placement's version.
    pub(crate) fn placement_version(&self) -> megastore_placement::Version {
        self.placement.version()
    }

    /// The voter set of every range of the stored placement (slot ids, in order), with
    /// the range's bounds: the groups whose proposers may count it.
    pub(crate) fn voter_sets(&self) -> impl Iterator<Item = RangeVoters> + '_ {
        self.placement.ranges().iter().map(|range| {
            let mut voters: Vec<ReplicaId> = range
                .slots
                .iter()
                .filter(|s| s.kind != megastore_types::ReplicaKind::ReadOnly)
                .map(|s| s.replica)
                .collect();
            voters.sort();
            RangeVoters {
                start: range.start.clone(),
                end: range.end.clone(),
                voters,
            }
        })
    }

    /// Every server's address.
    pub(crate) fn servers(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.replicas.keys().copied()
    }

    /// The address of the server the stored placement names for slot `slot` of `eg`'s
    /// range: during a move its source, whose store holds the slot's acknowledged state
    /// until the move finishes, and from then on its target, which copied all of it
    /// (*moves-keep-writes*).
    pub(crate) fn holder(&self, slot: ReplicaId, eg: &EgId) -> ReplicaId {
        self.placement
            .range_of(&eg.0)
            .slot(slot)
            .map_or(slot, |held| ReplicaId(held.server.0))
    }

    /// Whether the server at `r` lost its store at some point (it rejoins since).
    pub(crate) fn rejoining(&self, r: ReplicaId) -> bool {
        self.replicas.get(&r).is_some_and(|n| n.rejoining)
    }

    /// How many times replica `r`'s store was lost (each loss begins a new acceptor
    /// record).
    pub(crate) fn wipes(&self, r: ReplicaId) -> Option<u32> {
        self.replicas.get(&r).map(|n| n.wipes)
    }

    /// Whether the coordinator beside the server at `r`, if it is up, vouches for `eg`
    /// at its own clock's reading now.
    pub(crate) fn coordinator_vouches(&self, r: ReplicaId, eg: &EgId) -> bool {
        let Some(core) = self.coordinators.get(&r).and_then(|c| c.core.as_ref()) else {
            return false;
        };
        let node = NodeId::Coordinator(r);
        core.vouches(self.clocks[&node].local(self.now), eg)
    }

    /// Cell `column` of `eg`'s root row in replica `r`'s store, decoded.
    fn stored<T: serde::de::DeserializeOwned>(
        &self,
        r: ReplicaId,
        eg: &EgId,
        column: &[u8],
    ) -> Option<T> {
        let store = &self.replicas.get(&r)?.store;
        let cell = store
            .read_cell(&root_row(eg), column, LATEST)
            .expect("memory store reads")?;
        Some(postcard::from_bytes(&cell.value).expect("root row cells decode"))
    }

    /// What replica `r` holds at `p` of `eg`, read from its store (durable state).
    pub(crate) fn stored_slot(&self, r: ReplicaId, eg: &EgId, p: Position) -> Option<SlotRecord> {
        let mut slot: SlotRecord = self.stored(r, eg, &log_column(p))?;
        let visible = stored_visible(
            self.stored_watermark(r, eg, VISIBLE),
            self.stored_watermark(r, eg, APPLIED),
        );
        slot.derive_visible(p, visible);
        Some(slot)
    }

    /// The promise replica `r` would reload at `p` of `eg` after a restart (its stored
    /// `promise:<p>` cell).
    pub(crate) fn stored_promise(&self, r: ReplicaId, eg: &EgId, p: Position) -> Option<Ballot> {
        self.stored(r, eg, &promise_column(p))
    }

    /// A watermark cell (`truncated`, `applied`, `visible`) in replica `r`'s store.
    pub(crate) fn stored_watermark(&self, r: ReplicaId, eg: &EgId, column: &[u8]) -> Position {
        self.stored(r, eg, column).unwrap_or(Position::NONE)
    }

    /// The truncation point in replica `r`'s store.
    pub(crate) fn stored_truncated(&self, r: ReplicaId, eg: &EgId) -> Position {
        self.stored_watermark(r, eg, TRUNCATED)
    }

    /// The rows of `range` in replica `r`'s store, newest versions (empty for no such
    /// replica).
    pub(crate) fn latest_rows(&self, r: ReplicaId, range: &KeyRange) -> Vec<Row> {
        self.replicas.get(&r).map_or_else(Vec::new, |node| {
            node.store
                .scan(range, LATEST, &ScanOptions::default())
                .expect("memory store scans")
        })
    }

    /// Replica `r`'s store (its durable state).
    pub(crate) fn store(&self, r: ReplicaId) -> Option<&megastore_rowstore::MemoryStore> {
        self.replicas.get(&r).map(|node| &node.store)
    }
}

/// One range's voter set as a placement had it, with the range's bounds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RangeVoters {
    /// The range's first group key.
    pub(crate) start: Vec<u8>,
    /// The first key past it (`None`: the end of the key space).
    pub(crate) end: Option<Vec<u8>>,
    /// Its voters' slot ids, in order.
    pub(crate) voters: Vec<ReplicaId>,
}

impl RangeVoters {
    /// Whether group `eg`'s key is in the range.
    pub(crate) fn holds(&self, eg: &EgId) -> bool {
        eg.0 >= self.start && self.end.as_ref().is_none_or(|end| eg.0 < *end)
    }
}
