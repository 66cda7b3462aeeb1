//! The public API's open transactions on one replica: a handle per `Begin`, the
//! transaction behind it, and — once committed — the answer, so a `Commit` sent again
//! with the same handle gets the same answer and never commits twice. A handle belongs
//! to the user that began it: to anyone else it does not exist.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use megastore_client::Transaction;
use megastore_rpc::pb::client as pb;
use tokio::sync::{Mutex, OwnedMutexGuard};
use tonic::Status;

use crate::gateway_access::{Caller, Written};

/// What a handle stands for.
pub(crate) enum SessionState {
    /// A transaction that may still read, write and commit, and what its staged writes
    /// touch (checked again at commit: a grant revoked meanwhile stops it).
    Open(Box<Transaction>, Vec<Written>),
    /// Its commit ended with this answer.
    Committed(Result<pb::CommitResponse, Status>),
}

/// A handle's state, locked for one call at a time (a commit holds it until done).
pub(crate) type Locked = OwnedMutexGuard<SessionState>;

struct Session {
    state: Arc<Mutex<SessionState>>,
    last_used: Instant,
    /// The connection that began it (peer address and port), if known.
    connection: Option<SocketAddr>,
    /// The user that began it (`None`: no users required, or the operator).
    owner: Option<String>,
    /// Not committed yet: it counts against the bounds on open transactions.
    open: bool,
}

/// The handles and what the bounds count, under one lock. Every `Begin` costs the
/// same however many handles are kept (thousands of committed ones at a busy
/// gateway): the counts are kept as handles open and close, and expired handles are
/// swept out at most once per [`SWEEP_EVERY`].
#[derive(Default)]
struct Handles {
    sessions: HashMap<u64, Session>,
    /// Open handles, in all and per connection and user.
    open: usize,
    per_connection: HashMap<SocketAddr, usize>,
    per_user: HashMap<String, usize>,
    /// Committed handles, oldest first (some may be gone already): those past the
    /// bound on answers are dropped from the front.
    answers: VecDeque<u64>,
    /// When expired handles were last swept out.
    swept: Option<Instant>,
}

/// How often a `Begin` sweeps out expired handles: between sweeps an expired open
/// handle still counts (a second at most), and is gone for any call that names it.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl Handles {
    /// Counts a handle of `connection` and `owner` open (`add`), or no longer.
    fn count_open(&mut self, connection: Option<SocketAddr>, owner: Option<&String>, add: bool) {
        let step = |n: &mut usize| {
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        };
        step(&mut self.open);
        if let Some(connection) = connection {
            let n = self.per_connection.entry(connection).or_default();
            step(n);
            if *n == 0 {
                self.per_connection.remove(&connection);
            }
        }
        if let Some(owner) = owner {
            let n = self.per_user.entry(owner.clone()).or_default();
            step(n);
            if *n == 0 {
                self.per_user.remove(owner);
            }
        }
    }

    /// Drops `handle`, uncounting it if it was open.
    fn drop_handle(&mut self, handle: u64) {
        if let Some(session) = self.sessions.remove(&handle)
            && session.open
        {
            self.count_open(session.connection, session.owner.as_ref(), false);
        }
    }

    /// Drops every handle unused for `idle_max`, at most once per [`SWEEP_EVERY`].
    fn sweep(&mut self, idle_max: Duration) {
        if self.swept.is_some_and(|at| at.elapsed() < SWEEP_EVERY) {
            return;
        }
        self.swept = Some(Instant::now());
        let expired: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.last_used.elapsed() >= idle_max)
            .map(|(handle, _)| *handle)
            .collect();
        for handle in expired {
            self.drop_handle(handle);
        }
    }
}

/// The open transactions of one replica's gateway, bounded by `[gateway]`:
/// transactions unused for `idle_txn_ms` are dropped (committed ones too: their answer
/// is kept as long), and there are at most `open_txns_max` open ones, at most
/// `open_txns_per_connection` from one connection and `open_txns_per_user` of one user.
/// A committed one's answer counts against none of these; at most `open_txns_max`
/// answers are kept, the oldest dropped first past that (a replica committing more
/// than that many transactions in `idle_txn_ms`).
pub(crate) struct Sessions {
    handles: std::sync::Mutex<Handles>,
    idle_max: Duration,
    open_max: usize,
    per_connection_max: usize,
    per_user_max: usize,
}

/// The open transaction behind a locked handle.
pub(crate) fn open(guard: &mut SessionState) -> Result<&mut Transaction, Status> {
    match guard {
        SessionState::Open(txn, _) => Ok(txn),
        SessionState::Committed(_) => Err(Status::failed_precondition(
            "txn: already committed; begin a new transaction",
        )),
    }
}

