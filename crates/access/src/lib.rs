//! Who may do what on the public API (`megastore.client.v1.Megastore`): users, the
//! roles they hold, and the grants of each role — one JSON document kept in lockd
//! (`auth/access`, written and read only by operators), edited by `megastore user` and
//! `megastore role`, and checked by every replica's gateway before a request reaches
//! Paxos.
//!
//! Responsibility: the document's shape, its edits (each refusing bad input with an
//! error naming what), how a caller is recognised (a token, or a client certificate's
//! common name), and the check itself ([`allows`]).
//!
//! Not here: storing the document (the client library's `access_store`), serving or
//! refreshing it (the gateway), and the operator (`[auth]` in the cluster config; an
//! operator may do anything).
//!
//! Invariants:
//! - *tokens-never-stored*: a user's token is shown once, when made; the document keeps
//!   only its SHA-256, so reading the document does not let anyone act as a user;
//! - *deny-by-default*: a user may do only what some grant of one of its roles allows;
//!   a user with no roles may do nothing, and a role that does not exist grants nothing;
//! - *access-is-ordered*: `admin` implies `write`, which implies `read`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The lockd file holding the document.
pub const ACCESS_FILE: &str = "auth/access";

/// Users one document holds at most (the document is one lockd file).
pub const USERS_MAX: usize = 10_000;
/// Roles one document holds at most.
pub const ROLES_MAX: usize = 1_000;
/// Grants one role holds at most.
pub const GRANTS_PER_ROLE_MAX: usize = 256;
/// The longest user or role name.
pub const NAME_BYTES_MAX: usize = 64;
/// The longest prefix or table name a grant names.
pub const RESOURCE_BYTES_MAX: usize = 1_000;

/// Why an edit or a lookup failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AccessError {
    /// Bad input, naming what is wrong with it.
    #[error("{0}")]
    Invalid(String),
    /// No user of that name.
    #[error("no user {0:?}")]
    NoSuchUser(String),
    /// No role of that name.
    #[error("no role {0:?}")]
    NoSuchRole(String),
    /// The name is taken.
    #[error("{0} exists already")]
    Exists(String),
    /// The stored document does not parse.
    #[error("the access document ({ACCESS_FILE}) is corrupt: {0}")]
    Corrupt(String),
}

/// What a grant allows; each level includes the ones below it (*access-is-ordered*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Reads, scans, watches, resolving a transaction's outcome.
    Read,
    /// Writes, commits, queue sends and receipts, locks and leased keys.
    Write,
    /// Deciding another client's in-doubt two-phase commit (`SettlePrepared`).
    Admin,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Admin => "admin",
        })
    }
}

impl FromStr for Access {
    type Err = AccessError;
    fn from_str(s: &str) -> Result<Self, AccessError> {
        match s {
            "read" => Ok(Access::Read),
            "write" => Ok(Access::Write),
            "admin" => Ok(Access::Admin),
            other => Err(AccessError::Invalid(format!(
                "access {other:?}: give read, write or admin"
            ))),
        }
    }
}

/// What a grant is on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// Untyped entity groups whose name starts with this prefix (`""`: all of them),
    /// by every path: reads, transactions, the versioned primitives, watches, queues.
    Groups(String),
    /// The entities of one schema table, in every group: entity reads and writes,
    /// table and index scans. A typed group's raw rows and position (`Begin`) are
    /// reached through the tables it holds.
    Table(String),
    /// The application's lock and leased-key names starting with this prefix.
    Locks(String),
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Groups(prefix) => write!(f, "groups:{prefix}"),
            Resource::Table(table) => write!(f, "table:{table}"),
            Resource::Locks(prefix) => write!(f, "locks:{prefix}"),
        }
    }
}

