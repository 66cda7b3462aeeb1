//! Reads: current (docs/protocol.md "Reads"; paper §4.6.2, Figure 7), snapshot and
//! inconsistent.
//!
//! ```text
//!  current:  Query local coordinator ─ vouched ─► Read(settled) ─ rows ─► done
//!                                                              └ its log state ─► CatchUp(local tail) ─► Read
//!                                    └ not / timeout ─► Majority ─► CatchUp(R) ─► Read [─► Validate if R is local]
//!  snapshot: Read at the replica's applied position     inconsistent: Read latest cells
//!  at a position: Read at p, at each replica in turn until one has applied p
//! ```
//!
//! The local position is read only after the coordinator vouched: read earlier, it can
//! predate the write whose reader's validate made the coordinator vouch. A vouched read
//! is one request to the local replica ([`ReadAt::Settled`]): the rows at its visible
//! position when nothing is in flight there, else its log state to catch up from.

use std::collections::BTreeMap;

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_lock::{LockError, LockReply};
use megastore_rowstore::Row;
use megastore_types::{EgId, Epoch, Position, ReplicaId, ReplicaKind, Time};

use super::Ctx;
use super::catch_up::{CatchUp, CatchUpProgress};
use crate::messages::{DataQuery, LogState, ReadAt, ReplicaError, ReplicaReply, ReplicaRequest};
use crate::two_phase::{Prepared, pending};

/// Positions a read's catch-up settles at once. One: a current read's tail is the
/// writes in flight at its replica, usually one or two positions.
const CATCH_UP_IN_FLIGHT_MAX: usize = 1;

/// How many times a read restarts (after a replica failed it) before giving up.
const READ_ATTEMPTS_MAX: u32 = 4;

/// Which kind of read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Sees every write acknowledged before it began, and every write any earlier read
    /// observed.
    Current,
    /// A consistent state as of a replica's applied position; no coordination.
    Snapshot,
    /// The newest cells, log ignored; may see part of an entry.
    Inconsistent,
    /// Exactly the state after this position, from any replica that has applied it: a
    /// transaction's later reads, after its first (current) read fixed the position.
    AtPosition(Position),
}

/// How a current read found its position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPath {
    /// The local coordinator vouched: served locally.
    LocalVouched,
    /// A majority read and catch-up of the replica that served it.
    Majority,
    /// A snapshot read.
    Snapshot,
    /// An inconsistent read.
    Inconsistent,
    /// A read at a given position.
    AtPosition,
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// The position whose state the rows show (`None` for an inconsistent read).
    pub position: Option<Position>,
    /// The rows.
    pub rows: Vec<Row>,
    /// The replica that served it.
    pub replica: ReplicaId,
    /// The position leader of the next position, from the visible entry at
    /// `position` (current and snapshot reads).
    pub next_leader: Option<ReplicaId>,
    /// How the position was found.
    pub path: ReadPath,
    /// The cross-group transactions prepared in the group at `position` (none for an
    /// inconsistent read or a global index scan): what a transaction reading here must
    /// respect when it commits (docs/protocol.md, "Two-phase commit").
    pub prepared: Vec<Prepared>,
}

/// Why a read gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// No replica could serve it in time.
    Unavailable(String),
}

#[derive(Debug)]
enum Phase {
    Query {
        query: u64,
        /// The read-position-before-vouch knob's log-state request.
        #[cfg(feature = "sim-bugs")]
        early: Option<EarlyLogState>,
        deadline: Time,
    },
    LocalRead {
        id: u64,
        deadline: Time,
    },
    Majority {
        ids: BTreeMap<u64, ReplicaId>,
        replies: BTreeMap<ReplicaId, LogState>,
        deadline: Time,
    },
    CatchUp {
        replica: ReplicaId,
        catch_up: CatchUp,
        /// A vouched read's long poll at its replica, beside the catch-up
        /// ([`CurrentRead::vouched_state`]): its request id.
        awaiting: Option<u64>,
    },
    Reading {
        replica: ReplicaId,
        target: Position,
        id: u64,
        next_leader: Option<ReplicaId>,
        deadline: Time,
    },
    Done,
}

