//! The public API's open transactions on one replica: a handle per `Begin`, the
//! transaction behind it, and — once committed — the answer, so a `Commit` sent again
//! with the same handle gets the same answer and never commits twice. A handle belongs
//! to the user that began it: to anyone else it does not exist.

use std::collections::HashMap;
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
}

impl Session {
    /// Whether it is still open, or busy in a call (a committed handle only keeps its
    /// answer: it does not count against a connection's or a user's bound).
    fn is_open(&self) -> bool {
        self.state
            .try_lock()
            .map_or(true, |state| matches!(*state, SessionState::Open(..)))
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
    sessions: std::sync::Mutex<HashMap<u64, Session>>,
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
            sessions: std::sync::Mutex::new(HashMap::new()),
            idle_max: Duration::from_millis(limits.idle_txn_ms),
            open_max: limits.open_txns_max as usize,
            per_connection_max: limits.open_txns_per_connection as usize,
            per_user_max: limits.open_txns_per_user as usize,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `txn`, begun by `caller` over `connection`, under a new handle.
    pub(crate) fn insert(
        &self,
        txn: Transaction,
        connection: Option<SocketAddr>,
        caller: &Caller,
    ) -> Result<u64, Status> {
        let owner = caller.user().map(str::to_string);
        let mut sessions = self.map();
        let idle_max = self.idle_max;
        sessions.retain(|_, s| s.last_used.elapsed() < idle_max);
        let open = sessions.values().filter(|s| s.is_open()).count();
        if open >= self.open_max {
            return Err(Status::resource_exhausted(format!(
                "{} transactions are open on this replica ([gateway] open_txns_max); commit or abort some",
                self.open_max
            )));
        }
        self.forget_oldest_answers(&mut sessions, open);
        if let Some(connection) = connection {
            let mine = sessions
                .values()
                .filter(|s| s.connection == Some(connection) && s.is_open())
                .count();
            if mine >= self.per_connection_max {
                return Err(Status::resource_exhausted(format!(
                    "this connection ({connection}) has {mine} open transactions, the most one may ([gateway] open_txns_per_connection); commit or abort some"
                )));
            }
        }
        if let Some(user) = &owner {
            let theirs = sessions
                .values()
                .filter(|s| s.owner.as_ref() == Some(user) && s.is_open())
                .count();
            if theirs >= self.per_user_max {
                return Err(Status::resource_exhausted(format!(
                    "user {user:?} has {theirs} open transactions on this replica, the most one may ([gateway] open_txns_per_user); commit or abort some"
                )));
            }
        }
        let handle = loop {
            let handle: u64 = rand::random();
            if handle != 0 && !sessions.contains_key(&handle) {
                break handle;
            }
        };
        let session = Session {
            state: Arc::new(Mutex::new(SessionState::Open(Box::new(txn), Vec::new()))),
            last_used: Instant::now(),
            connection,
            owner,
        };
        sessions.insert(handle, session);
        Ok(handle)
    }

    /// Keeps at most `open_max` committed handles' answers: past that, drops the
    /// oldest (least recently used), a tenth of the bound at a time so that the sort
    /// is paid once per many `Begin`s. `open` of `sessions` are open.
    fn forget_oldest_answers(&self, sessions: &mut HashMap<u64, Session>, open: usize) {
        let answers = sessions.len() - open;
        if answers < self.open_max {
            return;
        }
        let mut committed: Vec<(Instant, u64)> = sessions
            .iter()
            .filter(|(_, s)| !s.is_open())
            .map(|(handle, s)| (s.last_used, *handle))
            .collect();
        committed.sort_unstable();
        let keep = self.open_max - self.open_max.div_ceil(10);
        let excess = committed.len().saturating_sub(keep);
        for (_, handle) in &committed[..excess] {
            sessions.remove(handle);
        }
    }

    /// The state behind `handle`, locked for one call by `caller` (another user's
    /// handle is not found).
    pub(crate) async fn locked(&self, handle: u64, caller: &Caller) -> Result<Locked, Status> {
        let state = {
            let mut sessions = self.map();
            // Expired is gone, whether or not a `Begin` has swept it out yet.
            if sessions
                .get(&handle)
                .is_some_and(|s| s.last_used.elapsed() >= self.idle_max)
            {
                sessions.remove(&handle);
            }
            let session = sessions
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
        let mut sessions = self.map();
        if sessions
            .get(&handle)
            .is_some_and(|s| s.owner.as_deref() == caller.user())
        {
            sessions.remove(&handle);
        }
    }
}
