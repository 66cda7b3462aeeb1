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

/// The shortest lease [`LockCommand::GrantLease`] grants: a holder must be able to
/// renew it across a lock-service round trip and a leader change's pause.
pub const LEASE_TTL_MIN: Duration = Duration::from_millis(500);

/// The longest lease [`LockCommand::GrantLease`] grants: a lease outlives a crashed
/// holder by at most this, and so does a lock it held.
pub const LEASE_TTL_MAX: Duration = Duration::from_secs(24 * 3600);

/// How many keys one lease may carry ([`LockCommand::PutLeased`]): the service keeps
/// them in its replicated state, so they are bounded per lease.
pub const LEASED_KEYS_PER_LEASE_MAX: usize = 256;

/// Names under this prefix (locks, leased keys) belong to applications: only sessions
/// granted as leases ([`LockCommand::GrantLease`]) may take or put them, and the lease
/// commands ([`LockCommand::RenewLease`], [`LockCommand::RevokeLease`]) touch only such
/// sessions — so nothing an application asks for can renew or end the cluster's own
/// sessions (a coordinator's, whose lock write paths wait on).
pub const APP_PREFIX: &str = "app/";

/// Files under this prefix are the cluster's schema (its catalog, index backfills):
/// writing them is administration ([`LockCommand::is_administrative`]).
pub const ADMIN_FILES_PREFIX: &str = "schema/";

/// Files under this prefix say where groups live (`megastore-placement`): writing them
/// is administration ([`LockCommand::is_administrative`]); anyone may read them, to
/// route.
pub const PLACEMENT_FILES_PREFIX: &str = "placement/";

/// Files under this prefix are the public API's users and roles: reading them as well
/// as writing them is administration (they hold token digests and every grant).
pub const AUTH_FILES_PREFIX: &str = "auth/";

/// The longest name of a leased key (and of an application's lock, checked by the
/// client library).
pub const LEASED_NAME_BYTES_MAX: usize = 1_000;

/// The longest value of a leased key: leased keys are membership and presence, kept
/// in the service's replicated state, not data.
pub const LEASED_VALUE_BYTES_MAX: usize = 4_096;

/// A key attached to a lease: it exists while the lease lives and vanishes with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedKey {
    /// The key's name.
    pub name: String,
    /// The lease it is attached to.
    pub session: SessionId,
    /// Taken from the service's one counter when the key was put, so a later put of
    /// the same name always has a higher revision — even after the key vanished.
    pub revision: u64,
    /// The value.
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
    /// Start a session for `owner` that lives `ttl` unless kept alive (an
    /// application's lease: between [`LEASE_TTL_MIN`] and [`LEASE_TTL_MAX`]).
    GrantLease {
        /// A name for the owner.
        owner: String,
        /// How long it lives without a keep-alive.
        ttl: Duration,
    },
    /// Extend a lease (a session granted by [`LockCommand::GrantLease`]) by its ttl
    /// from now; any other session is answered as expired.
    RenewLease {
        /// The lease.
        session: SessionId,
        /// Renew it only if its owner's name starts with this (a gateway renewing
        /// for one of its users); a lease of another owner is answered as expired.
        #[serde(default)]
        owned_by: Option<String>,
    },
    /// End a lease now, releasing its locks and keys; any other session is answered as
    /// expired.
    RevokeLease {
        /// The lease.
        session: SessionId,
        /// End it only if its owner's name starts with this; a lease of another owner
        /// is answered as expired.
        #[serde(default)]
        owned_by: Option<String>,
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
    /// Put a key attached to a live session: it vanishes when the session ends
    /// (expiry or close). A put of an existing name replaces it and re-attaches it.
    PutLeased {
        /// The session (lease) it lives with.
        session: SessionId,
        /// The key's name.
        name: String,
        /// The value.
        contents: Vec<u8>,
    },
    /// The leased keys whose names start with `prefix`, in name order.
    ListLeased {
        /// The prefix.
        prefix: String,
    },
}

