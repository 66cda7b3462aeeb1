//! The client side of the protocol as one state machine: what the client library (and
//! the simulator's clients) drive. It hosts reads, commits, resolutions, and operations
//! made of those it starts itself: the verification of global index hits (a bounded
//! number of current reads at once), the delivery of a group's queue messages, and the
//! two-phase commit across groups with everything that settles a prepared transaction
//! (a current read that meets one, a commit one locks out, a sweep of a group). It
//! routes replies by request id and reports each operation's result. Its commits to
//! one group go one at a time, later ones waiting and then combined into shared log
//! entries ([`lanes`]).

mod bases;
mod composite;
mod lanes;
mod relay;
mod routes;
mod tracking;

use std::collections::BTreeMap;

use megastore_rowstore::KeyRange;
use megastore_types::{
    ClientId, EgId, NodeId, Position, ReplicaId, ReplicaKind, SiteId, Time, TxnId,
};

use crate::entry::RowWrite;
use crate::messages::{DataQuery, Message};
use crate::proposer::commit::{Commit, CommitResult, Member, ReadSet, commit_span};
use crate::proposer::global_scan::GlobalScan;
use crate::proposer::read::{CurrentRead, PointRead, PointTarget, ReadError, ReadMode, ReadResult};
use crate::proposer::resolve::{Resolution, Resolve};
use crate::proposer::{Ctx, ProposerConfig, Wiring};
use crate::queue::{Deliver, Delivery};
use crate::steps::{Ended, Step, Tagged};
use crate::two_phase::collect::{CollectDecisions, CollectedDecisions};
use crate::two_phase::commit::{Participant, TwoPhaseCommit, TwoPhaseResult};
use crate::two_phase::decide::{Decide, DecideOutcome, MayAbort, Patience, TwoPhaseClock};
use crate::two_phase::settle::{Blocked, SettleGroup, SettledGroup, SettlingRead};
use crate::two_phase::{TwoPhaseError, TxnFacts};
use crate::verify::{CheckedHit, GlobalHit, Verify};
use bases::UnvouchedBases;
use composite::Composite;
pub use lanes::Basis;
use lanes::{Lane, Start, Waiting};
use relay::{RelayOp, Relaying};
use tracking::{LaneVisits, OpTable};

pub use relay::{
    RELAY_DOWN_FOR, RELAY_DOWN_MAX, RELAY_HOT_FOR, RelayRole, RelayedCommit, relay_wait,
};

/// How a client runs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Which client.
    pub id: ClientId,
    /// Its site: a full replica there is its local replica.
    pub site: SiteId,
    /// The proposer settings (its proposer id must be `ProposerId::client(id)`).
    pub proposer: ProposerConfig,
    /// Seeds its random numbers (backoff, and where request ids start): a fresh random
    /// value on every process start, or a reply to the previous process could be taken
    /// for the answer to a new request.
    pub seed: u64,
    /// Messages one delivery delivers at most ([`crate::queue::DELIVERY_BATCH`] in a
    /// deployment; a few in the simulator, so that outboxes span many batches).
    pub delivery_batch: usize,
    /// The wall clock (ms since the Unix epoch) minus the host's `Time` (in ms): how
    /// the core dates the two-phase records it writes and judges their age. Only
    /// liveness depends on it (a clock far ahead aborts prepared transactions early).
    pub wall_clock_offset_ms: i64,
    /// Which of its commits it hands a relay (docs/protocol.md, "Relayed commits"):
    /// the client library's clients relay hot groups' commits ([`RelayRole::Writer`]);
    /// a replica's own shared client is the relay ([`RelayRole::Relay`]).
    pub relay_role: RelayRole,
}

/// One operation of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// What an operation returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// A read finished.
    Read(Result<ReadResult, ReadError>),
    /// A commit finished.
    Commit {
        /// The transaction.
        txn: TxnId,
        /// How.
        result: CommitResult,
    },
    /// A resolution of an unknown commit outcome finished.
    Resolve(Resolution),
    /// A verification of global index hits finished: each hit with its verdict, in
    /// the order given, or the error of a group read that failed.
    Verify(Result<Vec<CheckedHit>, ReadError>),
    /// A delivery of a group's queue messages finished.
    Deliver(Result<Delivery, ReadError>),
    /// A cross-group commit finished.
    TwoPhase {
        /// The transaction.
        txn: TxnId,
        /// How.
        result: TwoPhaseResult,
    },
    /// Settling a group's prepared transactions finished.
    Settled(Result<SettledGroup, ReadError>),
    /// A lookup of a cross-group transaction's decision finished.
    Decision(DecideOutcome),
    /// A collection of a page of a coordinator group's decision rows finished.
    Collected(Result<CollectedDecisions, ReadError>),
}

/// How a blind write's basis comes ([`ClientCore::blind_basis`]).
#[derive(Debug)]
pub enum BasisStep {
    /// Lent at once by the client's commit to the group in flight.
    Lent(Basis),
    /// Being read: the operation's read result is the basis ([`Basis::of_read`]).
    Reading {
        /// The read.
        op: OpId,
        /// Its mode (a snapshot read while the group's commits are relayed).
        mode: ReadMode,
        /// What to do for it now.
        outputs: Vec<Output>,
    },
}

/// An event for the client.
#[derive(Debug, Clone)]
pub enum Input {
    /// A message arrived.
    Message {
        /// Its sender.
        from: NodeId,
        /// The message.
        message: Message,
    },
    /// Time passed.
    Tick,
    /// The host read this placement (older than the one the client routes by:
    /// ignored). The first makes the client placed (see [`ClientCore::placed`]).
    Placement(megastore_placement::Placement),
}

/// What the client asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a message (the client keeps no durable state).
    Send {
        /// To whom.
        to: NodeId,
        /// What.
        message: Message,
    },
    /// An operation finished.
    Done {
        /// Which.
        op: OpId,
        /// Its result.
        result: OpResult,
    },
    /// Feed [`Input::Tick`] at this time.
    WakeAt(Time),
}

#[derive(Debug)]
enum Op {
    Current(CurrentRead),
    Point(PointRead),
    GlobalScan(GlobalScan),
    Commit(Box<CommitOp>),
    Resolve(Box<Resolve>),
    Verify(Box<Verify>),
    Composite(Box<Composite>),
    Relay(Box<RelayOp>),
}

/// A commit, and the operation each of its transactions reports to (the first's is
/// the commit's own).
#[derive(Debug)]
struct CommitOp {
    commit: Commit,
    ops: Vec<(TxnId, OpId)>,
    /// Every transaction of it stands on a blind write's snapshot basis (`bases`).
    unvouched: bool,
}

/// An operation the core started for another one: its result goes to that one.
#[derive(Debug)]
enum Child {
    /// A group read of a verification, for the hits at these indexes.
    Verify { parent: OpId, hits: Vec<usize> },
    /// Step `tag` of a composite operation.
    Step { parent: OpId, tag: u32 },
}

/// The first sequence number of the transactions the core names itself (a delivery's,
/// a finish's): hosts number their own from 1, so the two never meet under one client
/// id.
const CORE_TXNS: u64 = 1 << 63;

