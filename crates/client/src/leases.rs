//! Applications' leases, locks and leased keys, held in the lock service (lockd).
//!
//! A lease is a lock-service session with its own ttl. Its expiry is judged by
//! lockd's leader clock, the one clock every holder and taker of a lock already
//! depends on; a new leader restarts every lease on its own clock, so a leader change
//! can lengthen a lease but never shorten it. A holder judges its own lease
//! conservatively from its monotonic clock: [`Lease::valid_until`] counts the ttl
//! from before the request was sent, shortened by twice the cluster's clock drift
//! bound (`megastore_lock::holder_lease`, the coordinators' rule too), so it ends
//! before lockd's deadline.
//!
//! A lock taken under a lease returns a [`FencingToken`]. Tokens come from one counter
//! in lockd's replicated state, which only grows — across leader changes and
//! restarts — so each acquisition of a lock name has a higher token than every
//! earlier one. Writes to the store carry it in an
//! [`Assert::Fence`](crate::Assert::Fence): a group's fence key remembers the highest
//! token applied, and refuses lower ones. That, not the holder's own clock, is what
//! stops a paused holder that wakes up after its lease ended.
//!
//! Leased keys live in lockd too, attached to a lease, and vanish in the same state
//! transition that ends it (revocation or expiry), so no reader ever sees a key of an
//! ended lease. They are small (names up to [`LEASED_NAME_BYTES_MAX`], values up to
//! [`LEASED_VALUE_BYTES_MAX`], [`LEASED_KEYS_PER_LEASE_MAX`] per lease): membership
//! and presence, not data. Rows of entity groups are not attached to leases: a group
//! cannot consult another service's clock on its commit path, and deleting rows after
//! an expiry would leave a window in which they outlive their lease.
//!
//! Every name an application gives is kept under its own prefix in lockd, and every
//! call acts only on sessions granted as leases (lockd's *leases-apart*), so no
//! application request can touch the cluster's own locks, files or sessions (a
//! coordinator's, say: renewing it after its process died would stall writes).

use std::time::{Duration, Instant};

pub use megastore_lock::{
    LEASE_TTL_MAX, LEASE_TTL_MIN, LEASED_KEYS_PER_LEASE_MAX, LEASED_NAME_BYTES_MAX,
    LEASED_VALUE_BYTES_MAX,
};
use megastore_lock::{LockCommand, LockError, LockReply, SessionId};

use crate::client::{Client, ClientError};

/// Where applications' locks live in lockd's namespace (under its `APP_PREFIX`).
const LOCKS: &str = "app/lock/";
/// Where applications' leased keys live in lockd's namespace.
const KEYS: &str = "app/key/";

/// A lease's id (its lock-service session).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseId(pub u64);

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A lock's fencing token: higher for every later acquisition of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Its id.
    pub id: LeaseId,
    /// How long it lives without a keep-alive.
    pub ttl: Duration,
    /// Until when this holder may rely on it: the ttl counted from before the last
    /// grant or keep-alive was sent, less twice the clock drift bound.
    pub valid_until: Instant,
}

/// Who holds a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockHolding {
    /// The lease holding it.
    pub lease: LeaseId,
    /// The acquisition's fencing token.
    pub token: FencingToken,
}

/// A key attached to a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedEntry {
    /// The key's name.
    pub name: String,
    /// Its value.
    pub value: Vec<u8>,
    /// The lease it lives with.
    pub lease: LeaseId,
    /// Higher for every later put of any leased key (also of this name after it
    /// vanished).
    pub revision: u64,
}

/// Why the lock service refused a lease or lock request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The lease expired or was revoked: its locks and keys are gone.
    #[error("lease {0} has ended (expired or revoked)")]
    Ended(LeaseId),
    /// Another lease holds the lock.
    #[error("lock {name:?} is held by lease {} (fencing token {})", .holder.lease, .holder.token.0)]
    Held {
        /// The lock.
        name: String,
        /// Its holder.
        holder: LockHolding,
    },
    /// The lease does not hold the lock.
    #[error("lease {lease} does not hold lock {name:?}")]
    NotHolder {
        /// The lease.
        lease: LeaseId,
        /// The lock.
        name: String,
    },
}

