//! The lock service's state machine: what every lock node applies, in order. Given the
//! same commands with the same `now`, every copy ends in the same state.

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_types::Time;
use serde::{Deserialize, Serialize};

/// A client's session with the lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(pub u64);

/// A lock's fencing token: strictly increasing across every acquisition of every lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Sequencer(pub u64);

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// The holding session.
    pub session: SessionId,
    /// The session's owner name.
    pub owner: String,
    /// The acquisition's fencing token.
    pub sequencer: Sequencer,
}

/// A small consistent file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockFile {
    /// Increases by one on every write; never reused.
    pub version: u64,
    /// The contents.
    pub contents: Vec<u8>,
}

/// A request to the lock service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockCommand {
    /// Start a session for `owner`; it lives one lease unless kept alive.
    OpenSession {
        /// A name for the owner (e.g. `coordinator/2`).
        owner: String,
    },
    /// Extend a session by one lease from now.
    KeepAlive {
        /// The session.
        session: SessionId,
    },
    /// End a session, releasing its locks.
    CloseSession {
        /// The session.
        session: SessionId,
    },
    /// Take a lock for a session (idempotent for the holder).
    Acquire {
        /// The session.
        session: SessionId,
        /// The lock's name.
        lock: String,
    },
    /// Give a lock back.
    Release {
        /// The session.
        session: SessionId,
        /// The lock's name.
        lock: String,
    },
    /// Who holds a lock now (linearizable).
    Holder {
        /// The lock's name.
        lock: String,
    },
    /// Stop renewing the session holding `lock`: it lapses, with its locks, when its
    /// current lease ends. (Disabling a coordinator.)
    RevokeHolder {
        /// The lock's name.
        lock: String,
    },
    /// Read a small file.
    ReadFile {
        /// The file's name.
        name: String,
    },
    /// Write a small file if its version is `expected` (0 = must not exist).
    WriteFile {
        /// The file's name.
        name: String,
        /// The version the writer read.
        expected: u64,
        /// The new contents.
        contents: Vec<u8>,
    },
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockReply {
    /// A new session and its lease.
    Session {
        /// The session.
        session: SessionId,
        /// How long it lives without a keep-alive, from when the service applied the
        /// request.
        lease: Duration,
    },
    /// The session was extended by one lease.
    Renewed {
        /// The lease.
        lease: Duration,
    },
    /// The lock is held, with this fencing token.
    Acquired {
        /// The fencing token.
        sequencer: Sequencer,
    },
    /// Who holds the lock (`None`: nobody).
    Holder(Option<LockHolder>),
    /// Whether a holder was found and revoked.
    Revoked(bool),
    /// A file's contents (`None`: no such file).
    File(Option<LockFile>),
    /// The file's new version.
    Written {
        /// The version.
        version: u64,
    },
    /// Done.
    Done,
}

/// Why a lock request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum LockError {
    /// The session expired or was closed.
    #[error("session {} has expired", .0.0)]
    SessionExpired(SessionId),
    /// The session was revoked by an operator: it cannot be renewed.
    #[error("session {} was revoked", .0.0)]
    SessionRevoked(SessionId),
    /// Another session holds the lock.
    #[error("lock is held by {}", .0.owner)]
    Held(LockHolder),
    /// The session does not hold the lock.
    #[error("session does not hold the lock")]
    NotHolder,
    /// The file's version is not the expected one.
    #[error("file version is {current}, not the expected {expected}")]
    VersionMismatch {
        /// The version the writer expected.
        expected: u64,
        /// The version the file has.
        current: u64,
    },
    /// This node cannot serve requests; try another.
    #[error("this lock node is not the leader")]
    NotLeader,
    /// The service could not be reached or cannot reach a majority.
    #[error("lock service unavailable")]
    Unavailable,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    owner: String,
    expires_at: Time,
    revoked: bool,
}

/// The replicated state of the lock service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockCore {
    lease: Duration,
    sessions: BTreeMap<SessionId, Session>,
    locks: BTreeMap<String, (SessionId, Sequencer)>,
    files: BTreeMap<String, LockFile>,
    next_session: u64,
    next_sequencer: u64,
}