impl FromStr for Resource {
    type Err = AccessError;
    fn from_str(s: &str) -> Result<Self, AccessError> {
        let invalid = |why: &str| {
            AccessError::Invalid(format!(
                "resource {s:?}: {why} (give groups:PREFIX, table:NAME or locks:PREFIX)"
            ))
        };
        let (kind, name) = s.split_once(':').ok_or_else(|| invalid("no kind"))?;
        if name.len() > RESOURCE_BYTES_MAX {
            return Err(invalid(&format!("longer than {RESOURCE_BYTES_MAX} bytes")));
        }
        match kind {
            "groups" => Ok(Resource::Groups(name.to_string())),
            "locks" => Ok(Resource::Locks(name.to_string())),
            "table" if name.is_empty() => Err(invalid("no table name")),
            "table" => Ok(Resource::Table(name.to_string())),
            _ => Err(invalid(&format!("unknown kind {kind:?}"))),
        }
    }
}

/// One permission: an access level on a resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Grant {
    /// What it allows.
    pub access: Access,
    /// On what.
    pub on: Resource,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.access, self.on)
    }
}

/// What a request touches, as the gateway names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// An untyped group, by its name.
    Group(&'a [u8]),
    /// A schema table's entities.
    Table(&'a str),
    /// An application lock or leased key, by its name.
    Lock(&'a str),
}

impl fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Group(name) => write!(f, "group {:?}", String::from_utf8_lossy(name)),
            Target::Table(table) => write!(f, "table {table}"),
            Target::Lock(name) => write!(f, "lock or leased key {name:?}"),
        }
    }
}

/// Whether `grants` allow `access` on `target` (*deny-by-default*,
/// *access-is-ordered*).
pub fn allows(grants: &[Grant], access: Access, target: Target<'_>) -> bool {
    grants.iter().any(|grant| {
        grant.access >= access
            && match (&grant.on, target) {
                (Resource::Groups(prefix), Target::Group(name)) => {
                    name.starts_with(prefix.as_bytes())
                }
                (Resource::Table(table), Target::Table(name)) => table == name,
                (Resource::Locks(prefix), Target::Lock(name)) => name.starts_with(prefix.as_str()),
                _ => false,
            }
    })
}

/// A role: a named set of grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Role {
    /// What holders of the role may do.
    pub grants: BTreeSet<Grant>,
}

/// A user: how it is recognised, and its roles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The SHA-256 (hex) of its token, if it has one (*tokens-never-stored*).
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// The common name of its client certificate, if it authenticates by one.
    #[serde(default)]
    pub certificate: Option<String>,
    /// The roles it holds.
    #[serde(default)]
    pub roles: BTreeSet<String>,
}

/// Every user and role of a cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessDoc {
    /// Users by name.
    #[serde(default)]
    pub users: BTreeMap<String, User>,
    /// Roles by name.
    #[serde(default)]
    pub roles: BTreeMap<String, Role>,
}

/// A fresh token: 32 random bytes, as hex behind a recognisable prefix.
fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("mst_{}", hex::encode(bytes))
}

/// The SHA-256 of `token`, as stored.
pub fn token_digest(token: &str) -> String {
    hex::encode(ring::digest::digest(
        &ring::digest::SHA256,
        token.as_bytes(),
    ))
}

/// Refuses a user, role or certificate name that is empty, longer than
/// [`NAME_BYTES_MAX`], or holds anything but letters, digits and `. _ @ -`, naming
/// `what` it is.
pub fn check_name(what: &str, name: &str) -> Result<(), AccessError> {
    let fine = |c: char| c.is_ascii_alphanumeric() || "._@-".contains(c);
    if name.is_empty() || name.len() > NAME_BYTES_MAX || !name.chars().all(fine) {
        return Err(AccessError::Invalid(format!(
            "{what} name {name:?}: give 1 to {NAME_BYTES_MAX} letters, digits or . _ @ -"
        )));
    }
    Ok(())
}

impl AccessDoc {
    /// The document stored as `json`.
    pub fn from_json(json: &[u8]) -> Result<Self, AccessError> {
        serde_json::from_slice(json).map_err(|e| AccessError::Corrupt(e.to_string()))
    }

