mod placed;

use std::collections::BTreeMap;

use crate::groups::Groups;
use std::time::Duration;

use megastore_lock::{
    LockClient, LockCommand, LockError, LockReply, LockResponse, LockSend, SessionId,
};
use megastore_placement::{Placement, ServerId};
use megastore_types::{EgId, Epoch, LockNodeId, NodeId, Position, ReplicaId, Time};

use crate::messages::{CoordinatorReply, CoordinatorRequest};

megastore_types::bug_knobs! {
    /// Deliberate mistakes the simulator re-introduces to prove its checkers catch them.
    /// All off in every real deployment.
    ///
    /// Compiled in only with the `sim-bugs` feature; without it every knob is a constant
    /// `false` and the struct is empty.
    pub struct CoordinatorBugs {
        /// Accept a validate from any epoch.
        validate_ignores_epoch,
        /// Accept a validate even when a later position was invalidated.
        validate_ignores_position,
        /// Accept validates and vouch without holding the lock (and its lease).
        validate_without_lock,
        /// When revoked, give the lock back at once but go on vouching until the lease
        /// ends ("the lease still holds") — writers then skip a coordinator that vouches.
        release_while_vouching,
        /// Keep the per-group state when the lock is lost and taken again: a coordinator
        /// can then vouch, in its new epoch, for a group whose invalidation it missed while
        /// it held no lock (docs/protocol.md: every epoch change empties the state).
        keep_state_across_epochs,
        /// At its bound on invalid groups, drop a new invalidation (the group stays as
        /// it was, valid perhaps) instead of restarting its epoch: "the table is full".
        drop_invalidate_when_full,
        /// A placed coordinator keeps its epoch when a range arrives at its server: what
        /// it validated during an earlier stay of the range vouches for the copy the
        /// range came back with, which may lack writes chosen meanwhile.
        vouch_moved_in_range,
        /// A placed coordinator vouches in a new epoch by the placement it read before
        /// it took its lock: a full replica whose removal was fenced while its lock was
        /// free (`Placement::removal_fence`) can then vouch for a range it is leaving.
        vouch_before_placement_read,
    }
}

/// The default of [`CoordinatorConfig::valid_max`].
pub const VALID_TRACKED_MAX: usize = 4_000_000;

/// The default of [`CoordinatorConfig::invalid_max`].
pub const INVALID_TRACKED_MAX: usize = 1_000_000;

/// How a coordinator runs.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// The full replica it serves.
    pub replica: ReplicaId,
    /// The lock service's nodes.
    pub lock_nodes: Vec<LockNodeId>,
    /// How long one lock request try may take.
    pub lock_attempt_timeout: Duration,
    /// How often to renew the session (well under the lease).
    pub keepalive_interval: Duration,
    /// Bound on clock rate error between any two nodes, in parts per million.
    pub max_clock_drift_ppm: u32,
    /// Extra safety margin taken off every lease.
    pub lease_margin: Duration,
    /// Wait before trying again to open a session or take the lock.
    pub retry_delay: Duration,
    /// Where this start numbers its lock requests: random on every start, so that a
    /// reply to the previous process is never taken for an answer to this one.
    pub first_request_id: u64,
    /// Valid groups it remembers at most: past this, validating one more forgets
    /// another (which costs that group's readers a majority read, until it is
    /// validated again).
    pub valid_max: usize,
    /// Invalid groups it remembers at most. An invalid group is never forgotten within
    /// an epoch; one more than this stops it vouching for every group and starts a new
    /// epoch (it gives its lock back and takes it again), which starts empty.
    pub invalid_max: usize,
    /// Simulator-only mistakes.
    pub bugs: CoordinatorBugs,
}

/// The lock a coordinator that is not placed holds while it serves: it runs on its
/// replica's own server, `ServerId(replica)` (one server per replica).
pub fn lock_name(replica: ReplicaId) -> String {
    coordinator_lock(ServerId(replica.0))
}

/// The lock the coordinator of replica server `server` holds while it serves. A
/// writer that finds it lapsed (and the placement, read after, still naming `server`
/// for the slot) needs no invalidate there.
pub fn coordinator_lock(server: ServerId) -> String {
    format!("coordinator/{}", server.0)
}