impl LockCommand {
    /// Whether [`LockCore::read`] answers it: it reads what no clock changes, so a
    /// replicated host need not order it through its log.
    pub fn only_reads(&self) -> bool {
        matches!(self, LockCommand::ReadFile { .. })
    }

    /// Whether only an operator may ask it (lockd checks the operator token of
    /// `[auth]`): revoking a holder (disabling a coordinator), writing the schema or the
    /// placement, and reading or writing users and roles.
    pub fn is_administrative(&self) -> bool {
        match self {
            LockCommand::RevokeHolder { .. } => true,
            LockCommand::WriteFile { name, .. } => {
                name.starts_with(ADMIN_FILES_PREFIX)
                    || name.starts_with(AUTH_FILES_PREFIX)
                    || name.starts_with(PLACEMENT_FILES_PREFIX)
            }
            LockCommand::ReadFile { name } => name.starts_with(AUTH_FILES_PREFIX),
            _ => false,
        }
    }
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
    /// The file's new version (for a leased key, its revision).
    Written {
        /// The version.
        version: u64,
    },
    /// Leased keys, in name order.
    Leased(Vec<LeasedKey>),
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
    /// The request is not valid whatever the state (a lease too short, too many keys).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// An administrative command without the operator token (nothing was applied).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
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
    /// Its own lease, if granted one ([`LockCommand::GrantLease`]); otherwise the
    /// service's.
    #[serde(default)]
    ttl: Option<Duration>,
    /// How many leased keys it carries (so a put checks the bound without a scan).
    #[serde(default)]
    leased_keys: usize,
}