    /// The document as stored.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("the access document serializes")
    }

    fn user_mut(&mut self, name: &str) -> Result<&mut User, AccessError> {
        self.users
            .get_mut(name)
            .ok_or_else(|| AccessError::NoSuchUser(name.to_string()))
    }

    fn role_mut(&mut self, name: &str) -> Result<&mut Role, AccessError> {
        self.roles
            .get_mut(name)
            .ok_or_else(|| AccessError::NoSuchRole(name.to_string()))
    }

    /// Adds user `name`, recognised by a new token (returned, to be shown once) and, if
    /// given, by its client certificate's common name `certificate`. A certificate
    /// user may go without a token (`token: false`).
    pub fn add_user(
        &mut self,
        name: &str,
        certificate: Option<&str>,
        token: bool,
    ) -> Result<Option<String>, AccessError> {
        check_name("user", name)?;
        if self.users.contains_key(name) {
            return Err(AccessError::Exists(format!("user {name:?}")));
        }
        if self.users.len() >= USERS_MAX {
            return Err(AccessError::Invalid(format!(
                "{USERS_MAX} users exist, the most there may be"
            )));
        }
        if let Some(subject) = certificate {
            if subject.is_empty() || subject.len() > RESOURCE_BYTES_MAX {
                return Err(AccessError::Invalid(format!(
                    "certificate common name {subject:?}: give 1 to {RESOURCE_BYTES_MAX} bytes"
                )));
            }
            if let Some(other) = self.user_by_certificate(subject) {
                return Err(AccessError::Exists(format!(
                    "a user with certificate {subject:?} ({other})"
                )));
            }
        }
        if certificate.is_none() && !token {
            return Err(AccessError::Invalid(format!(
                "user {name:?} needs a token or a certificate to be recognised by"
            )));
        }
        let token = token.then(new_token);
        self.users.insert(
            name.to_string(),
            User {
                token_sha256: token.as_deref().map(token_digest),
                certificate: certificate.map(str::to_string),
                roles: BTreeSet::new(),
            },
        );
        Ok(token)
    }

    /// Removes user `name`: its token and certificate stop working.
    pub fn remove_user(&mut self, name: &str) -> Result<(), AccessError> {
        self.users
            .remove(name)
            .map(drop)
            .ok_or_else(|| AccessError::NoSuchUser(name.to_string()))
    }

    /// Replaces user `name`'s token with a new one (returned): the old one stops
    /// working.
    pub fn new_user_token(&mut self, name: &str) -> Result<String, AccessError> {
        let token = new_token();
        self.user_mut(name)?.token_sha256 = Some(token_digest(&token));
        Ok(token)
    }

    /// Gives user `user` role `role` (which must exist).
    pub fn grant_role(&mut self, user: &str, role: &str) -> Result<(), AccessError> {
        if !self.roles.contains_key(role) {
            return Err(AccessError::NoSuchRole(role.to_string()));
        }
        self.user_mut(user)?.roles.insert(role.to_string());
        Ok(())
    }

    /// Takes role `role` from user `user`; returns whether it held it.
    pub fn revoke_role(&mut self, user: &str, role: &str) -> Result<bool, AccessError> {
        Ok(self.user_mut(user)?.roles.remove(role))
    }

    /// Adds an empty role `name`.
    pub fn add_role(&mut self, name: &str) -> Result<(), AccessError> {
        check_name("role", name)?;
        if self.roles.contains_key(name) {
            return Err(AccessError::Exists(format!("role {name:?}")));
        }
        if self.roles.len() >= ROLES_MAX {
            return Err(AccessError::Invalid(format!(
                "{ROLES_MAX} roles exist, the most there may be"
            )));
        }
        self.roles.insert(name.to_string(), Role::default());
        Ok(())
    }

    /// Removes role `name`, and takes it from every user holding it.
    pub fn remove_role(&mut self, name: &str) -> Result<(), AccessError> {
        self.roles
            .remove(name)
            .ok_or_else(|| AccessError::NoSuchRole(name.to_string()))?;
        for user in self.users.values_mut() {
            user.roles.remove(name);
        }
        Ok(())
    }

    /// Adds `grant` to role `role`.
    pub fn grant(&mut self, role: &str, grant: Grant) -> Result<(), AccessError> {
        let role_name = role;
        let role = self.role_mut(role)?;
        if role.grants.len() >= GRANTS_PER_ROLE_MAX && !role.grants.contains(&grant) {
            return Err(AccessError::Invalid(format!(
                "role {role_name:?} has {GRANTS_PER_ROLE_MAX} grants, the most one may"
            )));
        }
        role.grants.insert(grant);
        Ok(())
    }

    /// Takes `grant` from role `role`; returns whether it had it.
    pub fn revoke(&mut self, role: &str, grant: &Grant) -> Result<bool, AccessError> {
        Ok(self.role_mut(role)?.grants.remove(grant))
    }

    /// The user whose token is `token`.
    pub fn user_by_token(&self, token: &str) -> Option<&str> {
        let digest = token_digest(token);
        self.users
            .iter()
            .find(|(_, u)| u.token_sha256.as_deref() == Some(digest.as_str()))
            .map(|(name, _)| name.as_str())
    }

    /// The user whose client certificate has common name `subject`.
    pub fn user_by_certificate(&self, subject: &str) -> Option<&str> {
        self.users
            .iter()
            .find(|(_, u)| u.certificate.as_deref() == Some(subject))
            .map(|(name, _)| name.as_str())
    }

    /// Every grant user `user` holds through its roles (none for an unknown user).
    pub fn grants_of(&self, user: &str) -> Vec<Grant> {
        let Some(user) = self.users.get(user) else {
            return Vec::new();
        };
        let grants: BTreeSet<&Grant> = user
            .roles
            .iter()
            .filter_map(|r| self.roles.get(r))
            .flat_map(|r| r.grants.iter())
            .collect();
        grants.into_iter().cloned().collect()
    }
}