/// What the coordinator knows about one entity group in the current epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// The replica holds every position through `through`, and no later position was
    /// invalidated since.
    Valid {
        /// Validated through this position.
        through: Position,
    },
    /// A write at `at` was chosen without this replica's accept. Never evicted within
    /// an epoch: forgetting it would let an older validate through.
    Invalid {
        /// The highest invalidated position.
        at: Position,
    },
}

/// An event for the coordinator.
#[derive(Debug, Clone)]
pub enum Input {
    /// The process started: open a session and take the lock.
    Start,
    /// A reader or writer's request.
    Request {
        /// Who sent it (replies go back there).
        from: NodeId,
        /// The request.
        request: CoordinatorRequest,
    },
    /// The process is stopping: stop vouching, then give the lock back so writers
    /// need not wait for its lease to end.
    Stop,
    /// A lock node's response.
    Lock {
        /// The node.
        from: LockNodeId,
        /// The response.
        response: LockResponse,
    },
    /// Time passed (a [`Output::WakeAt`] came due).
    Tick,
    /// The host read this placement (a placed coordinator only, see
    /// [`Coordinator::placed`]; older than the one it has: ignored).
    Placement(Placement),
}

/// What the coordinator asks its driver to do. It keeps no durable state: nothing
/// needs persisting before a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a reply.
    Reply {
        /// To whom.
        to: NodeId,
        /// The reply.
        reply: CoordinatorReply,
    },
    /// Send a lock service request.
    Lock(LockSend),
    /// Feed [`Input::Tick`] at (or after) this time.
    WakeAt(Time),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockRequestKind {
    OpenSession {
        sent_at: Time,
    },
    Acquire,
    KeepAlive {
        sent_at: Time,
    },
    Close,
    /// The placement read a placed coordinator makes in each new epoch
    /// (*placement-read-after-lock*).
    ReadPlacement {
        epoch: Epoch,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No session: open one at `retry_at`.
    NoSession { retry_at: Time },
    /// Waiting for the session to open.
    Opening,
    /// A session, not (yet) the lock: try at `retry_at` unless a request is out.
    Acquiring {
        session: SessionId,
        retry_at: Option<Time>,
    },
    /// Holding the lock: serving in this epoch.
    Serving { session: SessionId, epoch: Epoch },
    /// Revoked by an operator, or stopping: never vouch again in this process. The
    /// session is closed (giving the lock back) once nothing is vouched for any more;
    /// `closing` is that session until the lock service confirms, retried at
    /// `retry_at` after a failure.
    Disabled {
        closing: Option<SessionId>,
        retry_at: Option<Time>,
    },
}

/// The coordinator of one full replica (docs/protocol.md): which entity groups its replica
/// is current for, valid only while it holds its lock and that lock's lease.
#[derive(Debug)]
pub struct Coordinator {
    config: CoordinatorConfig,
    lock: LockClient,
    requests: BTreeMap<u64, LockRequestKind>,
    phase: Phase,
    /// The session's lease, as the service granted it.
    lease: Duration,
    /// Local time until which the lease certainly holds on the service's side.
    lease_end: Time,
    keepalive_due: Time,
    keepalive_out: bool,
    groups: Groups,
    /// Its server and the placement it judges by (`None`: not placed, every group is
    /// its replica's).
    placement: Option<(ServerId, Placement)>,
    /// Whether it read the placement since it took its lock (placed only).
    placement_check: placed::PlacementCheck,
}

impl Coordinator {
    /// A coordinator that has not started.
    pub fn new(config: CoordinatorConfig) -> Self {
        let lock = LockClient::new(config.lock_nodes.clone(), config.lock_attempt_timeout)
            .first_id(config.first_request_id);
        Self {
            config,
            lock,
            requests: BTreeMap::new(),
            phase: Phase::NoSession {
                retry_at: Time::ZERO,
            },
            lease: Duration::ZERO,
            lease_end: Time::ZERO,
            keepalive_due: Time::ZERO,
            keepalive_out: false,
            groups: Groups::default(),
            placement: None,
            placement_check: placed::PlacementCheck::Read,
        }
    }

    /// Forgets every group (an epoch change, or it stopped vouching).
    fn forget_all(&mut self) {
        self.groups.clear();
    }

    /// How many groups it remembers: `(valid, invalid)`.
    pub fn tracked(&self) -> (usize, usize) {
        (self.groups.valid(), self.groups.invalid())
    }

    /// The epoch it serves in, if it holds its lock.
    pub fn epoch(&self) -> Option<Epoch> {
        match self.phase {
            Phase::Serving { epoch, .. } => Some(epoch),
            _ => None,
        }
    }

    /// What it records for `eg`.
    pub fn group(&self, eg: &EgId) -> Option<GroupState> {
        self.groups.get(eg)
    }

    /// Whether it holds its lock with a lease still running at `now`.
    pub fn holds_lease(&self, now: Time) -> bool {
        matches!(self.phase, Phase::Serving { .. }) && now < self.lease_end
    }

    /// Whether a query for `eg` at `now` would say "current".
    pub fn vouches(&self, now: Time, eg: &EgId) -> bool {
        let bugs = self.config.bugs;
        let retired = self.retired();
        let serving = self.holds_lease(now)
            || (bugs.validate_without_lock() && !retired)
            || (bugs.release_while_vouching() && retired && now < self.lease_end);
        serving && self.serves(eg) && matches!(self.groups.get(eg), Some(GroupState::Valid { .. }))
    }

    /// Whether it has stopped for good and given its lock back (the lock service
    /// confirmed closing its session), so nobody need wait for its lease.
    pub fn released(&self) -> bool {
        matches!(self.phase, Phase::Disabled { closing: None, .. })
    }

    /// Whether it stopped for good (revoked by an operator, or stopping): it never
    /// vouches again.
    pub fn retired(&self) -> bool {
        matches!(self.phase, Phase::Disabled { .. })
    }

    fn session(&self) -> Option<SessionId> {
        match self.phase {
            Phase::Acquiring { session, .. } | Phase::Serving { session, .. } => Some(session),
            _ => None,
        }
    }

    /// How long a lease surely lasts here, counted from when the request that got it
    /// was sent: shortened by twice the drift bound (our clock and the service's may
    /// err in opposite directions) and the margin.
    fn safe_lease(&self, lease: Duration) -> Duration {
        megastore_lock::holder_lease(
            lease,
            self.config.max_clock_drift_ppm,
            self.config.lease_margin,
        )
    }

    /// Handles one event.
    pub fn step(&mut self, now: Time, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Start => self.open_session(now, &mut out),
            Input::Stop => self.retire(now, &mut out),
            Input::Request { from, request } => self.handle_request(now, from, request, &mut out),
            Input::Lock { from, response } => match self.lock.on_response(now, from, response) {
                Ok(outcome) => {
                    if let Some(kind) = self.requests.remove(&outcome.id) {
                        self.on_lock_outcome(now, kind, outcome.result, &mut out);
                    }
                }
                Err(retry) => out.extend(retry.map(Output::Lock)),
            },
            Input::Tick => self.on_tick(now, &mut out),
            Input::Placement(placement) => self.observe_placement(now, placement, &mut out),
        }
        out.extend(self.next_wake().map(Output::WakeAt));
        self.check_invariants();
        out
    }

    fn send_lock(
        &mut self,
        now: Time,
        command: LockCommand,
        kind: LockRequestKind,
        out: &mut Vec<Output>,
    ) {
        let (id, send) = self.lock.start(now, command);
        self.requests.insert(id, kind);
        out.push(Output::Lock(send));
    }

    fn open_session(&mut self, now: Time, out: &mut Vec<Output>) {
        self.phase = Phase::Opening;
        let owner = self.lock_name();
        self.send_lock(
            now,
            LockCommand::OpenSession { owner },
            LockRequestKind::OpenSession { sent_at: now },
            out,
        );
    }

    fn acquire(&mut self, now: Time, session: SessionId, out: &mut Vec<Output>) {
        self.phase = Phase::Acquiring {
            session,
            retry_at: None,
        };
        let lock = self.lock_name();
        self.send_lock(
            now,
            LockCommand::Acquire { session, lock },
            LockRequestKind::Acquire,
            out,
        );
    }

    /// Leaves the current epoch: every group becomes unknown.
    fn lose_lock(&mut self, now: Time) {
        if !self.config.bugs.keep_state_across_epochs() {
            self.forget_all();
        }
        self.keepalive_out = false;
        self.phase = Phase::NoSession {
            retry_at: now + self.config.retry_delay,
        };
    }

    /// Stops vouching for good (revoked, or stopping), and only then closes the
    /// session, which gives the lock back: a writer that finds the lock free may skip
    /// this coordinator at once, because nothing it said can still be relied on.
    fn retire(&mut self, now: Time, out: &mut Vec<Output>) {
        if self.retired() {
            return;
        }
        let session = self.session();
        if !self.config.bugs.release_while_vouching() {
            self.forget_all();
        }
        self.keepalive_out = false;
        self.phase = Phase::Disabled {
            closing: session,
            retry_at: None,
        };
        if let Some(session) = session {
            self.close(now, session, out);
        }
    }

    fn close(&mut self, now: Time, session: SessionId, out: &mut Vec<Output>) {
        self.send_lock(
            now,
            LockCommand::CloseSession { session },
            LockRequestKind::Close,
            out,
        );
    }

    fn on_lock_outcome(
        &mut self,
        now: Time,
        kind: LockRequestKind,
        result: Result<LockReply, LockError>,
        out: &mut Vec<Output>,
    ) {
        // The lock client retries a request across nodes for a while, so an answer can
        // come long after the coordinator moved on: one about a session it no longer
        // holds says nothing about the current one.
        let stale_session = match &result {
            Err(LockError::SessionExpired(s) | LockError::SessionRevoked(s)) => {
                self.session() != Some(*s)
            }
            _ => false,
        };
        if stale_session && !matches!(kind, LockRequestKind::Close) {
            return;
        }
        match (kind, result) {
            // A session opened by an earlier attempt, after this coordinator gave up on
            // it and went on (or stopped): not its session; closing it tidies up.
            (LockRequestKind::OpenSession { .. }, Ok(LockReply::Session { session, .. }))
                if !matches!(self.phase, Phase::Opening) && !self.retired() =>
            {
                self.close(now, session, out);
            }
            (LockRequestKind::OpenSession { .. }, Err(_))
                if !matches!(self.phase, Phase::Opening) => {}
            (LockRequestKind::OpenSession { .. }, Ok(LockReply::Session { session, .. }))
                if self.retired() =>
            {
                // Stopped while the session was being opened: it holds nothing, but
                // closing it tidies up.
                self.phase = Phase::Disabled {
                    closing: Some(session),
                    retry_at: None,
                };
                self.close(now, session, out);
            }
            (LockRequestKind::OpenSession { .. }, _) if self.retired() => {}
            (
                LockRequestKind::OpenSession { sent_at },
                Ok(LockReply::Session { session, lease }),
            ) => {
                self.lease = lease;
                self.lease_end = sent_at + self.safe_lease(lease);
                self.keepalive_due = now + self.config.keepalive_interval;
                self.acquire(now, session, out);
            }
            (LockRequestKind::OpenSession { .. }, _) => {
                self.phase = Phase::NoSession {
                    retry_at: now + self.config.retry_delay,
                };
            }
            (LockRequestKind::Acquire, Ok(LockReply::Acquired { sequencer })) => {
                if let Phase::Acquiring { session, .. } = self.phase {
                    // A new epoch starts empty: validates from older epochs are refused,
                    // and nothing is vouched for until a reader validates it again.
                    if !self.config.bugs.keep_state_across_epochs() {
                        self.forget_all();
                    }
                    self.phase = Phase::Serving {
                        session,
                        epoch: Epoch(sequencer.0),
                    };
                    self.read_placement_after_lock(now, out);
                }
            }
            (
                LockRequestKind::Acquire,
                Err(LockError::SessionExpired(_) | LockError::SessionRevoked(_)),
            ) => {
                if !self.retired() {
                    self.lose_lock(now);
                }
            }
            (LockRequestKind::Acquire, _) => {
                // Held by an older incarnation (until its lease ends) or unavailable.
                if let Phase::Acquiring { session, .. } = self.phase {
                    self.phase = Phase::Acquiring {
                        session,
                        retry_at: Some(now + self.config.retry_delay),
                    };
                }
            }
            (LockRequestKind::KeepAlive { .. }, _) if self.retired() => {
                self.keepalive_out = false;
            }
            (LockRequestKind::KeepAlive { sent_at }, result) => {
                self.keepalive_out = false;
                match result {
                    Ok(LockReply::Renewed { lease }) => {
                        self.lease = lease;
                        self.lease_end = self.lease_end.max(sent_at + self.safe_lease(lease));
                    }
                    Err(LockError::SessionRevoked(_)) => self.retire(now, out),
                    Err(LockError::SessionExpired(_)) => self.lose_lock(now),
                    // Unreachable service: the lease runs out locally if this persists.
                    _ => {}
                }
            }
            (LockRequestKind::Close, result) => {
                if let Phase::Disabled {
                    closing: Some(session),
                    ..
                } = self.phase
                {
                    let retry_at = match result {
                        Ok(_) | Err(LockError::SessionExpired(_)) => None,
                        Err(_) => Some(now + self.config.retry_delay),
                    };
                    self.phase = Phase::Disabled {
                        closing: retry_at.map(|_| session),
                        retry_at,
                    };
                }
            }
            (LockRequestKind::ReadPlacement { epoch }, result) => {
                self.on_placement_read(now, epoch, result, out);
            }
        }
    }

    fn on_tick(&mut self, now: Time, out: &mut Vec<Output>) {
        let (failed, retries) = self.lock.on_tick(now);
        out.extend(retries.into_iter().map(Output::Lock));
        for outcome in failed {
            if let Some(kind) = self.requests.remove(&outcome.id) {
                self.on_lock_outcome(now, kind, outcome.result, out);
            }
        }
        if self
            .placement_check
            .retry_at(self.epoch())
            .is_some_and(|at| now >= at)
        {
            self.read_placement_after_lock(now, out);
        }
        match self.phase {
            Phase::NoSession { retry_at } if now >= retry_at => self.open_session(now, out),
            Phase::Acquiring {
                session,
                retry_at: Some(at),
            } if now >= at => self.acquire(now, session, out),
            Phase::Disabled {
                closing: Some(session),
                retry_at: Some(at),
            } if now >= at => {
                self.phase = Phase::Disabled {
                    closing: Some(session),
                    retry_at: None,
                };
                self.close(now, session, out);
            }
            _ => {}
        }
        if let Some(session) = self
            .session()
            .filter(|_| now >= self.keepalive_due && !self.keepalive_out)
        {
            self.keepalive_out = true;
            self.keepalive_due = now + self.config.keepalive_interval;
            self.send_lock(
                now,
                LockCommand::KeepAlive { session },
                LockRequestKind::KeepAlive { sent_at: now },
                out,
            );
        }
    }

    fn next_wake(&self) -> Option<Time> {
        let phase_due = match self.phase {
            Phase::NoSession { retry_at } => Some(retry_at),
            Phase::Acquiring { retry_at, .. } | Phase::Disabled { retry_at, .. } => retry_at,
            _ => None,
        };
        let keepalive_due = match self.phase {
            Phase::Acquiring { .. } | Phase::Serving { .. } if !self.keepalive_out => {
                Some(self.keepalive_due)
            }
            _ => None,
        };
        let placement_retry = self.placement_check.retry_at(self.epoch());
        [
            phase_due,
            keepalive_due,
            placement_retry,
            self.lock.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_request(
        &mut self,
        now: Time,
        from: NodeId,
        request: CoordinatorRequest,
        out: &mut Vec<Output>,
    ) {
        match request {
            CoordinatorRequest::Query { id, eg } => {
                let reply = CoordinatorReply::Query {
                    id,
                    vouched: self.vouches(now, &eg),
                    epoch: self.epoch(),
                    retired: self.retired(),
                };
                out.push(Output::Reply { to: from, reply });
            }
            CoordinatorRequest::Invalidate { id, eg, position } => {
                // Recorded even where not served: an invalidation is always safe, and
                // an aborted move's source serves the group again.
                let served = self.serves(&eg);
                self.invalidate(now, eg, position, out);
                let reply = if served {
                    CoordinatorReply::Invalidated { id }
                } else {
                    CoordinatorReply::NotServed { id }
                };
                out.push(Output::Reply { to: from, reply });
            }
            CoordinatorRequest::Validate {
                eg,
                position,
                epoch,
            } => {
                if self.serves(&eg) {
                    self.validate(now, eg, position, epoch);
                }
            }
        }
    }

    /// Always recorded, in every phase, for every group: invalidates are always safe.
    /// One invalid group more than [`CoordinatorConfig::invalid_max`] restarts the
    /// epoch instead ([`Coordinator::restart_epoch`]), which forgets every group: the
    /// new epoch refuses every validate sent in this one.
    fn invalidate(&mut self, now: Time, eg: EgId, position: Position, out: &mut Vec<Output>) {
        let at = match self.groups.get(&eg) {
            Some(GroupState::Invalid { at }) => at.max(position),
            Some(GroupState::Valid { .. }) | None => {
                if self.groups.invalid() >= self.config.invalid_max {
                    if !self.config.bugs.drop_invalidate_when_full() {
                        self.restart_epoch(now, out);
                    }
                    return;
                }
                position
            }
        };
        self.groups.set(&eg, GroupState::Invalid { at });
    }

    /// Stops vouching for every group and, if serving, leaves the epoch: closes its
    /// session (which gives the lock back at once) and opens a new one to take the
    /// lock again, in a new epoch that starts empty. Until then it is not serving, so
    /// no validate is taken and nothing is vouched for (*release-after-last-vouch*
    /// holds: the state is forgotten in this step, before the close is sent). Not
    /// serving, it holds no epoch a validate could be taken in: forgetting is enough
    /// (the next epoch starts empty too).
    fn restart_epoch(&mut self, now: Time, out: &mut Vec<Output>) {
        self.forget_all();
        if let Phase::Serving { session, .. } = self.phase {
            self.keepalive_out = false;
            self.close(now, session, out);
            self.open_session(now, out);
        }
    }

    fn validate(&mut self, now: Time, eg: EgId, position: Position, epoch: Epoch) {
        let bugs = self.config.bugs;
        let in_epoch = match self.phase {
            Phase::Serving { epoch: current, .. } => {
                (current == epoch || bugs.validate_ignores_epoch())
                    && (now < self.lease_end || bugs.validate_without_lock())
            }
            Phase::Disabled { .. } => false,
            _ => bugs.validate_without_lock(),
        };
        if !in_epoch {
            return;
        }
        let through = match self.groups.get(&eg) {
            Some(GroupState::Invalid { at })
                if at > position && !bugs.validate_ignores_position() =>
            {
                return;
            }
            Some(GroupState::Valid { through }) => through.max(position),
            Some(GroupState::Invalid { .. }) | None => {
                // One more valid group: past the bound, another is forgotten.
                if self.groups.valid() >= self.config.valid_max {
                    self.groups.forget_valid();
                }
                position
            }
        };
        self.groups.set(&eg, GroupState::Valid { through });
    }

    /// Checks the coordinator's own rules; panics on a broken one (a bug here).
    pub fn check_invariants(&self) {
        // Counted only while it is cheap to: every step checks.
        if cfg!(debug_assertions) && self.groups.len() <= 1024 {
            assert_eq!(
                self.groups.invalid(),
                self.groups.count_invalid(),
                "the count of invalid groups is off"
            );
        }
        if !self.config.bugs.any() {
            assert!(
                self.groups.invalid() <= self.config.invalid_max,
                "more invalid groups than invalid_max: {}",
                self.groups.invalid()
            );
            assert!(
                self.groups.valid() <= self.config.valid_max.max(1),
                "more valid groups than valid_max"
            );
        }
        if matches!(
            self.phase,
            Phase::Disabled { .. } | Phase::NoSession { .. } | Phase::Opening
        ) && !self.config.bugs.any()
        {
            assert_eq!(
                self.groups.valid(),
                0,
                "a coordinator without its lock holds a valid group"
            );
        }
    }
}