/// The read-position-before-vouch knob: the local replica's log state, asked for at
/// the same time as the coordinator (instead of after it vouched).
#[cfg(feature = "sim-bugs")]
#[derive(Debug)]
struct EarlyLogState {
    id: u64,
    /// Its answer, if it came before the coordinator's.
    state: Option<LogState>,
    /// The coordinator vouched before the answer came.
    vouched: bool,
}

/// A current read of one group.
#[derive(Debug)]
pub(crate) struct CurrentRead {
    eg: EgId,
    query: DataQuery,
    local: Option<ReplicaId>,
    phase: Phase,
    /// The epoch the local coordinator's first answer named.
    epoch: Option<Epoch>,
    /// The local coordinator vouched (no validate afterwards).
    vouched: bool,
    attempts: u32,
    result: Option<Result<ReadResult, ReadError>>,
}

impl CurrentRead {
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        eg: EgId,
        query: DataQuery,
        local: Option<ReplicaId>,
    ) -> Self {
        let mut read = CurrentRead {
            eg,
            query,
            local,
            phase: Phase::Done,
            epoch: None,
            vouched: false,
            attempts: 0,
            result: None,
        };
        match local {
            None => read.majority(ctx),
            Some(local) if ctx.config.bugs.read_local_unvouched() => {
                read.vouched = true;
                read.read_local(ctx, local);
            }
            Some(local) => {
                let eg = read.eg.clone();
                let query = ctx.send_coordinator(local, |id| CoordinatorRequest::Query { id, eg });
                #[cfg(feature = "sim-bugs")]
                let early = ctx.config.bugs.read_position_before_vouch().then(|| {
                    let eg = read.eg.clone();
                    EarlyLogState {
                        id: ctx.send_replica(local, |id| ReplicaRequest::LogState { id, eg }),
                        state: None,
                        vouched: false,
                    }
                });
                let deadline = ctx.now + ctx.config.timeouts.rpc;
                read.phase = Phase::Query {
                    query,
                    #[cfg(feature = "sim-bugs")]
                    early,
                    deadline,
                };
            }
        }
        read
    }

    pub(crate) fn result(&self) -> Option<&Result<ReadResult, ReadError>> {
        self.result.as_ref()
    }

    pub(crate) fn deadline(&self) -> Option<Time> {
        match &self.phase {
            Phase::Query { deadline, .. }
            | Phase::LocalRead { deadline, .. }
            | Phase::Majority { deadline, .. }
            | Phase::Reading { deadline, .. } => Some(*deadline),
            Phase::CatchUp { catch_up, .. } => catch_up.deadline(),
            Phase::Done => None,
        }
    }

    /// Reads at the local replica once it is vouched for: one request, answered with
    /// the rows or with the log state to catch up from.
    fn read_local<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, local: ReplicaId) {
        let (eg, query) = (self.eg.clone(), self.query.clone());
        let id = ctx.send_replica(local, |id| ReplicaRequest::Read {
            id,
            eg,
            at: ReadAt::Settled,
            query,
        });
        self.phase = Phase::LocalRead {
            id,
            deadline: ctx.now + ctx.config.timeouts.rpc,
        };
    }

    fn majority<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        self.vouched = false;
        let mut ids = BTreeMap::new();
        for r in ctx.replica_set(&self.eg).voters() {
            let eg = self.eg.clone();
            ids.insert(
                ctx.send_replica(r, |id| ReplicaRequest::LogState { id, eg }),
                r,
            );
        }
        self.phase = Phase::Majority {
            ids,
            replies: BTreeMap::new(),
            deadline: ctx.now + ctx.config.timeouts.rpc,
        };
    }

    fn retry<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, why: &str) {
        self.attempts += 1;
        if self.attempts >= READ_ATTEMPTS_MAX {
            self.phase = Phase::Done;
            self.result = Some(Err(ReadError::Unavailable(why.to_string())));
        } else {
            self.majority(ctx);
        }
    }

    /// Settles positions `next..=target` at `replica`, then reads there.
    fn catch_up<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        replica: ReplicaId,
        next: Position,
        target: Position,
        next_leader: Option<ReplicaId>,
    ) {
        let (catch_up, progress) = CatchUp::start(
            ctx,
            self.eg.clone(),
            next,
            target,
            next_leader,
            CATCH_UP_IN_FLIGHT_MAX,
        );
        self.phase = Phase::CatchUp {
            replica,
            catch_up,
            awaiting: None,
        };
        self.caught_up(ctx, progress);
    }

    /// Reads once the catch-up is done; retries the read if it failed.
    fn caught_up<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, progress: CatchUpProgress) {
        let Phase::CatchUp {
            replica, catch_up, ..
        } = &self.phase
        else {
            return;
        };
        match progress {
            CatchUpProgress::Running => {}
            CatchUpProgress::Failed => self.retry(ctx, "could not settle a position"),
            CatchUpProgress::Done { next_leader } => {
                let (replica, target) = (*replica, catch_up.target());
                self.read_at(ctx, replica, target, next_leader);
            }
        }
    }

    fn read_at<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        replica: ReplicaId,
        target: Position,
        next_leader: Option<ReplicaId>,
    ) {
        let (eg, query) = (self.eg.clone(), self.query.clone());
        let id = ctx.send_replica(replica, |id| ReplicaRequest::Read {
            id,
            eg,
            at: ReadAt::Position(target),
            query,
        });
        self.phase = Phase::Reading {
            replica,
            target,
            id,
            next_leader,
            deadline: ctx.now + ctx.config.timeouts.rpc,
        };
    }

    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) {
        if let Phase::CatchUp { catch_up, .. } = &mut self.phase {
            let progress = catch_up.on_coordinator_reply(ctx, from, reply);
            self.caught_up(ctx, progress);
            return;
        }
        let Phase::Query { query, .. } = &mut self.phase else {
            return;
        };
        let CoordinatorReply::Query {
            id, vouched, epoch, ..
        } = reply
        else {
            return;
        };
        if id != *query {
            return;
        }
        self.epoch = epoch;
        let local = self
            .local
            .expect("only a read with a local replica queries");
        if !vouched {
            self.majority(ctx);
            return;
        }
        #[cfg(feature = "sim-bugs")]
        if let Phase::Query {
            early: Some(early), ..
        } = &mut self.phase
        {
            // The knob: use the position read in parallel with the query.
            match early.state.take() {
                Some(state) => self.vouched_state(ctx, local, state),
                None => early.vouched = true,
            }
            return;
        }
        self.vouched = true;
        self.read_local(ctx, local);
    }

    fn vouched_state<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        local: ReplicaId,
        state: LogState,
    ) {
        self.vouched = true;
        let target = state.highest.max(state.visible);
        self.catch_up(ctx, local, state.visible.next(), target, state.next_leader);
        // Positions in flight at the replica are most likely a writer's, whose visible
        // marks are on their way: the replica answers this long poll as soon as they
        // arrive, while the catch-up learns from the voters — a round trip, the remote
        // ones' answers. Whichever ends first serves the read.
        if let Phase::CatchUp {
            catch_up, awaiting, ..
        } = &mut self.phase
            && target > state.visible
        {
            let eg = self.eg.clone();
            // Held until every position through the target is visible there (the
            // knob: until the first of them is).
            let past = match ctx.config.bugs.awaited_read_short() {
                true => state.visible,
                false => Position(catch_up.target().0 - 1),
            };
            let wait = ctx.config.timeouts.rpc;
            *awaiting = Some(ctx.send_replica(local, |id| ReplicaRequest::AwaitVisible {
                id,
                eg,
                past,
                wait,
            }));
        }
    }

    /// The long poll's answer: once every position through the catch-up's target is
    /// visible at the replica, the read is served there at its visible position (every
    /// position through it chosen, and at least the target: nothing acknowledged
    /// before the read began is missed). Otherwise the catch-up goes on.
    fn awaited<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, state: LogState) {
        let Phase::CatchUp {
            replica, catch_up, ..
        } = &self.phase
        else {
            return;
        };
        if state.visible >= catch_up.target() || ctx.config.bugs.awaited_read_short() {
            let replica = *replica;
            self.read_at(ctx, replica, state.visible, state.next_leader);
        }
    }

    pub(crate) fn on_replica_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: ReplicaReply,
    ) {
        match &mut self.phase {
            #[cfg(feature = "sim-bugs")]
            Phase::Query {
                early: Some(early), ..
            } => {
                if let ReplicaReply::LogState { id, state } = reply
                    && id == early.id
                {
                    if early.vouched {
                        let local = self.local.expect("early reads go to the local replica");
                        self.vouched_state(ctx, local, state);
                    } else {
                        early.state = Some(state);
                    }
                }
            }
            Phase::Query { .. } => {}
            Phase::LocalRead { id, .. } => match reply {
                ReplicaReply::LogState {
                    id: reply_id,
                    state,
                } if reply_id == *id => {
                    self.vouched_state(ctx, from, state);
                }
                ReplicaReply::Data {
                    id: reply_id,
                    at: Some(at),
                    rows,
                    pending,
                    next_leader,
                } if reply_id == *id => {
                    self.vouched = true;
                    self.finish(ctx, from, at, next_leader, rows, pending);
                }
                ReplicaReply::Error { id: reply_id, .. } if reply_id == *id => self.majority(ctx),
                _ => {}
            },
            Phase::Majority { ids, replies, .. } => {
                let ReplicaReply::LogState { id, state } = reply else {
                    return;
                };
                if ids.remove(&id).is_none() {
                    return;
                }
                replies.insert(from, state);
                if replies.len() >= ctx.replica_set(&self.eg).majority() {
                    self.majority_answered(ctx);
                }
            }
            Phase::CatchUp {
                awaiting: Some(awaiting),
                ..
            } if *awaiting == reply.id() => {
                if let ReplicaReply::LogState { state, .. } = reply {
                    self.awaited(ctx, state);
                }
            }
            Phase::CatchUp { catch_up, .. } if catch_up.owns(reply.id()) => {
                let progress = catch_up.on_replica_reply(ctx, from, reply);
                self.caught_up(ctx, progress);
            }
            Phase::Reading {
                replica,
                target,
                id,
                next_leader,
                ..
            } => {
                if reply.id() != *id {
                    return;
                }
                let (replica, target, next_leader) = (*replica, *target, *next_leader);
                match reply {
                    ReplicaReply::Data { rows, pending, .. } => {
                        self.finish(ctx, replica, target, next_leader, rows, pending)
                    }
                    ReplicaReply::Error {
                        error: ReplicaError::NotApplied { applied },
                        ..
                    } => {
                        // Visibility marks still on their way (or lost): settle again
                        // from what it applied, which re-sends them.
                        self.attempts += 1;
                        if self.attempts >= READ_ATTEMPTS_MAX {
                            self.retry(ctx, "replica did not apply in time");
                        } else {
                            self.catch_up(ctx, replica, applied.next(), target, next_leader);
                        }
                    }
                    _ => self.retry(ctx, "replica refused the read"),
                }
            }
            _ => {}
        }
    }

    /// A majority answered: the highest position any of them accepted is the highest
    /// possibly chosen. Catch up the local full replica if it answered, else the most
    /// up-to-date full replica that did.
    fn majority_answered<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let Phase::Majority { replies, .. } = &self.phase else {
            return;
        };
        let target = replies
            .values()
            .map(|s| s.highest.max(s.visible))
            .max()
            .unwrap_or(Position::NONE);
        let topology = &ctx.config.topology;
        let full = |r: &ReplicaId| topology.kind(*r) == Some(ReplicaKind::Full);
        // A replica whose next position is truncated elsewhere cannot be caught up by
        // settling (it waits for a snapshot install).
        let gone = replies
            .values()
            .map(|s| s.truncated)
            .max()
            .unwrap_or(Position::NONE);
        let catchable = |r: &ReplicaId| replies.get(r).is_some_and(|s| s.visible >= gone);
        let chosen = self.local.filter(|l| catchable(l)).or_else(|| {
            replies
                .iter()
                .filter(|(r, _)| full(r))
                .max_by_key(|(_, s)| (s.applied, s.visible))
                .map(|(r, _)| *r)
        });
        match chosen {
            Some(r) => {
                let state = replies[&r];
                let next_leader = if state.visible == target {
                    state.next_leader
                } else {
                    None
                };
                self.catch_up(ctx, r, state.visible.next(), target, next_leader);
            }
            None => self.retry(ctx, "no full replica answered"),
        }
    }

    fn finish<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        replica: ReplicaId,
        target: Position,
        next_leader: Option<ReplicaId>,
        rows: Vec<Row>,
        pending_rows: Vec<Row>,
    ) {
        // Validate only when the replica caught up was the local one, with the epoch of
        // the first query; never after a vouched read (nothing to validate).
        let validate_remote = ctx.config.bugs.validate_after_remote_catchup();
        if let (Some(local), Some(epoch), false) = (self.local, self.epoch, self.vouched)
            && (replica == local || validate_remote)
        {
            let eg = self.eg.clone();
            ctx.send_coordinator(local, |_| CoordinatorRequest::Validate {
                eg,
                position: target,
                epoch,
            });
        }
        let path = if self.vouched {
            ReadPath::LocalVouched
        } else {
            ReadPath::Majority
        };
        self.result = Some(Ok(ReadResult {
            position: Some(target),
            rows,
            replica,
            next_leader,
            path,
            prepared: pending(&self.eg, &pending_rows),
        }));
        self.phase = Phase::Done;
    }

    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        if let Phase::CatchUp { catch_up, .. } = &mut self.phase {
            let progress = catch_up.on_lock_outcome(ctx, id, result);
            self.caught_up(ctx, progress);
        }
    }

    /// The group read.
    pub(crate) fn eg(&self) -> &EgId {
        &self.eg
    }

    /// A commit of this proposer to the group settled every position through
    /// `through`: a catch-up waiting there for the write in flight asks again now
    /// ([`CatchUp::writer_settled`]). At a hot group that write is usually the client's
    /// own, and the read would otherwise wait for its learn's remote answers. Returns
    /// whether the read was waiting.
    pub(crate) fn writer_settled<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        through: Position,
    ) -> bool {
        let Phase::CatchUp { catch_up, .. } = &mut self.phase else {
            return false;
        };
        let (woken, progress) = catch_up.writer_settled(ctx, through);
        self.caught_up(ctx, progress);
        woken
    }

    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let now = ctx.now;
        match &mut self.phase {
            Phase::Query { deadline, .. } | Phase::LocalRead { deadline, .. }
                if now >= *deadline =>
            {
                self.majority(ctx)
            }
            Phase::Majority { deadline, .. } if now >= *deadline => {
                self.retry(ctx, "no majority answered")
            }
            Phase::Reading { deadline, .. } if now >= *deadline => {
                self.retry(ctx, "the read timed out")
            }
            Phase::CatchUp { catch_up, .. } => {
                let progress = catch_up.on_tick(ctx);
                self.caught_up(ctx, progress);
            }
            _ => {}
        }
    }
}