fn check_name(what: &str, name: &str) -> Result<(), ClientError> {
    if name.is_empty() {
        return Err(ClientError::InvalidArgument(format!("{what}: empty")));
    }
    if name.len() > LEASED_NAME_BYTES_MAX {
        return Err(ClientError::InvalidArgument(format!(
            "{what}: {} bytes, over the limit of {LEASED_NAME_BYTES_MAX}",
            name.len()
        )));
    }
    Ok(())
}

fn unexpected(reply: LockReply) -> ClientError {
    ClientError::Lock(format!("unexpected reply {reply:?}"))
}

/// A refusal of the lock service as this library reports it.
fn lock_error(e: LockError, lease: Option<LeaseId>) -> ClientError {
    match e {
        LockError::SessionExpired(s) | LockError::SessionRevoked(s) => {
            ClientError::Lease(LeaseError::Ended(lease.unwrap_or(LeaseId(s.0))))
        }
        LockError::Invalid(why) => ClientError::InvalidArgument(why),
        LockError::NotLeader | LockError::Unavailable => {
            ClientError::Unavailable("the lock service (lockd) has no reachable leader".into())
        }
        // Answers to one command only, which names the lock: `lock` and `unlock` map
        // them themselves.
        e @ (LockError::Held(_)
        | LockError::NotHolder
        | LockError::VersionMismatch { .. }
        | LockError::PermissionDenied(_)) => ClientError::Lock(e.to_string()),
    }
}

impl Client {
    async fn lock_call(
        &self,
        lease: Option<LeaseId>,
        command: LockCommand,
    ) -> Result<LockReply, ClientError> {
        self.peers()
            .lockd()
            .execute(command)
            .await
            .map_err(|e| lock_error(e, lease))
    }

    /// How long this holder may count on a lease of `ttl` ([`megastore_lock::holder_lease`]).
    fn holder_lease(&self, ttl: Duration) -> Duration {
        megastore_lock::holder_lease(ttl, self.max_clock_drift_ppm(), Duration::ZERO)
    }

    /// [`Client::lock_call`] for a command on lock `name`, whose refusals name it.
    async fn lock_command(
        &self,
        lease: LeaseId,
        name: &str,
        command: LockCommand,
    ) -> Result<LockReply, ClientError> {
        self.peers()
            .lockd()
            .execute(command)
            .await
            .map_err(|e| match e {
                LockError::Held(holder) => ClientError::Lease(LeaseError::Held {
                    name: name.to_string(),
                    holder: LockHolding {
                        lease: LeaseId(holder.session.0),
                        token: FencingToken(holder.sequencer.0),
                    },
                }),
                LockError::NotHolder => ClientError::Lease(LeaseError::NotHolder {
                    lease,
                    name: name.to_string(),
                }),
                e => lock_error(e, Some(lease)),
            })
    }

