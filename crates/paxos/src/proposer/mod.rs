//! The proposer side of the protocol — what the client library runs, and what a
//! replica runs to finish abandoned positions: settling a position (learn or Paxos),
//! the invalidation step, visibility marks, current/snapshot/inconsistent reads, and
//! commits.
//!
//! Operations are state machines fed replies and ticks through a `Ctx`, which sends
//! their requests and remembers which operation each request id belongs to; the host
//! ([`ClientCore`](crate::ClientCore)) routes replies back by id.

pub(crate) mod catch_up;
pub(crate) mod commit;
pub(crate) mod global_scan;
pub(crate) mod read;
pub(crate) mod resolve;
pub(crate) mod settle;

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_coordinator::CoordinatorRequest;
use megastore_lock::{LockClient, LockCommand};
use megastore_placement::{Placement, ServerId};
use megastore_types::{EgId, LockNodeId, NodeId, ProposerId, ReplicaId, Time, Topology};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use crate::bugs::ProtocolBugs;
use crate::messages::{Message, ReplicaRequest};
use crate::replica_set::ReplicaSet;

/// How long a proposer waits for what.
#[derive(Debug, Clone)]
pub struct Timeouts {
    /// One round of requests to replicas (prepare, accept, log reads, reads).
    pub rpc: Duration,
    /// The accept-leader step (write step 2): short, then two-phase Paxos.
    pub leader: Duration,
    /// Waiting for a coordinator to acknowledge an invalidate before asking the lock
    /// service whether its lock lapsed (and between retries).
    pub invalidate: Duration,
    /// The randomised backoff after a first lost Paxos round is up to this long (about
    /// one round trip); each further lost round of the same position doubles it.
    pub backoff: Duration,
    /// One lock service request try.
    pub lock_attempt: Duration,
    /// Paxos rounds before an operation gives up.
    pub max_rounds: u32,
    /// How long the invalidation step may stall (coordinator unreachable, lock still
    /// held) before the operation gives up.
    pub invalidate_patience: Duration,
    /// How long a writer keeps resolving a commit of unknown outcome (settling its
    /// position again and again) before it reports the outcome unknown: long enough
    /// for a sweep to finish the position once a majority is reachable again.
    pub resolve_patience: Duration,
    /// How long a cross-group transaction may stay prepared and undecided before
    /// anyone who meets it (a reader, a writer it locks out, a replica's sweep) records
    /// abort in its coordinator group: how long a client that died between prepare and
    /// decision can lock rows (docs/protocol.md, "Two-phase commit").
    pub prepared: Duration,
}

impl Timeouts {
    /// The time limits for one RPC round of `rpc` and a lock lease of `lease`: the
    /// accept-leader step gets a quarter of a round before two-phase Paxos; an
    /// invalidate half a round before the lock service is asked; the first backoff up
    /// to a tenth of a round; the invalidation step waits for a lease three times over
    /// before giving up, and resolving an unknown outcome five leases; a prepared
    /// transaction is aborted by others after half a lease undecided.
    pub fn from_rpc_and_lease(rpc: Duration, lease: Duration) -> Self {
        Self {
            rpc,
            leader: rpc / 4,
            invalidate: rpc / 2,
            backoff: rpc / 10,
            lock_attempt: rpc,
            max_rounds: 10,
            invalidate_patience: lease * 3,
            resolve_patience: lease * 5,
            prepared: lease / 2,
        }
    }

    /// Whether a writer that has been resolving an unknown outcome for `elapsed` (since
    /// the commit ended unknown) tries once more: the one policy the client library and
    /// the simulator share.
    pub fn keeps_resolving(&self, elapsed: Duration) -> bool {
        elapsed < self.resolve_patience
    }
}

/// The placement a proposer's `ReadFile` of [`megastore_placement::PLACEMENT_FILE`]
/// answered (`None`: the read failed, or the file is unusable; read again later).
pub(crate) fn placement_read(
    result: &Result<megastore_lock::LockReply, megastore_lock::LockError>,
    topology: &Topology,
) -> Option<Placement> {
    match result {
        Ok(megastore_lock::LockReply::File(file)) => {
            Placement::stored(file.as_ref().map(|f| f.contents.as_slice()), topology).ok()
        }
        _ => None,
    }
}

/// Who proposes, and where.
#[derive(Debug, Clone)]
pub struct ProposerConfig {
    /// The deployment.
    pub topology: Topology,
    /// This proposer's id (distinct from every other proposer's).
    pub proposer: ProposerId,
    /// The lock service's nodes.
    pub lock_nodes: Vec<LockNodeId>,
    /// Time limits.
    pub timeouts: Timeouts,
    /// Simulator-only mistakes.
    pub bugs: ProtocolBugs,
}

/// Request ids, routes from request ids to the operation that sent them, the lock
/// client, the proposer's random numbers, and — for a proposer on many servers — the
/// placement it routes by.
pub(crate) struct Wiring<K> {
    next_id: u64,
    routes: BTreeMap<u64, K>,
    lock: LockClient,
    lock_routes: BTreeMap<u64, K>,
    rng: ChaCha8Rng,
    /// The newest placement this proposer knows (`None`: not placed, every replica
    /// runs on one server of its own). A request to `NodeId::Coordinator(r)` about a
    /// group goes to the coordinator of the server this placement names for slot `r`
    /// of the group's range: the host routes by [`Wiring::placement`], so the
    /// proposer and its host never disagree on where a request went.
    placement: Option<Placement>,
}