/// How many times a read at a position goes through its candidates: a replica that
/// has not applied the position yet may have by the second time.
const AT_POSITION_ROUNDS: usize = 2;

/// What a point read reads: rows of one group.
#[derive(Debug, Clone)]
pub(crate) struct PointTarget {
    pub(crate) eg: EgId,
    pub(crate) query: DataQuery,
}

/// A snapshot, inconsistent or at-position read: one request, tried at each candidate
/// replica.
#[derive(Debug)]
pub(crate) struct PointRead {
    target: PointTarget,
    mode: ReadMode,
    candidates: Vec<ReplicaId>,
    id: Option<(u64, ReplicaId, Time)>,
    /// Why each candidate tried did not serve, in order: what the error says when
    /// none did (an operator told only "no replica served" cannot tell a down replica
    /// from an overloaded or a refusing one).
    misses: Vec<(ReplicaId, Miss)>,
    result: Option<Result<ReadResult, ReadError>>,
}

/// Why a candidate replica did not serve a point read.
#[derive(Debug)]
enum Miss {
    /// No answer within the RPC timeout.
    NoAnswer,
    /// It refused.
    Refused(ReplicaError),
    /// It answered with something that is not a read's answer.
    Unexpected,
}

/// `misses` for an error message: each replica tried and why it did not serve, in
/// order, a replica tried twice (a read at a position) once per try.
fn describe_misses(misses: &[(ReplicaId, Miss)], rpc_timeout: std::time::Duration) -> String {
    let each: Vec<String> = misses
        .iter()
        .map(|(replica, miss)| match miss {
            Miss::NoAnswer => format!("replica {}: no answer within {rpc_timeout:?}", replica.0),
            Miss::Refused(error) => format!("replica {}: {error}", replica.0),
            Miss::Unexpected => format!("replica {}: an unexpected answer", replica.0),
        })
        .collect();
    each.join("; ")
}