impl LockCore {
    /// An empty service whose sessions live `lease` without keep-alives.
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            sessions: BTreeMap::new(),
            locks: BTreeMap::new(),
            files: BTreeMap::new(),
            next_session: 1,
            next_sequencer: 1,
        }
    }

    /// The session lease.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// A new leader restarts every session's lease on its own clock: lease deadlines
    /// set by the previous leader were readings of another clock.
    pub fn restart_leases(&mut self, now: Time) {
        for session in self.sessions.values_mut() {
            session.expires_at = now + self.lease;
        }
    }

    /// Ends every session whose lease has run out by `now`, releasing its locks.
    pub fn expire(&mut self, now: Time) {
        let expired: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.end_session(id);
        }
    }

    fn end_session(&mut self, id: SessionId) {
        self.sessions.remove(&id);
        self.locks.retain(|_, (holder, _)| *holder != id);
    }

    fn live_session(&self, id: SessionId) -> Result<&Session, LockError> {
        self.sessions.get(&id).ok_or(LockError::SessionExpired(id))
    }

    fn holder(&self, lock: &str) -> Option<LockHolder> {
        let (session, sequencer) = self.locks.get(lock)?;
        let owner = self.sessions.get(session)?.owner.clone();
        Some(LockHolder {
            session: *session,
            owner,
            sequencer: *sequencer,
        })
    }

    /// Applies one command at `now` (the serving node's clock). Sessions whose lease
    /// ran out are expired first, so a reply never shows a lapsed holder.
    pub fn apply(&mut self, now: Time, command: &LockCommand) -> Result<LockReply, LockError> {
        self.expire(now);
        match command {
            LockCommand::OpenSession { owner } => {
                let id = SessionId(self.next_session);
                self.next_session += 1;
                let session = Session {
                    owner: owner.clone(),
                    expires_at: now + self.lease,
                    revoked: false,
                };
                self.sessions.insert(id, session);
                Ok(LockReply::Session {
                    session: id,
                    lease: self.lease,
                })
            }
            LockCommand::KeepAlive { session } => {
                let lease = self.lease;
                let s = self
                    .sessions
                    .get_mut(session)
                    .ok_or(LockError::SessionExpired(*session))?;
                if s.revoked {
                    return Err(LockError::SessionRevoked(*session));
                }
                s.expires_at = now + lease;
                Ok(LockReply::Renewed { lease })
            }
            LockCommand::CloseSession { session } => {
                self.live_session(*session)?;
                self.end_session(*session);
                Ok(LockReply::Done)
            }
            LockCommand::Acquire { session, lock } => {
                self.live_session(*session)?;
                match self.locks.get(lock) {
                    Some((holder, sequencer)) if holder == session => Ok(LockReply::Acquired {
                        sequencer: *sequencer,
                    }),
                    Some(_) => Err(LockError::Held(
                        self.holder(lock).expect("a held lock has a live holder"),
                    )),
                    None => {
                        let sequencer = Sequencer(self.next_sequencer);
                        self.next_sequencer += 1;
                        self.locks.insert(lock.clone(), (*session, sequencer));
                        Ok(LockReply::Acquired { sequencer })
                    }
                }
            }
            LockCommand::Release { session, lock } => {
                self.live_session(*session)?;
                match self.locks.get(lock) {
                    Some((holder, _)) if holder == session => {
                        self.locks.remove(lock);
                        Ok(LockReply::Done)
                    }
                    _ => Err(LockError::NotHolder),
                }
            }
            LockCommand::Holder { lock } => Ok(LockReply::Holder(self.holder(lock))),
            LockCommand::RevokeHolder { lock } => {
                let Some((session, _)) = self.locks.get(lock).copied() else {
                    return Ok(LockReply::Revoked(false));
                };
                if let Some(s) = self.sessions.get_mut(&session) {
                    s.revoked = true;
                }
                Ok(LockReply::Revoked(true))
            }
            LockCommand::ReadFile { name } => Ok(LockReply::File(self.files.get(name).cloned())),
            LockCommand::WriteFile {
                name,
                expected,
                contents,
            } => {
                let current = self.files.get(name).map_or(0, |f| f.version);
                if current != *expected {
                    return Err(LockError::VersionMismatch {
                        expected: *expected,
                        current,
                    });
                }
                let version = current + 1;
                self.files.insert(
                    name.clone(),
                    LockFile {
                        version,
                        contents: contents.clone(),
                    },
                );
                Ok(LockReply::Written { version })
            }
        }
    }

    /// Checks the state's internal consistency (run after every step in tests and the
    /// simulator): every held lock belongs to a live session, and sequencers and
    /// session ids were never reused.
    pub fn check_invariants(&self) {
        for (lock, (session, sequencer)) in &self.locks {
            assert!(
                self.sessions.contains_key(session),
                "lock {lock} held by a dead session"
            );
            assert!(
                sequencer.0 < self.next_sequencer,
                "lock {lock} has a sequencer from the future"
            );
        }
        if let Some((last, _)) = self.sessions.last_key_value() {
            assert!(last.0 < self.next_session, "session id from the future");
        }
    }
}