    /// Grants a lease of `ttl` ([`megastore_lock::LEASE_TTL_MIN`] to
    /// [`megastore_lock::LEASE_TTL_MAX`]); `owner` names the holder in listings.
    pub async fn grant_lease(&self, owner: &str, ttl: Duration) -> Result<Lease, ClientError> {
        check_name("owner", owner)?;
        let sent = Instant::now();
        let command = LockCommand::GrantLease {
            owner: owner.to_string(),
            ttl,
        };
        match self.lock_call(None, command).await? {
            LockReply::Session { session, lease } => Ok(Lease {
                id: LeaseId(session.0),
                ttl: lease,
                valid_until: sent + self.holder_lease(lease),
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Extends `lease` by its ttl from now, and moves its `valid_until` (its `ttl`
    /// becomes the one the service renewed it by).
    pub async fn keep_alive(&self, lease: &mut Lease) -> Result<(), ClientError> {
        self.keep_alive_owned_by(lease, None).await
    }

    /// [`Client::keep_alive`], only if `lease`'s owner name starts with `owned_by`
    /// (a gateway acting for one of its users); another owner's lease is answered as
    /// ended.
    pub async fn keep_alive_owned_by(
        &self,
        lease: &mut Lease,
        owned_by: Option<&str>,
    ) -> Result<(), ClientError> {
        let sent = Instant::now();
        let command = LockCommand::RenewLease {
            session: SessionId(lease.id.0),
            owned_by: owned_by.map(str::to_string),
        };
        match self.lock_call(Some(lease.id), command).await? {
            LockReply::Renewed { lease: ttl } => {
                lease.ttl = ttl;
                lease.valid_until = sent + self.holder_lease(ttl);
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    /// Ends `lease` now: its locks are free and its keys gone.
    pub async fn revoke_lease(&self, lease: LeaseId) -> Result<(), ClientError> {
        self.revoke_lease_owned_by(lease, None).await
    }

    /// [`Client::revoke_lease`], only if the lease's owner name starts with
    /// `owned_by`; another owner's lease is answered as ended.
    pub async fn revoke_lease_owned_by(
        &self,
        lease: LeaseId,
        owned_by: Option<&str>,
    ) -> Result<(), ClientError> {
        let command = LockCommand::RevokeLease {
            session: SessionId(lease.0),
            owned_by: owned_by.map(str::to_string),
        };
        match self.lock_call(Some(lease), command).await? {
            LockReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Takes lock `name` under `lease` (at once or not at all; again by its holder,
    /// the same token). The token fences the holder's writes: see
    /// [`Assert::Fence`](crate::Assert::Fence).
    pub async fn lock(&self, lease: LeaseId, name: &str) -> Result<FencingToken, ClientError> {
        check_name("lock name", name)?;
        let command = LockCommand::Acquire {
            session: SessionId(lease.0),
            lock: format!("{LOCKS}{name}"),
        };
        match self.lock_command(lease, name, command).await? {
            LockReply::Acquired { sequencer } => Ok(FencingToken(sequencer.0)),
            other => Err(unexpected(other)),
        }
    }

    /// Gives lock `name` back.
    pub async fn unlock(&self, lease: LeaseId, name: &str) -> Result<(), ClientError> {
        check_name("lock name", name)?;
        let command = LockCommand::Release {
            session: SessionId(lease.0),
            lock: format!("{LOCKS}{name}"),
        };
        match self.lock_command(lease, name, command).await? {
            LockReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Who holds lock `name` now (linearizable), with its token.
    pub async fn lock_holder(&self, name: &str) -> Result<Option<LockHolding>, ClientError> {
        check_name("lock name", name)?;
        let command = LockCommand::Holder {
            lock: format!("{LOCKS}{name}"),
        };
        match self.lock_call(None, command).await? {
            LockReply::Holder(holder) => Ok(holder.map(|h| LockHolding {
                lease: LeaseId(h.session.0),
                token: FencingToken(h.sequencer.0),
            })),
            other => Err(unexpected(other)),
        }
    }

    /// Puts key `name` attached to `lease`: it vanishes when the lease ends. Returns
    /// its revision.
    pub async fn put_leased(
        &self,
        lease: LeaseId,
        name: &str,
        value: &[u8],
    ) -> Result<u64, ClientError> {
        check_name("key", name)?;
        if value.len() > LEASED_VALUE_BYTES_MAX {
            return Err(ClientError::InvalidArgument(format!(
                "value of leased key {name:?}: {} bytes, over the limit of {LEASED_VALUE_BYTES_MAX}",
                value.len()
            )));
        }
        let command = LockCommand::PutLeased {
            session: SessionId(lease.0),
            name: format!("{KEYS}{name}"),
            contents: value.to_vec(),
        };
        match self.lock_call(Some(lease), command).await? {
            LockReply::Written { version } => Ok(version),
            other => Err(unexpected(other)),
        }
    }

    /// The leased keys whose names start with `prefix`, in name order (at most
    /// [`LEASED_KEYS_PER_LEASE_MAX`] per live lease).
    pub async fn leased_keys(&self, prefix: &str) -> Result<Vec<LeasedEntry>, ClientError> {
        if prefix.len() > LEASED_NAME_BYTES_MAX {
            return Err(ClientError::InvalidArgument(format!(
                "prefix: {} bytes, over the limit of {LEASED_NAME_BYTES_MAX}",
                prefix.len()
            )));
        }
        let command = LockCommand::ListLeased {
            prefix: format!("{KEYS}{prefix}"),
        };
        match self.lock_call(None, command).await? {
            LockReply::Leased(keys) => Ok(keys
                .into_iter()
                .filter_map(|k| {
                    Some(LeasedEntry {
                        name: k.name.strip_prefix(KEYS)?.to_string(),
                        value: k.contents,
                        lease: LeaseId(k.session.0),
                        revision: k.revision,
                    })
                })
                .collect()),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applications_names_are_under_the_lock_services_app_prefix() {
        for prefix in [LOCKS, KEYS] {
            assert!(prefix.starts_with(megastore_lock::APP_PREFIX), "{prefix}");
        }
    }
}