impl PointRead {
    /// `candidates`: replicas able to serve, best first.
    pub(crate) fn start<K: Clone + Ord>(
        ctx: &mut Ctx<'_, K>,
        target: PointTarget,
        mode: ReadMode,
        candidates: Vec<ReplicaId>,
    ) -> Self {
        let candidates = match mode {
            ReadMode::AtPosition(_) => candidates.repeat(AT_POSITION_ROUNDS),
            _ => candidates,
        };
        let mut read = PointRead {
            target,
            mode,
            candidates,
            id: None,
            misses: Vec::new(),
            result: None,
        };
        read.try_next(ctx);
        read
    }

    fn try_next<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        if self.candidates.is_empty() {
            let last_refusal = self.misses.iter().rev().find_map(|(_, miss)| match miss {
                Miss::Refused(error) => Some(error),
                _ => None,
            });
            let why = match (self.mode, last_refusal) {
                (ReadMode::AtPosition(p), Some(ReplicaError::HistoryFrom { installed })) => {
                    format!(
                        "no replica keeps the data of position {} any more (history from {})",
                        p.0, installed.0
                    )
                }
                (ReadMode::AtPosition(p), _) => {
                    format!("no replica that has applied position {} answered", p.0)
                }
                _ => "no replica served the read".into(),
            };
            let why = match self.misses.is_empty() {
                true => why,
                false => format!(
                    "{why} ({})",
                    describe_misses(&self.misses, ctx.config.timeouts.rpc)
                ),
            };
            self.result = Some(Err(ReadError::Unavailable(why)));
            self.id = None;
            return;
        }
        let replica = self.candidates.remove(0);
        let at = match self.mode {
            ReadMode::Snapshot => ReadAt::Applied,
            ReadMode::AtPosition(_) if ctx.config.bugs.read_at_position_reads_applied() => {
                ReadAt::Applied
            }
            ReadMode::AtPosition(p) => ReadAt::Position(p),
            ReadMode::Current | ReadMode::Inconsistent => ReadAt::Latest,
        };
        let PointTarget { eg, query } = self.target.clone();
        let id = ctx.send_replica(replica, |id| ReplicaRequest::Read { id, eg, at, query });
        self.id = Some((id, replica, ctx.now + ctx.config.timeouts.rpc));
    }

    pub(crate) fn result(&self) -> Option<&Result<ReadResult, ReadError>> {
        self.result.as_ref()
    }

    pub(crate) fn deadline(&self) -> Option<Time> {
        self.id.map(|(_, _, deadline)| deadline)
    }

    pub(crate) fn on_replica_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        reply: ReplicaReply,
    ) {
        let Some((id, replica, _)) = self.id else {
            return;
        };
        if reply.id() != id {
            return;
        }
        match reply {
            ReplicaReply::Data {
                at,
                rows,
                pending,
                next_leader,
                ..
            } => {
                let prepared = crate::two_phase::pending(&self.target.eg, &pending);
                let path = match self.mode {
                    ReadMode::Snapshot => ReadPath::Snapshot,
                    ReadMode::AtPosition(_) => ReadPath::AtPosition,
                    ReadMode::Current | ReadMode::Inconsistent => ReadPath::Inconsistent,
                };
                // A snapshot read's replica names the leader its applied entry named
                // (a hot group's blind write relays there when relays duel).
                let next_leader = next_leader.filter(|_| self.mode == ReadMode::Snapshot);
                self.result = Some(Ok(ReadResult {
                    position: at,
                    rows,
                    replica,
                    next_leader,
                    path,
                    prepared,
                }));
                self.id = None;
            }
            ReplicaReply::Error { error, .. } => {
                self.misses.push((replica, Miss::Refused(error)));
                self.try_next(ctx);
            }
            _ => {
                self.misses.push((replica, Miss::Unexpected));
                self.try_next(ctx);
            }
        }
    }

    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        if let Some((_, replica, deadline)) = self.id
            && ctx.now >= deadline
        {
            self.misses.push((replica, Miss::NoAnswer));
            self.try_next(ctx);
        }
    }
}
