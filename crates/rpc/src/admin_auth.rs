//! The operator on administration (`[auth]` in the config): with a token configured, a
//! call passes only if it carries `authorization: Bearer <token>`, or comes over mutual
//! TLS with a client certificate whose common name `[auth] operator_certificates`
//! lists; a refusal is `PERMISSION_DENIED`, saying what was missing. Without `[auth]`,
//! every call passes (`megastore dev`, and clusters that rely on their network alone).
//! Actions and refusals go to the audit log ([`OperatorAuth::admit`]).

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

const HEADER: &str = "authorization";

/// The administration check, and where it records what it decided.
#[derive(Clone)]
pub struct OperatorAuth {
    token: Option<Arc<str>>,
    /// Common names of client certificates whose holders are operators.
    certificates: Arc<[String]>,
    audit: Option<Arc<AuditFile>>,
}

/// `[auth] audit_file`: one JSON object per line, appended.
struct AuditFile {
    file: Mutex<std::fs::File>,
    /// Which process writes (`replica a`, `lockd lock-0`).
    process: String,
}

/// Equal contents, compared in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl OperatorAuth {
    /// The check for `token` (`None`: every call passes).
    pub fn new(token: Option<String>) -> Self {
        Self {
            token: token.map(Arc::from),
            certificates: Arc::from(Vec::new()),
            audit: None,
        }
    }

    /// The check `config`'s `[auth]` asks for, at process `process`: its operator
    /// token, and its audit file if it names one. An unreadable token or audit file is
    /// an error naming it.
    pub fn from_config(
        config: &megastore_config::ClusterConfig,
        process: &str,
    ) -> Result<Self, String> {
        let mut auth = Self::new(config.operator_token().map_err(|e| e.to_string())?);
        if let Some(listed) = config.auth.as_ref().map(|a| &a.operator_certificates) {
            auth.certificates = Arc::from(listed.clone());
        }
        match config.auth.as_ref().and_then(|a| a.audit_file.as_ref()) {
            Some(path) => auth
                .with_audit_file(path, process)
                .map_err(|e| format!("auth.audit_file {}: {e}", path.display())),
            None => Ok(auth),
        }
    }

    /// The same check, also appending its audit records to `path` as process
    /// `process`.
    pub fn with_audit_file(mut self, path: &Path, process: &str) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        self.audit = Some(Arc::new(AuditFile {
            file: Mutex::new(file),
            process: process.to_string(),
        }));
        Ok(self)
    }

    /// Appends one record to the audit file, if there is one (a failure to write is
    /// logged: the call itself was decided already).
    pub fn record(&self, who: &str, what: &str, outcome: &str, why: Option<&str>) {
        let Some(audit) = &self.audit else {
            return;
        };
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let line = serde_json::json!({
            "at_ms": u64::try_from(at_ms).unwrap_or(u64::MAX),
            "process": audit.process,
            "who": who,
            "what": what,
            "outcome": outcome,
            "why": why,
        });
        let mut file = audit.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = writeln!(file, "{line}") {
            tracing::warn!(target: "megastore::audit", "cannot append to the audit file: {e}");
        }
    }

    /// Whether calls must carry a token.
    pub fn required(&self) -> bool {
        self.token.is_some()
    }

    /// Whether the call carries the operator token, or comes with an operator's client
    /// certificate (never, without `[auth]`).
    pub fn is_operator<T>(&self, request: &Request<T>) -> bool {
        self.check(request).is_ok() && self.required()
    }

    /// Passes a call that carries the token or an operator's certificate, or any call
    /// when no token is configured.
    pub fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if !self.certificates.is_empty()
            && peer_common_name(request).is_some_and(|cn| self.certificates.contains(&cn))
        {
            return Ok(());
        }
        let Some(given) = request.metadata().get(HEADER) else {
            return Err(Status::permission_denied(
                "administration needs the operator token: this call carried no `authorization: Bearer <token>` ([auth] operator_token_file)",
            ));
        };
        let expected = format!("Bearer {token}");
        if same(given.as_bytes(), expected.as_bytes()) {
            Ok(())
        } else {
            Err(Status::permission_denied(
                "administration needs the operator token: the one this call carried is not it ([auth] operator_token_file)",
            ))
        }
    }

    /// [`OperatorAuth::check`], written to the audit log (tracing target
    /// `megastore::audit`): who (the peer, and whether it carried the token), what,
    /// and the outcome. Denials are always written; allowed calls when `record` (an
    /// action, not a monitoring poll).
    pub fn admit<T>(&self, request: &Request<T>, what: &str, record: bool) -> Result<(), Status> {
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown peer".to_string(), |a| a.to_string());
        let carried = request.metadata().contains_key(HEADER);
        let who = match (self.required(), carried) {
            (false, _) => format!("anyone at {peer} (no [auth])"),
            (true, true) => format!("token holder at {peer}"),
            (true, false) => format!("no token, at {peer}"),
        };
        let checked = self.check(request);
        match &checked {
            Ok(()) if record => {
                tracing::info!(target: "megastore::audit", who, what, outcome = "allowed");
                self.record(&who, what, "allowed", None);
            }
            Ok(()) => {}
            Err(denied) => {
                tracing::warn!(
                    target: "megastore::audit",
                    who,
                    what,
                    outcome = "denied",
                    why = denied.message()
                );
                self.record(&who, what, "denied", Some(denied.message()));
            }
        }
        checked
    }
}