/// A document made ready for checking every call: users by token digest and by
/// certificate, and each user's grants, resolved once.
#[derive(Debug, Default)]
pub struct Directory {
    by_token: std::collections::HashMap<String, String>,
    by_certificate: std::collections::HashMap<String, String>,
    grants: std::collections::HashMap<String, std::sync::Arc<[Grant]>>,
}

/// A recognised user and what it may do.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The user's name.
    pub user: String,
    /// Its grants, as of the document it was recognised by.
    pub grants: std::sync::Arc<[Grant]>,
}

impl Principal {
    /// Whether it may `access` `target`.
    pub fn allows(&self, access: Access, target: Target<'_>) -> bool {
        allows(&self.grants, access, target)
    }
}

impl Directory {
    /// `doc`, ready for checking.
    pub fn new(doc: &AccessDoc) -> Self {
        let mut directory = Directory::default();
        for (name, user) in &doc.users {
            if let Some(digest) = &user.token_sha256 {
                directory.by_token.insert(digest.clone(), name.clone());
            }
            if let Some(subject) = &user.certificate {
                directory
                    .by_certificate
                    .insert(subject.clone(), name.clone());
            }
            directory
                .grants
                .insert(name.clone(), doc.grants_of(name).into());
        }
        directory
    }

    /// User `user`, with its grants as of this document.
    pub fn by_name(&self, user: &str) -> Option<Principal> {
        self.grants.get(user).map(|grants| Principal {
            user: user.to_string(),
            grants: std::sync::Arc::clone(grants),
        })
    }

    /// The user whose token is `token`.
    pub fn by_token(&self, token: &str) -> Option<Principal> {
        self.by_name(self.by_token.get(&token_digest(token))?)
    }

