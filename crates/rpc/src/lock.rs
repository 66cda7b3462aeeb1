//! The lock service messages on the wire.

use std::time::Duration;

use megastore_lock::{
    LeasedKey, LockCommand, LockError, LockFile, LockHolder, LockReply, LockRequest, LockResponse,
    Sequencer, SessionId,
};

use crate::error::{WireError, required};
use crate::pb::lock as pb;

/// Leases travel in whole microseconds.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn holder_to_wire(h: LockHolder) -> pb::LockHolder {
    pb::LockHolder {
        session: h.session.0,
        owner: h.owner,
        sequencer: h.sequencer.0,
    }
}

fn holder_from_wire(h: pb::LockHolder) -> LockHolder {
    LockHolder {
        session: SessionId(h.session),
        owner: h.owner,
        sequencer: Sequencer(h.sequencer),
    }
}

impl From<LockRequest> for pb::LockRequest {
    fn from(request: LockRequest) -> Self {
        use pb::lock_request as r;
        let command = match request.command {
            LockCommand::OpenSession { owner } => r::Command::OpenSession(r::OpenSession { owner }),
            LockCommand::KeepAlive { session } => {
                r::Command::KeepAlive(r::KeepAlive { session: session.0 })
            }
            LockCommand::CloseSession { session } => {
                r::Command::CloseSession(r::CloseSession { session: session.0 })
            }
            LockCommand::Acquire { session, lock } => r::Command::Acquire(r::Acquire {
                session: session.0,
                lock,
            }),
            LockCommand::Release { session, lock } => r::Command::Release(r::Release {
                session: session.0,
                lock,
            }),
            LockCommand::Holder { lock } => r::Command::Holder(r::Holder { lock }),
            LockCommand::RevokeHolder { lock } => {
                r::Command::RevokeHolder(r::RevokeHolder { lock })
            }
            LockCommand::ReadFile { name } => r::Command::ReadFile(r::ReadFile { name }),
            LockCommand::WriteFile {
                name,
                expected,
                contents,
            } => r::Command::WriteFile(r::WriteFile {
                name,
                expected,
                contents,
            }),
            LockCommand::GrantLease { owner, ttl } => r::Command::GrantLease(r::GrantLease {
                owner,
                ttl_micros: micros(ttl),
            }),
            LockCommand::PutLeased {
                session,
                name,
                contents,
            } => r::Command::PutLeased(r::PutLeased {
                session: session.0,
                name,
                contents,
            }),
            LockCommand::ListLeased { prefix } => r::Command::ListLeased(r::ListLeased { prefix }),
            LockCommand::RenewLease { session, owned_by } => {
                r::Command::RenewLease(r::RenewLease {
                    session: session.0,
                    owned_by,
                })
            }
            LockCommand::RevokeLease { session, owned_by } => {
                r::Command::RevokeLease(r::RevokeLease {
                    session: session.0,
                    owned_by,
                })
            }
        };
        pb::LockRequest {
            id: request.id,
            command: Some(command),
        }
    }
}

impl TryFrom<pb::LockRequest> for LockRequest {
    type Error = WireError;

    fn try_from(request: pb::LockRequest) -> Result<Self, WireError> {
        use pb::lock_request as r;
        let command = match required(request.command, "command")? {
            r::Command::OpenSession(c) => LockCommand::OpenSession { owner: c.owner },
            r::Command::KeepAlive(c) => LockCommand::KeepAlive {
                session: SessionId(c.session),
            },
            r::Command::CloseSession(c) => LockCommand::CloseSession {
                session: SessionId(c.session),
            },
            r::Command::Acquire(c) => LockCommand::Acquire {
                session: SessionId(c.session),
                lock: c.lock,
            },
            r::Command::Release(c) => LockCommand::Release {
                session: SessionId(c.session),
                lock: c.lock,
            },
            r::Command::Holder(c) => LockCommand::Holder { lock: c.lock },
            r::Command::RevokeHolder(c) => LockCommand::RevokeHolder { lock: c.lock },
            r::Command::ReadFile(c) => LockCommand::ReadFile { name: c.name },
            r::Command::WriteFile(c) => LockCommand::WriteFile {
                name: c.name,
                expected: c.expected,
                contents: c.contents,
            },
            r::Command::GrantLease(c) => LockCommand::GrantLease {
                owner: c.owner,
                ttl: Duration::from_micros(c.ttl_micros),
            },
            r::Command::PutLeased(c) => LockCommand::PutLeased {
                session: SessionId(c.session),
                name: c.name,
                contents: c.contents,
            },
            r::Command::ListLeased(c) => LockCommand::ListLeased { prefix: c.prefix },
            r::Command::RenewLease(c) => LockCommand::RenewLease {
                session: SessionId(c.session),
                owned_by: c.owned_by,
            },
            r::Command::RevokeLease(c) => LockCommand::RevokeLease {
                session: SessionId(c.session),
                owned_by: c.owned_by,
            },
        };
        Ok(LockRequest {
            id: request.id,
            command,
        })
    }
}