impl<K: Clone + Ord> Wiring<K> {
    pub(crate) fn new(config: &ProposerConfig, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Ids start at random: a restarted proposer must not take a reply meant for
        // its previous life as the answer to a new request.
        let (first_id, first_lock_id) = (rng.next_u64(), rng.next_u64());
        Self {
            next_id: first_id,
            routes: BTreeMap::new(),
            lock: LockClient::new(config.lock_nodes.clone(), config.timeouts.lock_attempt)
                .first_id(first_lock_id),
            lock_routes: BTreeMap::new(),
            rng,
            placement: None,
        }
    }

    /// The placement it routes by, if placed.
    pub(crate) fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref()
    }

    /// Adopts `placement` if it is newer than the one it routes by (placements never
    /// go back), making the proposer placed if it was not.
    pub(crate) fn observe_placement(&mut self, placement: Placement) {
        if self
            .placement
            .as_ref()
            .is_none_or(|known| placement.version() > known.version())
        {
            self.placement = Some(placement);
        }
    }

    /// A request id of the same sequence as its operations' (so never one of theirs),
    /// for a request about no operation: its answer has no route.
    pub(crate) fn unrouted_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = id.wrapping_add(1);
        id
    }

    /// The operation that sent request `id`.
    pub(crate) fn route(&self, id: u64) -> Option<&K> {
        self.routes.get(&id)
    }

    /// The operation that sent lock request `id`.
    pub(crate) fn lock_route(&self, id: u64) -> Option<&K> {
        self.lock_routes.get(&id)
    }

    /// Forgets every route of a finished operation.
    pub(crate) fn forget(&mut self, key: &K) {
        self.routes.retain(|_, k| k != key);
        self.lock_routes.retain(|_, k| k != key);
    }

    pub(crate) fn lock_client(&mut self) -> &mut LockClient {
        &mut self.lock
    }

    /// When the lock client next needs a tick.
    pub(crate) fn lock_deadline(&self) -> Option<Time> {
        self.lock.next_deadline()
    }

    pub(crate) fn ctx<'a>(
        &'a mut self,
        now: Time,
        config: &'a ProposerConfig,
        key: K,
        sends: &'a mut Vec<(NodeId, Message)>,
    ) -> Ctx<'a, K> {
        Ctx {
            now,
            config,
            key,
            wiring: self,
            sends,
        }
    }
}

/// What an operation may do while handling an event.
pub(crate) struct Ctx<'a, K> {
    pub(crate) now: Time,
    pub(crate) config: &'a ProposerConfig,
    key: K,
    wiring: &'a mut Wiring<K>,
    sends: &'a mut Vec<(NodeId, Message)>,
}

impl<K> Ctx<'_, K> {
    /// `eg`'s replica set by the proposer's placement: whom it counts as voters, and
    /// sends marks and invalidations to.
    pub(crate) fn replica_set(&self, eg: &EgId) -> ReplicaSet<'_> {
        ReplicaSet::of(&self.config.topology, self.wiring.placement.as_ref(), eg)
    }
}

impl<K: Clone + Ord> Ctx<'_, K> {
    fn next_id(&mut self) -> u64 {
        let id = self.wiring.next_id;
        self.wiring.next_id = id.wrapping_add(1);
        self.wiring.routes.insert(id, self.key.clone());
        id
    }

    /// Sends a request to a replica; returns its id.
    pub(crate) fn send_replica(
        &mut self,
        to: ReplicaId,
        build: impl FnOnce(u64) -> ReplicaRequest,
    ) -> u64 {
        let id = self.next_id();
        self.sends
            .push((NodeId::Replica(to), Message::ReplicaRequest(build(id))));
        id
    }

    /// Sends a request to a replica's coordinator; returns its id.
    pub(crate) fn send_coordinator(
        &mut self,
        to: ReplicaId,
        build: impl FnOnce(u64) -> CoordinatorRequest,
    ) -> u64 {
        let id = self.next_id();
        self.sends.push((
            NodeId::Coordinator(to),
            Message::CoordinatorRequest(build(id)),
        ));
        id
    }

    /// The placement the proposer routes by, if placed.
    pub(crate) fn placement(&self) -> Option<&Placement> {
        self.wiring.placement.as_ref()
    }

    /// The server whose coordinator answers for slot `replica` of group `eg`, by the
    /// proposer's placement (`None`: not placed, or no such slot).
    pub(crate) fn coordinator_server(&self, eg: &EgId, replica: ReplicaId) -> Option<ServerId> {
        let placement = self.wiring.placement.as_ref()?;
        placement
            .range_of(&eg.0)
            .slot(replica)
            .map(|slot| slot.server)
    }

    /// Adopts a placement read from the lock service, if newer than its own.
    pub(crate) fn observe_placement(&mut self, placement: Placement) {
        self.wiring.observe_placement(placement);
    }

    /// Starts a lock service request; returns its lock request id.
    pub(crate) fn send_lock(&mut self, command: LockCommand) -> u64 {
        let (id, send) = self.wiring.lock.start(self.now, command);
        self.wiring.lock_routes.insert(id, self.key.clone());
        self.sends.push((
            NodeId::LockNode(send.to),
            Message::LockRequest(send.request),
        ));
        id
    }

    /// A random duration in `[0, max]`.
    pub(crate) fn random_up_to(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(if nanos == 0 {
            0
        } else {
            self.wiring.rng.next_u64() % (nanos + 1)
        })
    }
}