/// A client of the database.
pub struct ClientCore {
    config: ClientConfig,
    local: Option<ReplicaId>,
    ops: OpTable,
    /// The operations started for another one (their results go to it, not the
    /// driver).
    children: BTreeMap<OpId, Child>,
    /// The sequence number of the next transaction the core names itself.
    next_core_txn: u64,
    /// Composite operations' pauses: when, whose, which step.
    wakes: Vec<(Time, OpId, u32)>,
    /// Per group, the commit in flight and the commits waiting to combine after it.
    lanes: BTreeMap<EgId, Lane>,
    /// Which lanes a step looks at.
    lane_visits: LaneVisits,
    /// The groups whose commits go through the relay.
    relaying: Relaying,
    /// Blind writes' bases read as snapshots, and their commits.
    unvouched: UnvouchedBases,
    /// Results known when the operation started, reported at the end of the step.
    answered_now: Vec<(OpId, OpResult)>,
    wiring: Wiring<OpId>,
    next_op: u64,
    /// The placement read under way, after a refusal said the placement is behind
    /// (its lock request id; `routes.rs`).
    placement_read: Option<u64>,
    /// When the last such read started.
    placement_read_at: Option<Time>,
    /// Current reads a commit of this client woke as it settled ([`wake_reads`]).
    reads_woken: u64,
}

impl ClientCore {
    /// A client with nothing in flight.
    pub fn new(config: ClientConfig) -> Self {
        let local = config
            .proposer
            .topology
            .at_site(config.site)
            .find(|r| r.kind == ReplicaKind::Full)
            .map(|r| r.id);
        let wiring = Wiring::new(&config.proposer, config.seed);
        Self {
            config,
            local,
            ops: OpTable::default(),
            children: BTreeMap::new(),
            next_core_txn: CORE_TXNS,
            wakes: Vec::new(),
            lanes: BTreeMap::new(),
            lane_visits: LaneVisits::default(),
            relaying: Relaying::default(),
            unvouched: UnvouchedBases::default(),
            answered_now: Vec::new(),
            wiring,
            next_op: 1,
            placement_read: None,
            placement_read_at: None,
            reads_woken: 0,
        }
    }

    /// This client, routing by `placement` (docs/protocol.md, "Placement"): its
    /// requests to a replica's coordinator about a group go to the coordinator of the
    /// server that the placement names for the replica's slot of the group's range,
    /// and its host routes them by [`ClientCore::placement`]. A client that is not
    /// placed takes every replica to run on a server of its own.
    pub fn placed(mut self, placement: megastore_placement::Placement) -> Self {
        self.wiring.observe_placement(placement);
        self
    }

    /// The placement it routes by, if placed: the newest it read (fed by the host, or
    /// read itself during a write's invalidation step).
    pub fn placement(&self) -> Option<&megastore_placement::Placement> {
        self.wiring.placement()
    }

    /// How this client runs.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The full replica at this client's site, if any.
    pub fn local_replica(&self) -> Option<ReplicaId> {
        self.local
    }

    /// The replica this client nominates as the next position's leader: its local full
    /// replica, else any voter at its site, else the first full replica.
    pub fn preferred_leader(&self) -> Option<ReplicaId> {
        let topology = &self.config.proposer.topology;
        self.local
            .or_else(|| {
                topology
                    .at_site(self.config.site)
                    .find(|r| topology.is_voter(r.id))
                    .map(|r| r.id)
            })
            .or_else(|| topology.full_replicas().next())
    }

    /// [`ClientCore::preferred_leader`] for one group, among the group's voters by its
    /// placement: a replica removed from the group's range, or whose slot there is
    /// leaving, is not nominated (its server would refuse, and every next writer would
    /// wait for it before taking the slow path).
    fn preferred_leader_of(&self, eg: &EgId) -> Option<ReplicaId> {
        let topology = &self.config.proposer.topology;
        let set = crate::replica_set::ReplicaSet::of(topology, self.wiring.placement(), eg);
        let may_lead = |r: ReplicaId| set.is_voter(r) && !set.leaving(r);
        self.local
            .filter(|local| may_lead(*local))
            .or_else(|| {
                topology
                    .at_site(self.config.site)
                    .map(|r| r.id)
                    .find(|r| may_lead(*r))
            })
            .or_else(|| {
                set.of_kind(ReplicaKind::Full)
                    .into_iter()
                    .find(|r| may_lead(*r))
            })
    }

