//! The lock service as one synchronous trait, a typed layer over it, and an in-process
//! implementation on [`LockCore`].

use std::sync::Mutex;
use std::time::Duration;

use megastore_types::Time;

use crate::core::{
    LeasedKey, LockCommand, LockCore, LockError, LockFile, LockHolder, LockReply, Sequencer,
    SessionId,
};

/// A linearizable lock service: every call takes effect at one instant between its
/// start and its return.
///
/// Implemented by [`LocalLockService`] here and by the openraft-backed `lockd` client;
/// both pass [`crate::conformance`].
pub trait LockService {
    /// Executes one command.
    fn execute(&self, command: LockCommand) -> Result<LockReply, LockError>;
}

fn unexpected(reply: LockReply) -> LockError {
    // A reply of the wrong kind means the service is broken; callers treat it as an
    // unavailable service rather than trusting it.
    debug_assert!(false, "lock service replied {reply:?}");
    LockError::Unavailable
}

/// Typed calls over [`LockService::execute`].
pub trait LockServiceExt: LockService {
    /// Opens a session for `owner`; returns it and its lease.
    fn open_session(&self, owner: &str) -> Result<(SessionId, Duration), LockError> {
        match self.execute(LockCommand::OpenSession {
            owner: owner.to_string(),
        })? {
            LockReply::Session { session, lease } => Ok((session, lease)),
            other => Err(unexpected(other)),
        }
    }

    /// Grants `owner` a lease of `ttl`: a session that lives `ttl` unless kept alive.
    fn grant_lease(&self, owner: &str, ttl: Duration) -> Result<(SessionId, Duration), LockError> {
        match self.execute(LockCommand::GrantLease {
            owner: owner.to_string(),
            ttl,
        })? {
            LockReply::Session { session, lease } => Ok((session, lease)),
            other => Err(unexpected(other)),
        }
    }

    /// Renews a lease by its ttl (only a session granted as a lease).
    fn renew_lease(&self, lease: SessionId) -> Result<Duration, LockError> {
        match self.execute(LockCommand::RenewLease {
            session: lease,
            owned_by: None,
        })? {
            LockReply::Renewed { lease } => Ok(lease),
            other => Err(unexpected(other)),
        }
    }

    /// Ends a lease now (only a session granted as a lease).
    fn revoke_lease(&self, lease: SessionId) -> Result<(), LockError> {
        match self.execute(LockCommand::RevokeLease {
            session: lease,
            owned_by: None,
        })? {
            LockReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Extends a session by one lease.
    fn keep_alive(&self, session: SessionId) -> Result<Duration, LockError> {
        match self.execute(LockCommand::KeepAlive { session })? {
            LockReply::Renewed { lease } => Ok(lease),
            other => Err(unexpected(other)),
        }
    }

    /// Ends a session and releases its locks.
    fn close_session(&self, session: SessionId) -> Result<(), LockError> {
        match self.execute(LockCommand::CloseSession { session })? {
            LockReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Takes `lock` for `session`.
    fn acquire(&self, session: SessionId, lock: &str) -> Result<Sequencer, LockError> {
        match self.execute(LockCommand::Acquire {
            session,
            lock: lock.to_string(),
        })? {
            LockReply::Acquired { sequencer } => Ok(sequencer),
            other => Err(unexpected(other)),
        }
    }

    /// Gives `lock` back.
    fn release(&self, session: SessionId, lock: &str) -> Result<(), LockError> {
        match self.execute(LockCommand::Release {
            session,
            lock: lock.to_string(),
        })? {
            LockReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Who holds `lock`.
    fn holder(&self, lock: &str) -> Result<Option<LockHolder>, LockError> {
        match self.execute(LockCommand::Holder {
            lock: lock.to_string(),
        })? {
            LockReply::Holder(holder) => Ok(holder),
            other => Err(unexpected(other)),
        }
    }

    /// Stops renewing the session that holds `lock`; whether there was one.
    fn revoke_holder(&self, lock: &str) -> Result<bool, LockError> {
        match self.execute(LockCommand::RevokeHolder {
            lock: lock.to_string(),
        })? {
            LockReply::Revoked(found) => Ok(found),
            other => Err(unexpected(other)),
        }
    }

    /// Reads a small file.
    fn read_file(&self, name: &str) -> Result<Option<LockFile>, LockError> {
        match self.execute(LockCommand::ReadFile {
            name: name.to_string(),
        })? {
            LockReply::File(file) => Ok(file),
            other => Err(unexpected(other)),
        }
    }

    /// Writes a small file if its version is `expected` (0: must not exist).
    fn write_file(&self, name: &str, expected: u64, contents: &[u8]) -> Result<u64, LockError> {
        let command = LockCommand::WriteFile {
            name: name.to_string(),
            expected,
            contents: contents.to_vec(),
        };
        match self.execute(command)? {
            LockReply::Written { version } => Ok(version),
            other => Err(unexpected(other)),
        }
    }

    /// Puts a key attached to `session`; returns its revision.
    fn put_leased(
        &self,
        session: SessionId,
        name: &str,
        contents: &[u8],
    ) -> Result<u64, LockError> {
        let command = LockCommand::PutLeased {
            session,
            name: name.to_string(),
            contents: contents.to_vec(),
        };
        match self.execute(command)? {
            LockReply::Written { version } => Ok(version),
            other => Err(unexpected(other)),
        }
    }

    /// The leased keys whose names start with `prefix`, in name order.
    fn list_leased(&self, prefix: &str) -> Result<Vec<LeasedKey>, LockError> {
        match self.execute(LockCommand::ListLeased {
            prefix: prefix.to_string(),
        })? {
            LockReply::Leased(keys) => Ok(keys),
            other => Err(unexpected(other)),
        }
    }
}

impl<T: LockService + ?Sized> LockServiceExt for T {}

/// The lock service in one process: a [`LockCore`] behind a mutex, timed by a clock
/// the owner supplies (a manual clock in tests).
pub struct LocalLockService {
    core: Mutex<LockCore>,
    clock: Box<dyn Fn() -> Time + Send + Sync>,
}

impl LocalLockService {
    /// A service with session lease `lease`, reading time from `clock`.
    pub fn new(lease: Duration, clock: impl Fn() -> Time + Send + Sync + 'static) -> Self {
        Self {
            core: Mutex::new(LockCore::new(lease)),
            clock: Box::new(clock),
        }
    }
}

impl LockService for LocalLockService {
    fn execute(&self, command: LockCommand) -> Result<LockReply, LockError> {
        let now = (self.clock)();
        let mut core = self
            .core
            .lock()
            .expect("lock core mutex poisoned: a command panicked");
        let result = core.apply(now, &command);
        core.check_invariants();
        result
    }
}