/// The common name of the client certificate a call came with (mutual TLS), if any.
pub fn peer_common_name<T>(request: &Request<T>) -> Option<String> {
    let certificates = request.peer_certs()?;
    let leaf = certificates.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_string)
}

/// Whether the call may come from a cluster member: without TLS, any call (the network
/// is the boundary); with it, one whose client certificate may also serve — its
/// extended key usage allows `serverAuth`, or is not restricted. A client-only
/// certificate (`clientAuth` alone: a user's or an operator's, from `megastore certs
/// --client`) is not a member's.
pub fn peer_is_member<T>(request: &Request<T>) -> bool {
    let Some(certificates) = request.peer_certs() else {
        return true;
    };
    let Some(leaf) = certificates.first() else {
        return true;
    };
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
        return false;
    };
    match parsed.extended_key_usage() {
        Ok(None) => true,
        Ok(Some(usage)) => usage.value.server_auth || usage.value.any,
        Err(_) => false,
    }
}

/// An interceptor for the cluster's own services (replication, coordinators, lockd):
/// refuses a user's or an operator's client-only certificate ([`peer_is_member`]), so
/// that a certificate made for the public API or for administration cannot speak the
/// protocol itself.
pub fn members_only(request: Request<()>) -> Result<Request<()>, Status> {
    if peer_is_member(&request) {
        Ok(request)
    } else {
        Err(Status::permission_denied(
            "this service serves cluster members only: a client-only certificate (a user's or an operator's) may call the public API and administration, not the protocol",
        ))
    }
}

/// `message` as a request carrying the operator token, if there is one.
pub fn with_operator_token<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token
        && let Ok(value) = MetadataValue::try_from(format!("Bearer {token}"))
    {
        request.metadata_mut().insert(HEADER, value);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_passes_when_one_is_set() {
        let open = OperatorAuth::new(None);
        assert!(open.check(&Request::new(())).is_ok());
        let auth = OperatorAuth::new(Some("0123456789abcdef".into()));
        let missing = auth.check(&Request::new(())).unwrap_err();
        assert_eq!(missing.code(), tonic::Code::PermissionDenied);
        assert!(missing.message().contains("carried no"), "{missing:?}");
        let wrong = auth
            .check(&with_operator_token((), Some("0123456789abcdeX")))
            .unwrap_err();
        assert!(wrong.message().contains("is not it"), "{wrong:?}");
        assert!(
            auth.check(&with_operator_token((), Some("0123456789abcdef")))
                .is_ok()
        );
        assert!(
            auth.check(&with_operator_token((), Some("0123456789abcdef0")))
                .is_err()
        );
    }
}