    /// The user whose client certificate has common name `subject`.
    pub fn by_certificate(&self, subject: &str) -> Option<Principal> {
        self.by_name(self.by_certificate.get(subject)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(text: &str) -> Grant {
        let (access, on) = text.split_once(' ').unwrap();
        Grant {
            access: access.parse().unwrap(),
            on: on.parse().unwrap(),
        }
    }

    #[test]
    fn a_user_may_do_only_what_its_roles_grant() {
        let mut doc = AccessDoc::default();
        let token = doc.add_user("alice", None, true).unwrap().unwrap();
        assert!(token.starts_with("mst_"));
        assert_eq!(doc.user_by_token(&token), Some("alice"));
        assert_eq!(doc.user_by_token("mst_guess"), None);
        assert!(!String::from_utf8(doc.to_json()).unwrap().contains(&token));
        // No roles: nothing.
        assert!(doc.grants_of("alice").is_empty());
        doc.add_role("alice-rw").unwrap();
        doc.grant("alice-rw", grant("write groups:alice/")).unwrap();
        doc.grant("alice-rw", grant("read table:Photo")).unwrap();
        doc.grant_role("alice", "alice-rw").unwrap();
        let grants = doc.grants_of("alice");
        assert!(allows(&grants, Access::Read, Target::Group(b"alice/1")));
        assert!(allows(&grants, Access::Write, Target::Group(b"alice/1")));
        assert!(!allows(&grants, Access::Admin, Target::Group(b"alice/1")));
        assert!(!allows(&grants, Access::Read, Target::Group(b"alic")));
        assert!(!allows(&grants, Access::Read, Target::Group(b"bob/1")));
        assert!(allows(&grants, Access::Read, Target::Table("Photo")));
        assert!(!allows(&grants, Access::Write, Target::Table("Photo")));
        assert!(!allows(&grants, Access::Read, Target::Table("PhotoX")));
        assert!(!allows(&grants, Access::Read, Target::Lock("alice/")));
        let directory = Directory::new(&doc);
        let alice = directory.by_token(&token).unwrap();
        assert_eq!(alice.user, "alice");
        assert!(alice.allows(Access::Write, Target::Group(b"alice/")));
        assert!(directory.by_token("mst_guess").is_none());
        // Revoking the role, or removing it, takes everything back.
        assert!(doc.revoke_role("alice", "alice-rw").unwrap());
        assert!(doc.grants_of("alice").is_empty());
        doc.grant_role("alice", "alice-rw").unwrap();
        doc.remove_role("alice-rw").unwrap();
        assert!(doc.grants_of("alice").is_empty());
        let round_trip = AccessDoc::from_json(&doc.to_json()).unwrap();
        assert_eq!(round_trip, doc);
    }

    #[test]
    fn bad_input_is_refused_naming_it() {
        let mut doc = AccessDoc::default();
        let e = doc.add_user("", None, true).unwrap_err().to_string();
        assert!(e.contains("user name"), "{e}");
        let e = doc.add_user("a b", None, true).unwrap_err().to_string();
        assert!(e.contains("\"a b\""), "{e}");
        let e = doc.add_user("nobody", None, false).unwrap_err().to_string();
        assert!(e.contains("token or a certificate"), "{e}");
        doc.add_user("svc", Some("svc-cert"), false).unwrap();
        assert_eq!(doc.user_by_certificate("svc-cert"), Some("svc"));
        let e = doc.add_user("svc2", Some("svc-cert"), false).unwrap_err();
        assert!(matches!(e, AccessError::Exists(_)), "{e}");
        assert!(matches!(
            doc.grant_role("svc", "missing"),
            Err(AccessError::NoSuchRole(_))
        ));
        assert!(matches!(
            doc.grant_role("missing", "missing"),
            Err(AccessError::NoSuchRole(_))
        ));
        for bad in ["groups", "rows:x", "table:"] {
            let e = bad.parse::<Resource>().unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert!("owner".parse::<Access>().is_err());
        assert!(AccessDoc::from_json(b"{\"users\": 3}").is_err());
    }

    #[test]
    fn a_new_token_replaces_the_old() {
        let mut doc = AccessDoc::default();
        let old = doc.add_user("bob", None, true).unwrap().unwrap();
        let new = doc.new_user_token("bob").unwrap();
        assert_eq!(doc.user_by_token(&old), None);
        assert_eq!(doc.user_by_token(&new), Some("bob"));
        doc.remove_user("bob").unwrap();
        assert_eq!(doc.user_by_token(&new), None);
    }
}