/// The open transaction behind a locked handle, noting that a write is staged on
/// `written`.
pub(crate) fn open_to_write(
    guard: &mut SessionState,
    written: Written,
) -> Result<&mut Transaction, Status> {
    match guard {
        SessionState::Open(txn, writes) => {
            if !writes.contains(&written) {
                writes.push(written);
            }
            Ok(txn)
        }
        SessionState::Committed(_) => open(guard),
    }
}

impl Sessions {
    /// No transactions yet, bounded by `limits`.
    pub(crate) fn new(limits: &megastore_config::GatewayLimits) -> Self {
        Self {
            handles: std::sync::Mutex::new(Handles::default()),
            idle_max: Duration::from_millis(limits.idle_txn_ms),
            open_max: limits.open_txns_max as usize,
            per_connection_max: limits.open_txns_per_connection as usize,
            per_user_max: limits.open_txns_per_user as usize,
        }
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `txn`, begun by `caller` over `connection`, under a new handle.
    pub(crate) fn insert(
        &self,
        txn: Transaction,
        connection: Option<SocketAddr>,
        caller: &Caller,
    ) -> Result<u64, Status> {
        let owner = caller.user().map(str::to_string);
        let mut handles = self.handles();
        handles.sweep(self.idle_max);
        if handles.open >= self.open_max {
            return Err(Status::resource_exhausted(format!(
                "{} transactions are open on this replica ([gateway] open_txns_max); commit or abort some",
                self.open_max
            )));
        }
        if let Some(connection) = connection {
            let mine = handles
                .per_connection
                .get(&connection)
                .copied()
                .unwrap_or(0);
            if mine >= self.per_connection_max {
                return Err(Status::resource_exhausted(format!(
                    "this connection ({connection}) has {mine} open transactions, the most one may ([gateway] open_txns_per_connection); commit or abort some"
                )));
            }
        }
        if let Some(user) = &owner {
            let theirs = handles.per_user.get(user).copied().unwrap_or(0);
            if theirs >= self.per_user_max {
                return Err(Status::resource_exhausted(format!(
                    "user {user:?} has {theirs} open transactions on this replica, the most one may ([gateway] open_txns_per_user); commit or abort some"
                )));
            }
        }
        let handle = loop {
            let handle: u64 = rand::random();
            if handle != 0 && !handles.sessions.contains_key(&handle) {
                break handle;
            }
        };
        handles.count_open(connection, owner.as_ref(), true);
        let session = Session {
            state: Arc::new(Mutex::new(SessionState::Open(Box::new(txn), Vec::new()))),
            last_used: Instant::now(),
            connection,
            owner,
            open: true,
        };
        handles.sessions.insert(handle, session);
        Ok(handle)
    }

    /// `handle`'s commit began: it no longer counts as open, and its answer is kept —
    /// at most `open_max` answers, the oldest dropped first.
    pub(crate) fn committed(&self, handle: u64) {
        let mut handles = self.handles();
        let Some(session) = handles.sessions.get_mut(&handle) else {
            return;
        };
        if !std::mem::replace(&mut session.open, false) {
            return;
        }
        let (connection, owner) = (session.connection, session.owner.clone());
        handles.count_open(connection, owner.as_ref(), false);
        handles.answers.push_back(handle);
        while handles.answers.len() > self.open_max {
            let Some(oldest) = handles.answers.pop_front() else {
                break;
            };
            if handles.sessions.get(&oldest).is_some_and(|s| !s.open) {
                handles.sessions.remove(&oldest);
            }
        }
    }

    /// The state behind `handle`, locked for one call by `caller` (another user's
    /// handle is not found).
    pub(crate) async fn locked(&self, handle: u64, caller: &Caller) -> Result<Locked, Status> {
        let state = {
            let mut handles = self.handles();
            // Expired is gone, whether or not a `Begin` has swept it out yet.
            if handles
                .sessions
                .get(&handle)
                .is_some_and(|s| s.last_used.elapsed() >= self.idle_max)
            {
                handles.drop_handle(handle);
            }
            let session = handles
                .sessions
                .get_mut(&handle)
                .filter(|s| s.owner.as_deref() == caller.user())
                .ok_or_else(|| {
                Status::not_found(format!(
                    "txn: no open transaction {handle} on this replica (it ended, expired after {:?} unused ([gateway] idle_txn_ms), or began elsewhere)",
                    self.idle_max
                ))
            })?;
            session.last_used = Instant::now();
            Arc::clone(&session.state)
        };
        Ok(state.lock_owned().await)
    }

    /// Forgets `handle`, if `caller` began it.
    pub(crate) fn remove(&self, handle: u64, caller: &Caller) {
        let mut handles = self.handles();
        if handles
            .sessions
            .get(&handle)
            .is_some_and(|s| s.owner.as_deref() == caller.user())
        {
            handles.drop_handle(handle);
        }
    }
}