    fn new_op(&mut self) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        op
    }

    /// Starts a read.
    pub fn read(
        &mut self,
        now: Time,
        eg: EgId,
        mode: ReadMode,
        query: DataQuery,
    ) -> (OpId, Vec<Output>) {
        let mut sends = Vec::new();
        let op = self.start_read(now, eg, mode, query, &mut sends);
        (op, self.finish_step(now, sends))
    }

    /// The basis of a blind write of `eg` (a transaction that reads nothing): lent at
    /// once by this client's commit to the group in flight ([`lend_basis`](Self::lend_basis)),
    /// or else read ([`read_basis`](Self::read_basis), whose read's result is the basis:
    /// [`Basis::of_read`]).
    ///
    /// For a transaction that fixes its basis before its writes are known — a blind
    /// transaction of the public API, whose Begin answers with its position. Either way
    /// it is a position with the exact set of prepared transactions pending there, as a
    /// read of no rows at that position finds it, so a commit after it is judged as one
    /// after any read there (docs/protocol.md, "Relayed commits", step 8).
    /// `query` is what else a read would read (none, for the client library).
    pub fn blind_basis(&mut self, now: Time, eg: EgId, query: DataQuery) -> BasisStep {
        if let Some(basis) = self.lend_basis(now, &eg) {
            return BasisStep::Lent(basis);
        }
        let (op, mode, outputs) = self.read_basis(now, eg, query);
        BasisStep::Reading { op, mode, outputs }
    }

    /// The read of this client's commit to `eg` in flight, lent to a blind write at
    /// `now`: its position, next leader and the prepared transactions pending there,
    /// carried over what the lane learned since — also between two commits while the
    /// lane lingers (docs/protocol.md, "Combining commits", step 8). `None` with
    /// neither.
    pub fn lend_basis(&self, now: Time, eg: &EgId) -> Option<Basis> {
        let bugs = self.config.proposer.bugs;
        self.lanes
            .get(eg)
            .and_then(|l| l.blind_basis(eg, now, &bugs))
    }

    /// Starts the read a blind write of `eg` (a transaction that read nothing) makes for
    /// its basis — the position it commits after, that position's next leader, and the
    /// prepared transactions pending there — when [`commit_blind`](Self::commit_blind)
    /// had no commit in flight to borrow one from. `query` is what else it reads (none,
    /// for the client library). Returns the operation and the read's mode.
    ///
    /// A snapshot read, the local full replica asked first: one request, and no
    /// coordinator's (docs/protocol.md, "A blind write's basis"). The write needs no
    /// newer basis: it read nothing, so it need not see the writes acknowledged
    /// meanwhile, and its commit rebases over every entry chosen after its basis, judged
    /// against their prepares and finishes. While the group's commits are relayed (it is
    /// hot) the relay is asked first ("Relayed commits", step 6): a current read there
    /// would meet the relay's entry in flight and wait for it. A current read once after
    /// a commit on a snapshot basis lost a position to another client's entry
    /// (`bases`): that basis was stale, and a current read catches its replica up.
    pub fn read_basis(
        &mut self,
        now: Time,
        eg: EgId,
        query: DataQuery,
    ) -> (OpId, ReadMode, Vec<Output>) {
        let relay = self.relay_for(now, &eg, None);
        if relay.is_none() && self.unvouched.take_read_current(&eg) {
            let (op, out) = self.read(now, eg, ReadMode::Current, query);
            return (op, ReadMode::Current, out);
        }
        let mut sends = Vec::new();
        let op = self.new_op();
        let mut candidates = self.point_read_candidates(ReadMode::Snapshot);
        match relay {
            Some(relay) => {
                candidates.retain(|r| *r != relay);
                candidates.insert(0, relay);
            }
            None => self.unvouched.reading(op, eg.clone()),
        }
        let mut ctx = self.wiring.ctx(now, &self.config.proposer, op, &mut sends);
        let target = PointTarget { eg, query };
        let read = PointRead::start(&mut ctx, target, ReadMode::Snapshot, candidates);
        self.ops.insert(op, Op::Point(read));
        (op, ReadMode::Snapshot, self.finish_step(now, sends))
    }

    /// Starts a read; a current read settles the prepared transactions it meets whose
    /// writes it reads (docs/protocol.md, "Two-phase commit").
    fn start_read(
        &mut self,
        now: Time,
        eg: EgId,
        mode: ReadMode,
        query: DataQuery,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> OpId {
        if mode == ReadMode::Current {
            let (read, step) = SettlingRead::start(eg, query, self.two_phase_clock());
            return self.start_composite(now, Composite::SettlingRead(read), vec![step], sends);
        }
        self.start_raw_read(now, eg, mode, query, sends)
    }

    /// Starts a read as the protocol's read paths make it (a current read settles
    /// nothing).
    fn start_raw_read(
        &mut self,
        now: Time,
        eg: EgId,
        mode: ReadMode,
        query: DataQuery,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> OpId {
        let op = self.new_op();
        let candidates = self.point_read_candidates(mode);
        let mut ctx = self.wiring.ctx(now, &self.config.proposer, op, sends);
        // Its local replica, unless the group's placement leaves it out (removed from
        // the range, or leaving it): then every current read goes to a majority.
        let local = self
            .local
            .filter(|local| ctx.replica_set(&eg).vouches_at(*local));
        let state = match mode {
            ReadMode::Current => Op::Current(CurrentRead::start(&mut ctx, eg, query, local)),
            ReadMode::Snapshot | ReadMode::Inconsistent | ReadMode::AtPosition(_) => {
                let target = PointTarget { eg, query };
                Op::Point(PointRead::start(&mut ctx, target, mode, candidates))
            }
        };
        self.ops.insert(op, state);
        op
    }

    /// Checks global index hits (from [`ClientCore::scan_global`]) against their
    /// groups' mirrors, read now: one current read per group, at most `in_flight` at
    /// once. Its result says of each hit whether its group, at the position read,
    /// still holds the same row with the same cells; a verified scan keeps only those
    /// (docs/protocol.md, "Global indexes").
    pub fn verify_global(
        &mut self,
        now: Time,
        hits: Vec<GlobalHit>,
        in_flight: usize,
    ) -> (OpId, Vec<Output>) {
        let op = self.new_op();
        let verify = Verify::new(hits, in_flight, self.config.proposer.bugs);
        self.ops.insert(op, Op::Verify(Box::new(verify)));
        let mut sends = Vec::new();
        self.start_verify_reads(now, op, &mut sends);
        (op, self.finish_step(now, sends))
    }

    /// Starts the group reads verification `op` may run now.
    fn start_verify_reads(&mut self, now: Time, op: OpId, sends: &mut Vec<(NodeId, Message)>) {
        loop {
            let Some(Op::Verify(verify)) = self.ops.get_mut(&op) else {
                return;
            };
            let Some((eg, hits, query)) = verify.next_read() else {
                return;
            };
            let read = self.start_read(now, eg, ReadMode::Current, query, sends);
            self.children
                .insert(read, Child::Verify { parent: op, hits });
        }
    }

    /// Delivers the queue messages in `sender`'s outbox (up to
    /// [`crate::queue::DELIVERY_BATCH`]) into their receivers' inboxes, exactly once
    /// each and in order, then trims what was delivered (docs/protocol.md, "Queues").
    /// Any number of deliverers may run for one sender at once.
    pub fn deliver(&mut self, now: Time, sender: EgId) -> (OpId, Vec<Output>) {
        let (deliver, step) = Deliver::start(
            sender,
            self.config.delivery_batch,
            self.config.proposer.bugs,
        );
        let mut sends = Vec::new();
        let op = self.start_composite(
            now,
            Composite::Deliver(deliver),
            vec![(0, step)],
            &mut sends,
        );
        (op, self.finish_step(now, sends))
    }

    /// Commits one transaction across groups by two-phase commit (docs/protocol.md,
    /// "Two-phase commit"): `participants` are the groups it read and writes, each with
    /// its read position, writes and read set (with the prepared transactions its reads
    /// saw); the first is the coordinator group, whose log records the decision. Its
    /// result says committed (every current read in every participant sees all of its
    /// writes from then on), aborted (nowhere, and never), or unknown (the coordinator
    /// group's decision row tells later: [`ClientCore::two_phase_decision`]).
    pub fn commit_two_phase(
        &mut self,
        now: Time,
        txn: TxnId,
        participants: Vec<Participant>,
    ) -> Result<(OpId, Vec<Output>), TwoPhaseError> {
        assert_eq!(
            txn.client, self.config.id,
            "a client commits its own transactions only"
        );
        let (commit, steps) = TwoPhaseCommit::start(
            now,
            txn,
            participants,
            self.preferred_leader(),
            self.two_phase_clock(),
        )?;
        let mut sends = Vec::new();
        let op = self.start_composite(now, Composite::TwoPhase(commit), steps, &mut sends);
        Ok((op, self.finish_step(now, sends)))
    }

    /// Settles the cross-group transactions prepared in `eg`: each is looked up in its
    /// coordinator group and finished here if decided; one still undecided after the
    /// prepared timeout is aborted (recorded in its coordinator group first). What a
    /// replica's sweep runs for a group with prepared records.
    pub fn settle_prepared(&mut self, now: Time, eg: EgId) -> (OpId, Vec<Output>) {
        let (settle, step) = SettleGroup::start(eg, self.two_phase_clock());
        let mut sends = Vec::new();
        let op = self.start_composite(now, Composite::SettleGroup(settle), vec![step], &mut sends);
        (op, self.finish_step(now, sends))
    }

    /// Looks up the decision of cross-group transaction `txn` in its coordinator
    /// group: how to resolve a commit whose outcome was unknown. With its `facts` (when
    /// it began preparing, by [`ClientCore::wall_ms`], and its participants), a
    /// transaction still undecided after the prepared timeout is aborted, recorded
    /// first, and an absent decision is confirmed by the participants' records: one
    /// finished everywhere whose decision was collected is [`DecideOutcome::Gone`].
    /// Without, an absent decision is reported undecided.
    pub fn two_phase_decision(
        &mut self,
        now: Time,
        coordinator: EgId,
        txn: TxnId,
        facts: Option<TxnFacts>,
    ) -> (OpId, Vec<Output>) {
        // Knowing its participants, a resolver confirms an absent decision by their
        // records (decisions are collected once every record is gone).
        let recheck = facts
            .as_ref()
            .map(|f| f.recorded_in().to_vec())
            .unwrap_or_default();
        let may_abort = facts.map_or(MayAbort::Never, MayAbort::After);
        let (decide, step) = Decide::start(
            coordinator,
            txn,
            may_abort,
            recheck,
            Patience::Report,
            self.two_phase_clock(),
        );
        let mut sends = Vec::new();
        let op = self.start_composite(now, Composite::Decide(decide), vec![(0, step)], &mut sends);
        (op, self.finish_step(now, sends))
    }

    /// Collects a page of coordinator group `eg`'s decision rows, from the row after
    /// `after` (the previous page's [`CollectedDecisions::next`]; none: the first):
    /// each older than `retention` whose transaction has no record left in any
    /// participant is deleted (docs/protocol.md, "Two-phase commit", collection). What
    /// a replica's group work runs for a group that decides cross-group transactions.
    pub fn collect_decisions(
        &mut self,
        now: Time,
        eg: EgId,
        after: Option<Vec<u8>>,
        retention: std::time::Duration,
    ) -> (OpId, Vec<Output>) {
        let (collect, step) = CollectDecisions::start(eg, after, retention, self.two_phase_clock());
        let mut sends = Vec::new();
        let op = self.start_composite(
            now,
            Composite::CollectDecisions(collect),
            vec![step],
            &mut sends,
        );
        (op, self.finish_step(now, sends))
    }

    /// The wall clock at the core's time `now` (ms since the Unix epoch), as the
    /// two-phase records are dated.
    pub fn wall_ms(&self, now: Time) -> u64 {
        self.two_phase_clock().wall_ms(now)
    }

    fn two_phase_clock(&self) -> TwoPhaseClock {
        let timeouts = &self.config.proposer.timeouts;
        TwoPhaseClock {
            timeout: timeouts.prepared,
            wall_offset_ms: self.config.wall_clock_offset_ms,
            poll: timeouts.leader.max(std::time::Duration::from_millis(10)),
            bugs: self.config.proposer.bugs,
        }
    }

    /// Starts a composite operation and its first steps.
    fn start_composite(
        &mut self,
        now: Time,
        composite: Composite,
        steps: Vec<Tagged>,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> OpId {
        let op = self.new_op();
        self.ops.insert(op, Op::Composite(Box::new(composite)));
        self.start_steps(now, op, steps, sends);
        op
    }

    /// Starts a composite operation's steps.
    fn start_steps(
        &mut self,
        now: Time,
        parent: OpId,
        steps: Vec<Tagged>,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        for (tag, step) in steps {
            let child = match step {
                Step::Read { eg, query, settle } => {
                    if settle {
                        self.start_read(now, eg, ReadMode::Current, query, sends)
                    } else {
                        self.start_raw_read(now, eg, ReadMode::Current, query, sends)
                    }
                }
                Step::Commit {
                    eg,
                    read_position,
                    leader,
                    writes,
                    reads,
                    txn,
                } => {
                    let txn = txn.unwrap_or_else(|| {
                        let txn = TxnId {
                            client: self.config.id,
                            seq: self.next_core_txn,
                        };
                        self.next_core_txn += 1;
                        txn
                    });
                    let commit = RelayedCommit {
                        txn,
                        eg,
                        read_position,
                        leader,
                        writes,
                        reads,
                    };
                    // A composite's commit (a prepare, a decision, a settle's finish, a
                    // delivery) rides the lanes and relays as a writer's does: on its
                    // own, it raced every relayed entry for ballot 0 at the group's
                    // leader and lost, position after position, in a hot group.
                    self.route_commit(now, commit, sends)
                }
                Step::Resolve {
                    eg,
                    position,
                    span,
                    txn,
                } => {
                    let op = self.new_op();
                    let mut ctx = self.wiring.ctx(now, &self.config.proposer, op, sends);
                    let positions = if span {
                        commit_span(position)
                    } else {
                        position..=position
                    };
                    let resolve = Resolve::start(&mut ctx, eg, positions, txn);
                    self.ops.insert(op, Op::Resolve(Box::new(resolve)));
                    op
                }
                Step::Wake { at } => {
                    self.wakes.push((at, parent, tag));
                    continue;
                }
            };
            self.children.insert(child, Child::Step { parent, tag });
        }
    }

    /// Scans global index rows (within [`crate::global_index_range`]) at the nearest
    /// full or read-only replica that answers: what that replica has applied of every
    /// group (docs/protocol.md, "Global indexes"). Its result is a read whose path is
    /// `Inconsistent` and which names no position.
    pub fn scan_global(
        &mut self,
        now: Time,
        range: KeyRange,
        limit: Option<usize>,
        reverse: bool,
    ) -> (OpId, Vec<Output>) {
        let op = self.new_op();
        let mode = ReadMode::Inconsistent;
        let candidates = self.point_read_candidates(mode);
        let mut sends = Vec::new();
        let mut ctx = self.wiring.ctx(now, &self.config.proposer, op, &mut sends);
        let state = Op::GlobalScan(GlobalScan::start(
            &mut ctx, range, limit, reverse, candidates,
        ));
        self.ops.insert(op, state);
        (op, self.finish_step(now, sends))
    }

    /// Replicas that may serve a snapshot or inconsistent read, best first: those at
    /// this site, then the other full replicas, then read-only ones.
    fn point_read_candidates(&self, mode: ReadMode) -> Vec<ReplicaId> {
        let topology = &self.config.proposer.topology;
        let serves = |kind: ReplicaKind| {
            kind == ReplicaKind::Full
                || (kind == ReplicaKind::ReadOnly && mode != ReadMode::Current)
        };
        let mut candidates: Vec<ReplicaId> = topology
            .at_site(self.config.site)
            .filter(|r| serves(r.kind))
            .map(|r| r.id)
            .collect();
        for kind in [ReplicaKind::Full, ReplicaKind::ReadOnly] {
            for r in topology.of_kind(kind) {
                if serves(kind) && !candidates.contains(&r) {
                    candidates.push(r);
                }
            }
        }
        candidates
    }

    /// Commits transaction `txn` that read the group at `read_position` (whose visible
    /// entry named `leader` as the next position's leader): `writes` become one log
    /// entry at `read_position + 1`. `reads` are the rows (and ranges) it read, for
    /// conflicts.
    ///
    /// The caller names the transaction (this client's id and a sequence number it
    /// never used for another transaction), so it can tell it before committing and
    /// resolve it by that name. Committing the same `txn` at the same position again
    /// is safe: one value is chosen there, so it applies at most once.
    ///
    /// While another of this client's commits to the group is in flight, it waits,
    /// and then may share a log entry with other waiting transactions
    /// (docs/protocol.md, "Combining commits"); its result is its own either way.
    ///
    /// While this client lately lost positions of the group to other clients' entries,
    /// it relays the commit to a full replica, which combines it with theirs
    /// (docs/protocol.md, "Relayed commits"); a relay that does not answer leaves it
    /// [`CommitResult::UnknownInSpan`] if resolving it here could not decide it.
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &mut self,
        now: Time,
        txn: TxnId,
        eg: EgId,
        read_position: Position,
        leader: Option<ReplicaId>,
        writes: Vec<RowWrite>,
        reads: impl Into<ReadSet>,
    ) -> (OpId, Vec<Output>) {
        assert_eq!(
            txn.client, self.config.id,
            "a client commits its own transactions only"
        );
        self.unvouched.commits_after(txn, &eg, read_position);
        let commit = RelayedCommit {
            txn,
            eg,
            read_position,
            leader,
            writes,
            reads: reads.into(),
        };
        let mut sends = Vec::new();
        let op = self.route_commit(now, commit, &mut sends);
        (op, self.finish_step(now, sends))
    }

    /// Starts `commit` of this client's own transaction (a caller's, or a composite
    /// operation's step): relayed, while this client lately lost races for the group
    /// ([`relay_for`](Self::relay_for)), or in its group's lane here (or settles the
    /// prepared transactions that lock it out first, and reports its conflict).
    fn route_commit(
        &mut self,
        now: Time,
        commit: RelayedCommit,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> OpId {
        let Some(relay) = self.relay_for(now, &commit.eg, commit.leader) else {
            return self.lane_commit(now, commit, sends);
        };
        if let Some(op) = self.blocked(now, &commit, sends) {
            return op;
        }
        let op = self.new_op();
        let deadline = now + self.relay_wait();
        let relayed = RelayOp::start(op.0, relay, commit, deadline, sends);
        self.ops.insert(op, Op::Relay(Box::new(relayed)));
        op
    }

    /// [`commit`](Self::commit) for another client, its transaction under its own id:
    /// a relay's, for a commit relayed to it ([`Message::Relay`]). The outcome is
    /// reported here; the writer resolves an unknown one itself. A transaction already
    /// waiting or in flight here (a duplicated request) is not committed again: that
    /// copy ends [`CommitResult::UnknownInSpan`].
    pub fn commit_relayed(&mut self, now: Time, commit: RelayedCommit) -> (OpId, Vec<Output>) {
        let duplicate = !self.config.proposer.bugs.relay_commits_duplicates()
            && self.committing(&commit.eg, commit.txn);
        if !duplicate {
            return self.commit_in_lane(now, commit);
        }
        // Relayed twice (a duplicated request): one copy is committed at most. This one
        // cannot tell where the other lands, so its writer resolves it.
        let op = self.new_op();
        let result = CommitResult::UnknownInSpan {
            first: commit.read_position.next(),
        };
        let txn = commit.txn;
        self.answered_now
            .push((op, OpResult::Commit { txn, result }));
        (op, self.finish_step(now, Vec::new()))
    }

    /// Puts `commit` in its group's lane (or settles the prepared transactions that
    /// lock it out first, and reports its conflict).
    fn commit_in_lane(&mut self, now: Time, commit: RelayedCommit) -> (OpId, Vec<Output>) {
        let mut sends = Vec::new();
        let op = self.lane_commit(now, commit, &mut sends);
        (op, self.finish_step(now, sends))
    }

    /// [`commit_in_lane`](Self::commit_in_lane) within a step.
    fn lane_commit(
        &mut self,
        now: Time,
        commit: RelayedCommit,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> OpId {
        if let Some(op) = self.blocked(now, &commit, sends) {
            return op;
        }
        let op = self.new_op();
        let RelayedCommit {
            txn,
            eg,
            read_position,
            leader,
            writes,
            reads,
        } = commit;
        self.lane_visits.changed(eg.clone());
        let lane = self.lanes.entry(eg).or_default();
        let waiting = Waiting {
            op,
            member: Member::after_read(txn, writes, reads, read_position),
            read_position,
            leader,
        };
        lane.wait(waiting, now);
        op
    }

    /// [`blocked_commit`](Self::blocked_commit) for `commit`.
    fn blocked(
        &mut self,
        now: Time,
        commit: &RelayedCommit,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Option<OpId> {
        let RelayedCommit {
            txn,
            eg,
            writes,
            reads,
            ..
        } = commit;
        self.blocked_commit(now, *txn, eg, writes, reads, sends)
    }

    /// Where to send a commit to `eg` now: to the replica named, which commits it in
    /// its shared lane ([`commit_relayed`](Self::commit_relayed)), while this client
    /// lately lost races for the group — its local full replica, or while that one
    /// fails to answer the next full replica; or `leader` (the position leader its read
    /// named), while a lost span says relays duel — or, `None`, itself
    /// (docs/protocol.md, "Relayed commits"). A relay's own lane is its local relay:
    /// only a duel sends its own commits elsewhere.
    fn relay_for(&self, now: Time, eg: &EgId, leader: Option<ReplicaId>) -> Option<ReplicaId> {
        let topology = &self.config.proposer.topology;
        let others = topology.full_replicas().filter(|r| Some(*r) != self.local);
        match self.config.relay_role {
            RelayRole::Direct => None,
            RelayRole::Writer => {
                self.relaying
                    .relay(now, eg, leader, self.local.into_iter().chain(others))
            }
            RelayRole::Relay => self.relaying.leader_to_follow(now, eg, leader, others),
        }
    }

    /// Whether `txn` waits in `eg`'s lane or is a member of its commit in flight.
    fn committing(&self, eg: &EgId, txn: TxnId) -> bool {
        let Some(lane) = self.lanes.get(eg) else {
            return false;
        };
        let in_flight = match lane.busy().and_then(|op| self.ops.get(&op)) {
            Some(Op::Commit(commit)) => commit.ops.iter().any(|(t, _)| *t == txn),
            _ => false,
        };
        in_flight || lane.has_waiting(txn)
    }

    /// How long a relayed commit waits for its relay's answer before it is resolved
    /// here ([`relay_wait`]).
    pub fn relay_wait(&self) -> std::time::Duration {
        relay_wait(self.config.proposer.timeouts.rpc)
    }

    /// Commits transaction `txn`, which read nothing and writes `writes`, without a
    /// read of its own when one of this client's commits to `eg` is in flight: it takes
    /// that commit's read (position, next leader, the prepared transactions pending
    /// there) as its own and waits behind it, to join the next entry (docs/protocol.md,
    /// "Combining commits"). Returns the operation and the position it counts as having
    /// read at — or, with nothing in flight, gives `writes` back: read the group's
    /// position first and [`commit`](Self::commit).
    pub fn commit_blind(
        &mut self,
        now: Time,
        txn: TxnId,
        eg: EgId,
        writes: Vec<RowWrite>,
    ) -> Result<(OpId, Position, Vec<Output>), Vec<RowWrite>> {
        let Some(basis) = self.lend_basis(now, &eg) else {
            return Err(writes);
        };
        let mut reads = ReadSet::default();
        reads.saw_prepared(&basis.prepared);
        let (op, out) = self.commit(
            now,
            txn,
            eg,
            basis.read_position,
            basis.leader,
            writes,
            reads,
        );
        Ok((op, basis.read_position, out))
    }

    /// Prepared transactions its reads saw lock a commit out if it writes what they
    /// read or write, or read what they write: settles them first, then reports a
    /// conflict (the operation returned).
    fn blocked_commit(
        &mut self,
        now: Time,
        txn: TxnId,
        eg: &EgId,
        writes: &[RowWrite],
        reads: &ReadSet,
        sends: &mut Vec<(NodeId, Message)>,
    ) -> Option<OpId> {
        if self.config.proposer.bugs.ignore_prepared_on_commit() {
            return None;
        }
        // A prepare writes, in effect, what its transaction will write.
        let effective = crate::two_phase::effective_writes(eg, writes);
        let (blocking, keys) = reads.blocked_by(effective.iter().map(Vec::as_slice));
        if blocking.is_empty() {
            return None;
        }
        let (blocked, steps) = Blocked::start(eg, txn, &blocking, keys, self.two_phase_clock());
        Some(self.start_composite(now, Composite::Blocked(blocked), steps, sends))
    }

    /// Starts what the idle lanes have waiting (reporting conflicts known at once),
    /// and drops lanes with nothing left.
    fn run_lanes(
        &mut self,
        now: Time,
        sends: &mut Vec<(NodeId, Message)>,
        results: &mut Vec<(OpId, OpResult)>,
    ) {
        let bugs = self.config.proposer.bugs;
        let mut starts: Vec<(EgId, Start)> = Vec::new();
        // Only these can do anything now (`tracking`): the others' commits in flight are
        // unchanged, or they linger on.
        let looked_at = self.lane_visits.take_due(now);
        for eg in &looked_at {
            let Some(lane) = self.lanes.get_mut(eg) else {
                continue;
            };
            if let Some(busy) = lane.busy() {
                let (mut settled, mut won_last, mut members) = (None, false, 0);
                match self.ops.get(&busy) {
                    Some(Op::Commit(op)) if !op.commit.decided() => continue,
                    Some(Op::Commit(op)) => {
                        let (first, winners) = op.commit.seen();
                        lane.learned(first, winners);
                        settled = (winners.len() as u64)
                            .checked_sub(1)
                            .map(|more| Position(first.0 + more));
                        won_last = winners
                            .last()
                            .is_some_and(|w| op.ops.iter().any(|(txn, _)| w.holds(*txn)));
                        members = op.ops.len();
                    }
                    _ => {}
                }
                let woken = settled.map_or(0, |through| {
                    wake_reads(
                        &mut self.ops,
                        &mut self.wiring,
                        &self.config.proposer,
                        (now, eg, through),
                        sends,
                    )
                });
                self.reads_woken += woken as u64;
                lane.ended(now, settled, won_last, (members, woken));
            }
            if lane.lingers(now) {
                continue;
            }
            let (conflicts, start) = lane.next(eg, &bugs);
            for (op, txn, result) in conflicts {
                results.push((op, OpResult::Commit { txn, result }));
            }
            starts.extend(start.map(|s| (eg.clone(), s)));
        }
        for (eg, start) in starts {
            let (first_op, _) = start.members[0];
            let ops: Vec<(TxnId, OpId)> =
                start.members.iter().map(|(op, m)| (m.txn, *op)).collect();
            let unvouched = ops.iter().all(|(t, _)| self.unvouched.stands_on_one(t));
            let members = start.members.into_iter().map(|(_, m)| m).collect();
            let next_leader = self.preferred_leader_of(&eg);
            let mut ctx = self.wiring.ctx(now, &self.config.proposer, first_op, sends);
            let commit = Commit::start(
                &mut ctx,
                eg.clone(),
                start.position,
                (start.leader, start.previous_visible),
                members,
                next_leader,
            );
            self.ops.insert(
                first_op,
                Op::Commit(Box::new(CommitOp {
                    commit,
                    ops,
                    unvouched,
                })),
            );
            if let Some(lane) = self.lanes.get_mut(&eg) {
                lane.started(first_op, now);
            }
        }
        // Lanes not looked at are not idle: busy, or their round lasts.
        for eg in &looked_at {
            if self.lanes.get(eg).is_some_and(|lane| lane.idle(now)) {
                self.lanes.remove(eg);
            }
            self.lane_visits.looked_at(eg, self.lanes.get(eg));
        }
    }

    /// Resolves a commit that ended [`CommitResult::Unknown`] at `position`: settles
    /// that position and says whether `txn` holds it. Once it answers
    /// [`Resolution::NotCommitted`], running the transaction again cannot apply it twice.
    pub fn resolve(
        &mut self,
        now: Time,
        eg: EgId,
        position: Position,
        txn: TxnId,
    ) -> (OpId, Vec<Output>) {
        self.start_resolve(now, eg, position..=position, txn)
    }

    /// Resolves transaction `txn` knowing only its first position (the one after its
    /// read): settles each position of its [`commit_span`](crate::commit_span) in turn
    /// until one holds it. For a writer that cannot be asked — it died, or its answer
    /// was lost — whose commit may have gone on past its first position, as combined
    /// and rebased commits do. [`Resolution::NotCommitted`] is as final as
    /// [`resolve`](Self::resolve)'s: no writer takes it past its span.
    pub fn resolve_from_first(
        &mut self,
        now: Time,
        eg: EgId,
        first: Position,
        txn: TxnId,
    ) -> (OpId, Vec<Output>) {
        self.start_resolve(now, eg, crate::commit_span(first), txn)
    }

    fn start_resolve(
        &mut self,
        now: Time,
        eg: EgId,
        positions: std::ops::RangeInclusive<Position>,
        txn: TxnId,
    ) -> (OpId, Vec<Output>) {
        let op = self.new_op();
        let mut sends = Vec::new();
        let mut ctx = self.wiring.ctx(now, &self.config.proposer, op, &mut sends);
        let resolve = Resolve::start(&mut ctx, eg, positions, txn);
        self.ops.insert(op, Op::Resolve(Box::new(resolve)));
        (op, self.finish_step(now, sends))
    }

    /// Handles one event.
    ///
    /// A reply that no operation waits for and that is no refusal (a visible mark's
    /// acknowledgement after its commit ended, an answer after its operation gave up)
    /// changes nothing: the step returns no outputs, without looking at any operation
    /// or lane for results and deadlines — the wake asked for last still stands. Four
    /// of a commit's eight replies are such acknowledgements. Other steps look only at
    /// the operations and lanes they could have changed (`tracking`).
    pub fn step(&mut self, now: Time, input: Input) -> Vec<Output> {
        let mut sends = Vec::new();
        match input {
            Input::Message { from, message } => {
                if self.waited_for_by_nobody(from, &message) {
                    return Vec::new();
                }
                self.on_message(now, from, message, &mut sends);
            }
            Input::Tick => self.on_tick(now, &mut sends),
            Input::Placement(placement) => self.wiring.observe_placement(placement),
        }
        self.finish_step(now, sends)
    }

    /// A replica's or coordinator's reply that routes to no operation, and that is no
    /// refusal (a [`crate::messages::ReplicaReply::Error`] may say that this client's
    /// placement is behind).
    fn waited_for_by_nobody(&self, from: NodeId, message: &Message) -> bool {
        match (from, message) {
            (NodeId::Replica(_), Message::ReplicaReply(reply)) => {
                !matches!(reply, crate::messages::ReplicaReply::Error { .. })
                    && self.wiring.route(reply.id()).is_none()
            }
            (NodeId::Coordinator(_), Message::CoordinatorReply(reply)) => {
                self.wiring.route(reply.id()).is_none()
            }
            _ => false,
        }
    }

    fn on_message(
        &mut self,
        now: Time,
        from: NodeId,
        message: Message,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        match (from, message) {
            (NodeId::Replica(r), Message::ReplicaReply(reply)) => {
                self.follow_refusal(now, &reply, sends);
                let Some(op) = self.wiring.route(reply.id()).copied() else {
                    return;
                };
                self.with_op(now, op, sends, |state, ctx| match state {
                    Op::Current(read) => read.on_replica_reply(ctx, r, reply),
                    Op::Point(read) => read.on_replica_reply(ctx, reply),
                    Op::GlobalScan(scan) => scan.on_replica_reply(ctx, reply),
                    Op::Commit(op) => op.commit.on_replica_reply(ctx, r, reply),
                    Op::Resolve(resolve) => resolve.on_replica_reply(ctx, r, reply),
                    Op::Relay(relayed) => {
                        if let Some(resolve) = relayed.resolving() {
                            resolve.on_replica_reply(ctx, r, reply);
                        }
                    }
                    Op::Verify(_) | Op::Composite(_) => {}
                });
            }
            (NodeId::Coordinator(r), Message::CoordinatorReply(reply)) => {
                let id = reply.id();
                let Some(op) = self.wiring.route(id).copied() else {
                    return;
                };
                self.with_op(now, op, sends, |state, ctx| match state {
                    Op::Current(read) => read.on_coordinator_reply(ctx, r, reply),
                    Op::Commit(op) => op.commit.on_coordinator_reply(ctx, r, reply),
                    Op::Resolve(resolve) => resolve.on_coordinator_reply(ctx, r, reply),
                    Op::Relay(relayed) => {
                        if let Some(resolve) = relayed.resolving() {
                            resolve.on_coordinator_reply(ctx, r, reply);
                        }
                    }
                    Op::Point(_) | Op::GlobalScan(_) | Op::Verify(_) | Op::Composite(_) => {}
                });
            }
            (_, Message::RelayOutcome { id, txn, result }) => {
                let op = OpId(id);
                let Some(Op::Relay(relayed)) = self.ops.get(&op) else {
                    return;
                };
                if relayed.txn() != txn {
                    return; // for an earlier process of this client
                }
                if relayed.waiting() {
                    // Answered: the group stays relayed while this client writes it.
                    let eg = relayed.group().clone();
                    self.relaying.answered(relayed.relay());
                    self.relaying.hot(now, &eg);
                    if matches!(&result, CommitResult::Conflict { keys } if keys.is_empty()) {
                        self.relaying.lost_span(now, &eg);
                    }
                }
                self.with_op(now, op, sends, |state, ctx| {
                    if let Op::Relay(relayed) = state {
                        relayed.answered(ctx, result);
                    }
                });
            }
            (NodeId::LockNode(n), Message::LockResponse(response)) => {
                match self.wiring.lock_client().on_response(now, n, response) {
                    Ok(outcome) => self.on_lock_outcome(now, outcome, sends),
                    Err(Some(retry)) => sends.push((
                        NodeId::LockNode(retry.to),
                        Message::LockRequest(retry.request),
                    )),
                    Err(None) => {}
                }
            }
            _ => {} // not for a client
        }
    }

    fn on_lock_outcome(
        &mut self,
        now: Time,
        outcome: megastore_lock::LockOutcome,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        if self.on_placement_read(outcome.id, &outcome.result) {
            return;
        }
        let Some(op) = self.wiring.lock_route(outcome.id).copied() else {
            return;
        };
        self.with_op(now, op, sends, |state, ctx| match state {
            Op::Current(read) => read.on_lock_outcome(ctx, outcome.id, outcome.result),
            Op::Commit(op) => op.commit.on_lock_outcome(ctx, outcome.id, outcome.result),
            Op::Resolve(resolve) => resolve.on_lock_outcome(ctx, outcome.id, outcome.result),
            Op::Relay(relayed) => {
                if let Some(resolve) = relayed.resolving() {
                    resolve.on_lock_outcome(ctx, outcome.id, outcome.result);
                }
            }
            Op::GlobalScan(scan) => scan.on_lock_outcome(ctx, outcome.id, outcome.result),
            Op::Point(_) | Op::Verify(_) | Op::Composite(_) => {}
        });
    }

    fn on_tick(&mut self, now: Time, sends: &mut Vec<(NodeId, Message)>) {
        let (failed, retries) = self.wiring.lock_client().on_tick(now);
        sends.extend(
            retries
                .into_iter()
                .map(|s| (NodeId::LockNode(s.to), Message::LockRequest(s.request))),
        );
        for outcome in failed {
            self.on_lock_outcome(now, outcome, sends);
        }
        // The lock outcomes above may have changed operations' deadlines.
        self.ops.refresh_deadlines();
        for op in self.ops.due(now) {
            let mut unanswered = None;
            self.with_op(now, op, sends, |state, ctx| match state {
                Op::Current(read) => read.on_tick(ctx),
                Op::Point(read) => read.on_tick(ctx),
                Op::GlobalScan(scan) => scan.on_tick(ctx),
                Op::Commit(op) => op.commit.on_tick(ctx),
                Op::Resolve(resolve) => resolve.on_tick(ctx),
                Op::Relay(relayed) => {
                    if relayed.on_tick(ctx) {
                        unanswered = Some(relayed.relay());
                    }
                }
                Op::Verify(_) | Op::Composite(_) => {}
            });
            if let Some(relay) = unanswered {
                self.relaying.failed(now, relay);
            }
        }
        let (woken, waiting): (Vec<_>, Vec<_>) =
            self.wakes.drain(..).partition(|(at, _, _)| *at <= now);
        self.wakes = waiting;
        for (_, parent, tag) in woken {
            self.step_ended(now, parent, tag, Ended::Woke, sends);
        }
    }

    /// Step `tag` of composite operation `parent` ended: starts what it asks next.
    fn step_ended(
        &mut self,
        now: Time,
        parent: OpId,
        tag: u32,
        ended: Ended,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let Some(Op::Composite(composite)) = self.ops.get_mut(&parent) else {
            return;
        };
        let steps = composite.on_ended(now, tag, ended);
        self.start_steps(now, parent, steps, sends);
    }

    fn with_op(
        &mut self,
        now: Time,
        op: OpId,
        sends: &mut Vec<(NodeId, Message)>,
        f: impl FnOnce(&mut Op, &mut Ctx<'_, OpId>),
    ) {
        let Some(state) = self.ops.get_mut(&op) else {
            return;
        };
        let mut ctx = self.wiring.ctx(now, &self.config.proposer, op, sends);
        f(state, &mut ctx);
    }

    /// Reports finished operations (a verification's reads to it, which may start
    /// more), drops their state, and says when to wake next.
    fn finish_step(&mut self, now: Time, mut sends: Vec<(NodeId, Message)>) -> Vec<Output> {
        let mut done = Vec::new();
        loop {
            // A lane whose commit in flight changed may have it decided.
            for eg in self.ops.touched_commit_groups() {
                self.lane_visits.changed(eg);
            }
            // Lanes first: a commit that just decided is still there to learn from.
            let mut results = Vec::new();
            self.run_lanes(now, &mut sends, &mut results);
            results.append(&mut self.answered_now);
            results.extend(self.take_results(now));
            if results.is_empty() {
                break;
            }
            for (op, result) in results {
                match (self.children.remove(&op), result) {
                    (Some(Child::Verify { parent, hits }), OpResult::Read(read)) => {
                        if let Some(Op::Verify(state)) = self.ops.get_mut(&parent) {
                            state.on_read(&hits, read);
                        }
                        self.start_verify_reads(now, parent, &mut sends);
                    }
                    (Some(Child::Step { parent, tag }), result) => {
                        let ended = match result {
                            OpResult::Read(read) => Ended::Read(read),
                            OpResult::Commit { result, .. } => Ended::Commit(result),
                            OpResult::Resolve(resolution) => Ended::Resolve(resolution),
                            _ => continue,
                        };
                        self.step_ended(now, parent, tag, ended, &mut sends);
                    }
                    (_, result) => {
                        if let OpResult::Commit { txn, .. } = &result {
                            self.unvouched.reported(txn);
                        }
                        done.push(Output::Done { op, result });
                    }
                }
            }
        }
        let mut out: Vec<Output> = sends
            .into_iter()
            .map(|(to, message)| Output::Send { to, message })
            .collect();
        out.extend(done);
        self.ops.refresh_deadlines();
        #[cfg(debug_assertions)]
        self.check_tracking(now);
        let next = self
            .ops
            .next_deadline()
            .into_iter()
            .chain(self.wiring.lock_client().next_deadline())
            .chain(self.lane_visits.next_linger())
            .chain(self.wakes.iter().map(|(at, _, _)| *at))
            .min();
        out.extend(next.map(Output::WakeAt));
        out
    }

    /// Invariants *touched-covers-changes* and *deadlines-indexed* (`tracking`) at the
    /// end of a step, against every operation and lane (debug builds): no operation has
    /// a result left to report, and every lane not marked changed would do nothing now —
    /// its commit in flight is undecided, or its round lasts and it lingers or has
    /// nothing waiting.
    #[cfg(debug_assertions)]
    fn check_tracking(&self, now: Time) {
        for (op, state) in self.ops.iter() {
            let reports = match state {
                Op::Current(read) => read.result().is_some(),
                Op::Point(read) => read.result().is_some(),
                Op::GlobalScan(scan) => scan.result().is_some(),
                Op::Commit(commit) => commit.commit.has_results() || commit.commit.finished(),
                Op::Resolve(resolve) => resolve.result().is_some(),
                Op::Relay(relayed) => relayed.result().is_some(),
                Op::Verify(verify) => verify.result().is_some(),
                Op::Composite(composite) => composite.result().is_some(),
            };
            assert!(
                !reports,
                "touched-covers-changes: {op:?} has a result untaken"
            );
        }
        for (eg, lane) in &self.lanes {
            let quiet = match lane.busy() {
                Some(busy) => {
                    matches!(self.ops.get(&busy), Some(Op::Commit(c)) if !c.commit.decided())
                }
                None => {
                    lane.round_end().is_some_and(|end| end > now)
                        && (lane.waiting() == 0 || lane.lingers(now))
                }
            };
            assert!(
                quiet || self.lane_visits.is_changed(eg),
                "touched-covers-changes: lane {eg} has work and is not looked at"
            );
        }
        self.lane_visits.check(&self.lanes);
    }

    /// The results operations have now, in operation order; finished ones dropped.
    /// Only those changed since their results were last taken can have any
    /// (*touched-covers-changes*, `tracking`).
    fn take_results(&mut self, now: Time) -> Vec<(OpId, OpResult)> {
        let mut results = Vec::new();
        let mut finished = Vec::new();
        for op in self.ops.take_touched() {
            let Some(state) = self.ops.get_to_report(&op) else {
                continue;
            };
            let op = &op;
            let (result, over) = match state {
                Op::Current(read) => (read.result().cloned().map(OpResult::Read), None),
                Op::Point(read) => {
                    let result = read.result().cloned();
                    if let Some(Ok(found)) = &result {
                        let position = found.position.unwrap_or(Position::NONE);
                        self.unvouched.read_ended(*op, Some(position));
                    }
                    (result.map(OpResult::Read), None)
                }
                Op::GlobalScan(scan) => (scan.result().cloned().map(OpResult::Read), None),
                Op::Commit(commit) => {
                    // Each transaction reports to its own operation.
                    let taken = commit.commit.take_results();
                    if !taken.is_empty() && commit.commit.lost_a_race() {
                        // On a stale snapshot basis, a lost position says the basis was
                        // old, not that the group is contended (`bases`).
                        let group = commit.commit.group();
                        if commit.unvouched {
                            self.unvouched.lost_on_stale(group);
                        } else {
                            self.relaying.hot(now, group);
                            // A relay's lane that lost a whole span duels another's:
                            // its own commits follow the leader (a writer learns it
                            // from its relayed commit's answer instead).
                            let lost_span = taken.iter().any(|(_, result)| {
                                matches!(result, CommitResult::Conflict { keys } if keys.is_empty())
                            });
                            if lost_span && self.config.relay_role == RelayRole::Relay {
                                self.relaying.lost_span(now, group);
                            }
                        }
                    }
                    for (txn, result) in taken {
                        let to = commit
                            .ops
                            .iter()
                            .find(|(t, _)| *t == txn)
                            .map_or(*op, |(_, to)| *to);
                        results.push((to, OpResult::Commit { txn, result }));
                    }
                    (None, Some(commit.commit.finished()))
                }
                Op::Resolve(resolve) => (resolve.result().map(OpResult::Resolve), None),
                Op::Relay(relayed) => (
                    relayed
                        .result()
                        .map(|(txn, result)| OpResult::Commit { txn, result }),
                    None,
                ),
                Op::Verify(verify) => (verify.result().map(OpResult::Verify), None),
                Op::Composite(composite) => (composite.result(), None),
            };
            // Everything but a commit (which settles on after reporting) is over once
            // it has a result.
            if over.unwrap_or(result.is_some()) {
                finished.push(*op);
            }
            results.extend(result.map(|r| (*op, r)));
        }
        for op in finished {
            self.unvouched.read_ended(op, None);
            if let Some(Op::Commit(commit)) = self.ops.remove(&op) {
                // Its lane, if it is still the one in flight there, learns it is gone.
                self.lane_visits.changed(commit.commit.group().clone());
            }
            self.wiring.forget(&op);
            self.wakes.retain(|(_, parent, _)| *parent != op);
        }
        results
    }

    /// The time limits this client runs by (a host resolving an unknown outcome asks
    /// [`Timeouts::keeps_resolving`](crate::proposer::Timeouts::keeps_resolving) whether
    /// to go on).
    pub fn timeouts(&self) -> &crate::proposer::Timeouts {
        &self.config.proposer.timeouts
    }

    /// The knobs this client runs with (empty in production builds): for hosts that
    /// call the core's pure helpers, such as [`crate::queue::consume`].
    pub fn bugs(&self) -> &crate::ProtocolBugs {
        &self.config.proposer.bugs
    }

    /// How many current reads a commit of this client woke as it settled the position
    /// they waited for (docs/protocol.md, "Combining commits", step 8).
    pub fn reads_woken(&self) -> u64 {
        self.reads_woken
    }

    /// How many operations are in flight (including commits settling after their
    /// result was reported).
    pub fn in_flight(&self) -> usize {
        self.ops.len() + self.lanes.values().map(Lane::waiting).sum::<usize>()
    }
}

/// Current reads of `eg` stop waiting for the write in flight through `through`,
/// which the lane's commit just settled ([`CurrentRead::writer_settled`]): its visible
/// marks have left, so asking again now finds the position visible at the local
/// replica. At a hot group the write a read finds in flight is mostly this client's
/// own, and otherwise the read would wait out its learn of the remote voters. Returns
/// how many reads were waiting.
fn wake_reads(
    ops: &mut OpTable,
    wiring: &mut Wiring<OpId>,
    config: &ProposerConfig,
    (now, eg, through): (Time, &EgId, Position),
    sends: &mut Vec<(NodeId, Message)>,
) -> usize {
    let mut woken = 0;
    for op in ops.current_reads_of(eg) {
        let Some(Op::Current(read)) = ops.get_mut(&op) else {
            continue;
        };
        let mut ctx = wiring.ctx(now, config, op, sends);
        if read.writer_settled(&mut ctx, through) {
            woken += 1;
        }
    }
    woken
}

fn op_deadline(state: &Op) -> Option<Time> {
    match state {
        Op::Current(read) => read.deadline(),
        Op::Point(read) => read.deadline(),
        Op::GlobalScan(scan) => scan.deadline(),
        Op::Commit(op) => op.commit.deadline(),
        Op::Resolve(resolve) => resolve.deadline(),
        Op::Relay(relayed) => relayed.deadline(),
        // Their reads and commits have their own (and pauses are the core's).
        Op::Verify(_) | Op::Composite(_) => None,
    }
}