fn reply_to_wire(reply: LockReply) -> pb::LockReply {
    use pb::lock_reply as r;
    let reply = match reply {
        LockReply::Session { session, lease } => r::Reply::Session(r::Session {
            session: session.0,
            lease_micros: micros(lease),
        }),
        LockReply::Renewed { lease } => r::Reply::RenewedLeaseMicros(micros(lease)),
        LockReply::Acquired { sequencer } => r::Reply::AcquiredSequencer(sequencer.0),
        LockReply::Holder(holder) => r::Reply::Holder(r::Holder {
            holder: holder.map(holder_to_wire),
        }),
        LockReply::Revoked(revoked) => r::Reply::Revoked(revoked),
        LockReply::File(file) => r::Reply::File(r::File {
            file: file.map(|f| pb::LockFile {
                version: f.version,
                contents: f.contents,
            }),
        }),
        LockReply::Written { version } => r::Reply::WrittenVersion(version),
        LockReply::Done => r::Reply::Done(true),
        LockReply::Leased(keys) => r::Reply::Leased(r::Leased {
            keys: keys
                .into_iter()
                .map(|k| pb::LeasedKey {
                    name: k.name,
                    session: k.session.0,
                    revision: k.revision,
                    contents: k.contents,
                })
                .collect(),
        }),
    };
    pb::LockReply { reply: Some(reply) }
}

fn reply_from_wire(reply: pb::LockReply) -> Result<LockReply, WireError> {
    use pb::lock_reply as r;
    Ok(match required(reply.reply, "reply")? {
        r::Reply::Session(s) => LockReply::Session {
            session: SessionId(s.session),
            lease: Duration::from_micros(s.lease_micros),
        },
        r::Reply::RenewedLeaseMicros(us) => LockReply::Renewed {
            lease: Duration::from_micros(us),
        },
        r::Reply::AcquiredSequencer(s) => LockReply::Acquired {
            sequencer: Sequencer(s),
        },
        r::Reply::Holder(h) => LockReply::Holder(h.holder.map(holder_from_wire)),
        r::Reply::Revoked(revoked) => LockReply::Revoked(revoked),
        r::Reply::File(f) => LockReply::File(f.file.map(|f| LockFile {
            version: f.version,
            contents: f.contents,
        })),
        r::Reply::WrittenVersion(version) => LockReply::Written { version },
        r::Reply::Done(_) => LockReply::Done,
        r::Reply::Leased(l) => LockReply::Leased(
            l.keys
                .into_iter()
                .map(|k| LeasedKey {
                    name: k.name,
                    session: SessionId(k.session),
                    revision: k.revision,
                    contents: k.contents,
                })
                .collect(),
        ),
    })
}

fn error_to_wire(error: LockError) -> pb::LockError {
    use pb::lock_error as e;
    let error = match error {
        LockError::SessionExpired(s) => e::Error::SessionExpired(s.0),
        LockError::SessionRevoked(s) => e::Error::SessionRevoked(s.0),
        LockError::Held(h) => e::Error::Held(holder_to_wire(h)),
        LockError::NotHolder => e::Error::NotHolder(true),
        LockError::VersionMismatch { expected, current } => {
            e::Error::VersionMismatch(e::VersionMismatch { expected, current })
        }
        LockError::NotLeader => e::Error::NotLeader(true),
        LockError::Unavailable => e::Error::Unavailable(true),
        LockError::Invalid(message) => e::Error::Invalid(message),
        LockError::PermissionDenied(message) => e::Error::PermissionDenied(message),
    };
    pb::LockError { error: Some(error) }
}

fn error_from_wire(error: pb::LockError) -> Result<LockError, WireError> {
    use pb::lock_error as e;
    Ok(match required(error.error, "error")? {
        e::Error::SessionExpired(s) => LockError::SessionExpired(SessionId(s)),
        e::Error::SessionRevoked(s) => LockError::SessionRevoked(SessionId(s)),
        e::Error::Held(h) => LockError::Held(holder_from_wire(h)),
        e::Error::NotHolder(_) => LockError::NotHolder,
        e::Error::VersionMismatch(v) => LockError::VersionMismatch {
            expected: v.expected,
            current: v.current,
        },
        e::Error::NotLeader(_) => LockError::NotLeader,
        e::Error::Unavailable(_) => LockError::Unavailable,
        e::Error::Invalid(message) => LockError::Invalid(message),
        e::Error::PermissionDenied(message) => LockError::PermissionDenied(message),
    })
}

impl From<LockResponse> for pb::LockResponse {
    fn from(response: LockResponse) -> Self {
        use pb::lock_response::Result as R;
        let result = match response.result {
            Ok(reply) => R::Reply(reply_to_wire(reply)),
            Err(error) => R::Error(error_to_wire(error)),
        };
        pb::LockResponse {
            id: response.id,
            result: Some(result),
        }
    }
}

impl TryFrom<pb::LockResponse> for LockResponse {
    type Error = WireError;

    fn try_from(response: pb::LockResponse) -> Result<Self, WireError> {
        use pb::lock_response::Result as R;
        let result = match required(response.result, "result")? {
            R::Reply(reply) => Ok(reply_from_wire(reply)?),
            R::Error(error) => Err(error_from_wire(error)?),
        };
        Ok(LockResponse {
            id: response.id,
            result,
        })
    }
}