/// The replicated state of the lock service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockCore {
    lease: Duration,
    sessions: BTreeMap<SessionId, Session>,
    locks: BTreeMap<String, (SessionId, Sequencer)>,
    files: BTreeMap<String, LockFile>,
    /// Keys attached to sessions, by name.
    #[serde(default)]
    leased: BTreeMap<String, LeasedKey>,
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
            leased: BTreeMap::new(),
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
            session.expires_at = now + session.ttl.unwrap_or(self.lease);
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
        self.leased.retain(|_, key| key.session != id);
    }

    /// The next value of the one counter behind fencing tokens and leased-key
    /// revisions: it only grows, so neither is ever reused.
    fn next_token(&mut self) -> u64 {
        let token = self.next_sequencer;
        self.next_sequencer += 1;
        token
    }

    fn open_session(&mut self, now: Time, owner: &str, ttl: Option<Duration>) -> LockReply {
        let id = SessionId(self.next_session);
        self.next_session += 1;
        let lease = ttl.unwrap_or(self.lease);
        let session = Session {
            owner: owner.to_string(),
            expires_at: now + lease,
            revoked: false,
            ttl,
            leased_keys: 0,
        };
        self.sessions.insert(id, session);
        LockReply::Session { session: id, lease }
    }

    fn put_leased(
        &mut self,
        session: SessionId,
        name: &str,
        contents: &[u8],
    ) -> Result<LockReply, LockError> {
        self.live_lease(session)?;
        if name.len() > LEASED_NAME_BYTES_MAX || contents.len() > LEASED_VALUE_BYTES_MAX {
            return Err(LockError::Invalid(format!(
                "a leased key has a name of at most {LEASED_NAME_BYTES_MAX} bytes and a value \
                 of at most {LEASED_VALUE_BYTES_MAX}, not {} and {}",
                name.len(),
                contents.len()
            )));
        }
        let previous = self.leased.get(name).map(|k| k.session);
        let carried = self.live_lease(session)?.leased_keys;
        if previous != Some(session) && carried >= LEASED_KEYS_PER_LEASE_MAX {
            return Err(LockError::Invalid(format!(
                "lease {} already carries {LEASED_KEYS_PER_LEASE_MAX} keys, the most one lease may",
                session.0
            )));
        }
        let revision = self.next_token();
        self.leased.insert(
            name.to_string(),
            LeasedKey {
                name: name.to_string(),
                session,
                revision,
                contents: contents.to_vec(),
            },
        );
        // A put of another lease's key moves it to this one.
        if previous != Some(session) {
            if let Some(owner) = previous.and_then(|p| self.sessions.get_mut(&p)) {
                owner.leased_keys -= 1;
            }
            if let Some(carrier) = self.sessions.get_mut(&session) {
                carrier.leased_keys += 1;
            }
        }
        Ok(LockReply::Written { version: revision })
    }

    fn live_session(&self, id: SessionId) -> Result<&Session, LockError> {
        self.sessions.get(&id).ok_or(LockError::SessionExpired(id))
    }

    /// `id` if it is a live application lease; any other session is answered as
    /// expired, as if it did not exist.
    fn live_lease(&self, id: SessionId) -> Result<&Session, LockError> {
        match self.sessions.get(&id) {
            Some(session) if session.ttl.is_some() => Ok(session),
            _ => Err(LockError::SessionExpired(id)),
        }
    }

    /// The session that may act on `name`: an application's names need a lease.
    fn session_for(&self, id: SessionId, name: &str) -> Result<&Session, LockError> {
        if name.starts_with(APP_PREFIX) {
            self.live_lease(id)
        } else {
            self.live_session(id)
        }
    }

    fn renew(&mut self, now: Time, id: SessionId) -> Result<LockReply, LockError> {
        let default = self.lease;
        let s = self
            .sessions
            .get_mut(&id)
            .ok_or(LockError::SessionExpired(id))?;
        if s.revoked {
            return Err(LockError::SessionRevoked(id));
        }
        let lease = s.ttl.unwrap_or(default);
        s.expires_at = now + lease;
        Ok(LockReply::Renewed { lease })
    }

    /// Passes a session whose owner's name starts with `prefix` (any, without one);
    /// another owner's is answered as expired, as if it did not exist.
    fn owned_by(&self, id: SessionId, prefix: Option<&str>) -> Result<(), LockError> {
        match (prefix, self.sessions.get(&id)) {
            (None, _) => Ok(()),
            (Some(prefix), Some(s)) if s.owner.starts_with(prefix) => Ok(()),
            (Some(_), _) => Err(LockError::SessionExpired(id)),
        }
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

    /// The answer to `command` if it only reads what no clock changes — a file — so a
    /// replicated host may answer it from its applied state once it confirmed it
    /// leads and applied everything committed before the read began (lockd: a
    /// read-index round), without ordering it through its log. `None`: `command` must
    /// be applied. Answers what [`LockCore::apply`] would.
    pub fn read(&self, command: &LockCommand) -> Option<Result<LockReply, LockError>> {
        match command {
            LockCommand::ReadFile { name } => Some(Ok(self.read_file(name))),
            _ => {
                debug_assert!(!command.only_reads(), "{command:?} is answered by read");
                None
            }
        }
    }

    fn read_file(&self, name: &str) -> LockReply {
        LockReply::File(self.files.get(name).cloned())
    }

    /// Applies one command at `now` (the serving node's clock). Sessions whose lease
    /// ran out are expired first, so a reply never shows a lapsed holder.
    pub fn apply(&mut self, now: Time, command: &LockCommand) -> Result<LockReply, LockError> {
        self.expire(now);
        match command {
            LockCommand::OpenSession { owner } => Ok(self.open_session(now, owner, None)),
            LockCommand::GrantLease { owner, ttl } => {
                if !(LEASE_TTL_MIN..=LEASE_TTL_MAX).contains(ttl) {
                    return Err(LockError::Invalid(format!(
                        "a lease lives between {LEASE_TTL_MIN:?} and {LEASE_TTL_MAX:?}, not {ttl:?}"
                    )));
                }
                Ok(self.open_session(now, owner, Some(*ttl)))
            }
            LockCommand::KeepAlive { session } => self.renew(now, *session),
            LockCommand::RenewLease { session, owned_by } => {
                self.live_lease(*session)?;
                self.owned_by(*session, owned_by.as_deref())?;
                self.renew(now, *session)
            }
            LockCommand::RevokeLease { session, owned_by } => {
                self.live_lease(*session)?;
                self.owned_by(*session, owned_by.as_deref())?;
                self.end_session(*session);
                Ok(LockReply::Done)
            }
            LockCommand::CloseSession { session } => {
                self.live_session(*session)?;
                self.end_session(*session);
                Ok(LockReply::Done)
            }
            LockCommand::Acquire { session, lock } => {
                self.session_for(*session, lock)?;
                match self.locks.get(lock) {
                    Some((holder, sequencer)) if holder == session => Ok(LockReply::Acquired {
                        sequencer: *sequencer,
                    }),
                    Some(_) => Err(LockError::Held(
                        self.holder(lock).expect("a held lock has a live holder"),
                    )),
                    None => {
                        let sequencer = Sequencer(self.next_token());
                        self.locks.insert(lock.clone(), (*session, sequencer));
                        Ok(LockReply::Acquired { sequencer })
                    }
                }
            }
            LockCommand::Release { session, lock } => {
                self.session_for(*session, lock)?;
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
            LockCommand::ReadFile { name } => Ok(self.read_file(name)),
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
            LockCommand::PutLeased {
                session,
                name,
                contents,
            } => self.put_leased(*session, name, contents),
            LockCommand::ListLeased { prefix } => Ok(LockReply::Leased(
                self.leased
                    .range(prefix.clone()..)
                    .take_while(|(name, _)| name.starts_with(prefix.as_str()))
                    .map(|(_, key)| key.clone())
                    .collect(),
            )),
        }
    }

    /// Checks the state's internal consistency (run after every step in tests and the
    /// simulator): every held lock and leased key belongs to a live session, and
    /// sequencers, revisions and session ids were never reused.
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
        let mut carried: BTreeMap<SessionId, usize> = BTreeMap::new();
        for (name, key) in &self.leased {
            assert!(
                self.sessions.contains_key(&key.session),
                "leased key {name} outlived its lease"
            );
            *carried.entry(key.session).or_default() += 1;
            assert!(
                key.revision < self.next_sequencer,
                "leased key {name} has a revision from the future"
            );
        }
        for (id, session) in &self.sessions {
            assert_eq!(
                session.leased_keys,
                carried.get(id).copied().unwrap_or(0),
                "session {} miscounts its leased keys",
                id.0
            );
        }
        if let Some((last, _)) = self.sessions.last_key_value() {
            assert!(last.0 < self.next_session, "session id from the future");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_of_another_owner_is_neither_renewed_nor_ended() {
        let mut core = LockCore::new(Duration::from_secs(10));
        let now = Time(1);
        let grant = LockCommand::GrantLease {
            owner: "user:alice:worker".into(),
            ttl: LEASE_TTL_MIN,
        };
        let Ok(LockReply::Session { session, .. }) = core.apply(now, &grant) else {
            panic!("granted");
        };
        let renew = |owned_by: &str| LockCommand::RenewLease {
            session,
            owned_by: Some(owned_by.into()),
        };
        let revoke = |owned_by: &str| LockCommand::RevokeLease {
            session,
            owned_by: Some(owned_by.into()),
        };
        assert_eq!(
            core.apply(now, &renew("user:bob:")),
            Err(LockError::SessionExpired(session))
        );
        assert_eq!(
            core.apply(now, &revoke("user:bob:")),
            Err(LockError::SessionExpired(session))
        );
        assert!(core.apply(now, &renew("user:alice:")).is_ok());
        assert_eq!(core.apply(now, &revoke("user:alice:")), Ok(LockReply::Done));
        core.check_invariants();
    }

    #[test]
    fn a_lease_carries_a_bounded_number_of_keys() {
        let mut core = LockCore::new(Duration::from_secs(10));
        let now = Time(1);
        let grant = LockCommand::GrantLease {
            owner: "w".into(),
            ttl: LEASE_TTL_MIN,
        };
        let Ok(LockReply::Session { session, .. }) = core.apply(now, &grant) else {
            panic!("granted");
        };
        let put = |name: String| LockCommand::PutLeased {
            session,
            name,
            contents: Vec::new(),
        };
        for i in 0..LEASED_KEYS_PER_LEASE_MAX {
            core.apply(now, &put(format!("k{i}"))).unwrap();
        }
        assert!(matches!(
            core.apply(now, &put("one-too-many".into())),
            Err(LockError::Invalid(m)) if m.contains("carries")
        ));
        core.apply(now, &put("k0".into()))
            .expect("replacing one of its own keys adds none");
        core.check_invariants();
        let Ok(LockReply::Session { session: other, .. }) = core.apply(now, &grant) else {
            panic!("granted");
        };
        let take = LockCommand::PutLeased {
            session: other,
            name: "k1".into(),
            contents: Vec::new(),
        };
        core.apply(now, &take)
            .expect("another lease takes a key over");
        core.apply(now, &put("one-more".into()))
            .expect("the first lease has room again");
        core.check_invariants();
    }

    #[test]
    fn administration_is_revoking_holders_and_writing_the_schema() {
        let write = |name: &str| LockCommand::WriteFile {
            name: name.into(),
            expected: 0,
            contents: Vec::new(),
        };
        assert!(LockCommand::RevokeHolder { lock: "c".into() }.is_administrative());
        assert!(write("schema/catalog").is_administrative());
        assert!(write("schema/backfill/7").is_administrative());
        assert!(!write("clients/next-id").is_administrative());
        assert!(write("auth/access").is_administrative());
        assert!(write("placement/ranges").is_administrative());
        assert!(
            !LockCommand::ReadFile {
                name: "placement/ranges".into()
            }
            .is_administrative()
        );
        let read = |name: &str| LockCommand::ReadFile { name: name.into() };
        assert!(read("auth/access").is_administrative());
        assert!(!read("schema/catalog").is_administrative());
        assert!(!write("replicas/2/joined").is_administrative());
        assert!(!LockCommand::OpenSession { owner: "c".into() }.is_administrative());
    }

    #[test]
    fn a_read_answers_what_applying_would_and_only_files_are_read() {
        let mut core = LockCore::new(Duration::from_secs(10));
        let now = Time::ZERO;
        let read = LockCommand::ReadFile {
            name: "placement/ranges".into(),
        };
        assert_eq!(core.read(&read), Some(Ok(LockReply::File(None))));
        let write = LockCommand::WriteFile {
            name: "placement/ranges".into(),
            expected: 0,
            contents: b"v1".to_vec(),
        };
        core.apply(now, &write).expect("written");
        let applied = core.clone().apply(now, &read);
        assert!(matches!(&applied, Ok(LockReply::File(Some(f))) if f.contents == b"v1"));
        assert_eq!(core.read(&read), Some(applied));
        assert!(read.only_reads());
        // Anything a clock or a session decides is applied, holder queries included.
        let others = [
            write,
            LockCommand::Holder { lock: "c".into() },
            LockCommand::ListLeased { prefix: "k".into() },
            LockCommand::OpenSession { owner: "c".into() },
        ];
        for command in others {
            assert!(!command.only_reads(), "{command:?}");
            assert_eq!(core.read(&command), None, "{command:?}");
        }
    }

    #[test]
    fn state_written_before_leases_still_loads() {
        let mut core = LockCore::new(Duration::from_secs(10));
        core.apply(Time(1), &LockCommand::OpenSession { owner: "c".into() })
            .unwrap();
        let mut json: serde_json::Value = serde_json::to_value(&core).unwrap();
        json.as_object_mut().unwrap().remove("leased");
        for session in json["sessions"].as_object_mut().unwrap().values_mut() {
            let fields = session.as_object_mut().unwrap();
            fields.remove("ttl");
            fields.remove("leased_keys");
        }
        let loaded: LockCore = serde_json::from_value(json).unwrap();
        assert_eq!(loaded, core);
    }
}
