//! Who is calling the public API, and whether they may do what they ask — checked here,
//! before a request becomes a library call, so nothing a user may not do reaches Paxos.
//!
//! With `[auth] require_users`, every call must come from a user (`megastore user`: a
//! token in `authorization: Bearer <token>`, or a client certificate's common name) or
//! from the operator (who may do anything); each is then held to its roles' grants
//! (`megastore_access`). Users and roles are read from lockd every [`ACCESS_REFRESH`],
//! so a revocation takes effect within that bound for every call that starts after it
//! (and at the latest at the commit of a transaction begun before: a commit checks its
//! staged writes again). A gateway that cannot read them for [`ACCESS_STALE_MAX`]
//! refuses users rather than serve from a document that may have revoked them.
//! Refusals are written to the audit log.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use megastore_access::{Access, Directory, Principal, Target};
use megastore_rpc::{LockdClient, OperatorAuth};
use megastore_schema::Catalog;
use megastore_types::EgId;
use tonic::{Request, Status};

/// How often a gateway reads users and roles again: the bound on a revocation's delay.
pub(crate) const ACCESS_REFRESH: Duration = Duration::from_secs(1);

/// A gateway that could not read users and roles for this long refuses users.
pub(crate) const ACCESS_STALE_MAX: Duration = Duration::from_secs(10);

const HEADER: &str = "authorization";

/// What the gateway last read, and when.
struct Loaded {
    directory: Arc<Directory>,
    at: Instant,
}

/// The public API's check, on one replica.
pub(crate) struct AccessControl {
    operator: OperatorAuth,
    required: bool,
    loaded: RwLock<Option<Loaded>>,
}

/// Who made a call.
#[derive(Clone)]
enum Who {
    /// Users are not required: anyone may do anything.
    Anyone,
    /// The operator token or an operator's certificate: anything.
    Operator,
    /// A user, held to its grants.
    User(Principal),
}

/// The caller of one request, for its checks.
#[derive(Clone)]
pub(crate) struct Caller {
    who: Who,
    audit: OperatorAuth,
}

/// What a staged write touches, checked again at commit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Written {
    /// Rows of an untyped group, by its name.
    Group(Vec<u8>),
    /// Entities of a table (or, for queues, a typed group's root table).
    Table(String),
}

impl Written {
    fn target(&self) -> Target<'_> {
        match self {
            Written::Group(name) => Target::Group(name),
            Written::Table(table) => Target::Table(table),
        }
    }
}

/// How much of a typed group a group-level call needs its tables to allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tables {
    /// Any one of the group's tables (its position, a transaction's outcome).
    Any,
    /// The group's root table (its queues).
    Root,
    /// Every table of the group (its raw rows, which hold them all).
    Every,
}

impl Caller {
    /// The user's name (`None`: the operator, or anyone when users are not required).
    pub(crate) fn user(&self) -> Option<&str> {
        match &self.who {
            Who::User(principal) => Some(&principal.user),
            Who::Anyone | Who::Operator => None,
        }
    }

    /// Whether checks apply to this caller at all.
    fn checked(&self) -> Option<&Principal> {
        match &self.who {
            Who::User(principal) => Some(principal),
            Who::Anyone | Who::Operator => None,
        }
    }

    fn denied(&self, principal: &Principal, access: Access, what: &str) -> Status {
        let why = format!(
            "user {:?} may not {access} {what}: no grant of its roles allows it (megastore role grant ROLE {access} ...)",
            principal.user
        );
        let who = format!("user {}", principal.user);
        tracing::warn!(target: "megastore::audit", who, what, outcome = "denied", why);
        self.audit
            .record(&who, &format!("{access} {what}"), "denied", Some(&why));
        Status::permission_denied(why)
    }

    /// Passes if the caller may `access` `target`.
    pub(crate) fn require(&self, access: Access, target: Target<'_>) -> Result<(), Status> {
        match self.checked() {
            Some(principal) if !principal.allows(access, target) => {
                Err(self.denied(principal, access, &target.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// Passes if the caller may `access` every target of `written`.
    pub(crate) fn require_all(&self, access: Access, written: &[Written]) -> Result<(), Status> {
        written
            .iter()
            .try_for_each(|w| self.require(access, w.target()))
    }

    /// Passes if the caller may read index `index` of `catalog`: the table it indexes
    /// (an index that does not exist is left to the library to refuse).
    pub(crate) fn require_index(&self, catalog: &Catalog, index: &str) -> Result<(), Status> {
        if self.checked().is_none() {
            return Ok(());
        }
        match catalog
            .index(index)
            .and_then(|i| catalog.table_by_id(i.table))
        {
            Some(table) => self.require(Access::Read, Target::Table(&table.name)),
            None => Ok(()),
        }
    }

    /// Passes if the caller may `access` group `eg`: an untyped one by its name, a
    /// typed one through `span` of its tables (`catalog` is needed for typed groups
    /// only, and only when the caller is a user).
    pub(crate) fn require_group(
        &self,
        access: Access,
        eg: &EgId,
        span: Tables,
        catalog: Option<&Catalog>,
    ) -> Result<(), Status> {
        let Some(principal) = self.checked() else {
            return Ok(());
        };
        if let Some(name) = megastore_client::group_name(eg) {
            return self.require(access, Target::Group(&name));
        }
        let tables = catalog.map(|c| group_tables(c, eg)).unwrap_or_default();
        let allowed = |t: &&String| principal.allows(access, Target::Table(t));
        let ok = match span {
            _ if tables.is_empty() => false,
            Tables::Any => tables.iter().any(|t| allowed(&t)),
            Tables::Root => allowed(&&tables[0]),
            Tables::Every => tables.iter().all(|t| allowed(&t)),
        };
        if ok {
            return Ok(());
        }
        let what = match span {
            Tables::Any => "any table of",
            Tables::Root => "the root table of",
            Tables::Every => "every table of",
        };
        Err(self.denied(
            principal,
            access,
            &format!(
                "{what} group {}",
                megastore_client::describe_group(catalog, eg)
            ),
        ))
    }
}

/// What a queue send to, or receipt from, group `eg` touches: an untyped group by its
/// name, a typed one by its root table.
pub(crate) fn written_group(eg: &EgId, catalog: Option<&Catalog>) -> Written {
    match megastore_client::group_name(eg) {
        Some(name) => Written::Group(name),
        None => Written::Table(
            catalog
                .and_then(|c| group_tables(c, eg).into_iter().next())
                .unwrap_or_default(),
        ),
    }
}

/// A typed group's tables, its root table first (none if the schema does not know it).
fn group_tables(catalog: &Catalog, eg: &EgId) -> Vec<String> {
    let megastore_schema::keyspace::RowOwner::Typed { root, .. } =
        megastore_schema::keyspace::owner_of_row(Some(catalog), &eg.0)
    else {
        return Vec::new();
    };
    let Some(root_table) = catalog.table(&root) else {
        return Vec::new();
    };
    let mut tables = vec![root_table.name.clone()];
    tables.extend(
        catalog
            .tables
            .iter()
            .filter(|t| t.id != root_table.id && catalog.root_of(t).id == root_table.id)
            .map(|t| t.name.clone()),
    );
    tables
}

impl AccessControl {
    /// The check `config`'s `[auth]` asks for; with users required, it reads them from
    /// `lockd` now and every [`ACCESS_REFRESH`] in a task of its own.
    pub(crate) fn start(
        config: &megastore_config::ClusterConfig,
        operator: OperatorAuth,
        lockd: LockdClient,
    ) -> Arc<Self> {
        let required = config.auth.as_ref().is_some_and(|a| a.require_users);
        let control = Arc::new(Self {
            operator,
            required,
            loaded: RwLock::new(None),
        });
        if required {
            let weak = Arc::downgrade(&control);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(ACCESS_REFRESH);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(control) = weak.upgrade() else {
                        return;
                    };
                    match megastore_client::access_store::load_access(&lockd).await {
                        Ok((doc, _)) => {
                            let loaded = Loaded {
                                directory: Arc::new(Directory::new(&doc)),
                                at: Instant::now(),
                            };
                            *control.loaded.write().unwrap_or_else(|p| p.into_inner()) =
                                Some(loaded);
                        }
                        Err(e) => tracing::warn!("cannot read users and roles from lockd: {e}"),
                    }
                }
            });
        }
        control
    }

    fn directory(&self) -> Result<Arc<Directory>, Status> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        match &*loaded {
            Some(l) if l.at.elapsed() < ACCESS_STALE_MAX => Ok(Arc::clone(&l.directory)),
            Some(l) => Err(Status::unavailable(format!(
                "this replica could not read users and roles from lockd for {:?}; it serves users again once it can",
                l.at.elapsed()
            ))),
            None => Err(Status::unavailable(
                "this replica has not read users and roles from lockd yet; try again shortly",
            )),
        }
    }

    /// `caller` as the users and roles read last make it: a stream that outlives a
    /// call (a watch, pages of a scan) checks each item it sends against this, so a
    /// revocation stops it within [`ACCESS_REFRESH`] too.
    pub(crate) fn current(&self, caller: &Caller) -> Result<Caller, Status> {
        let Who::User(principal) = &caller.who else {
            return Ok(caller.clone());
        };
        match self.directory()?.by_name(&principal.user) {
            Some(now) => Ok(Caller {
                who: Who::User(now),
                audit: caller.audit.clone(),
            }),
            None => Err(Status::permission_denied(format!(
                "user {:?} was removed",
                principal.user
            ))),
        }
    }

    /// Who made `request`: refused (`UNAUTHENTICATED`) when users are required and it
    /// comes from no user and not from the operator.
    pub(crate) fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let caller = |who| Caller {
            who,
            audit: self.operator.clone(),
        };
        if !self.required {
            return Ok(caller(Who::Anyone));
        }
        if self.operator.is_operator(request) {
            return Ok(caller(Who::Operator));
        }
        let directory = self.directory()?;
        let token = request
            .metadata()
            .get(HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let principal = match token {
            Some(token) => directory.by_token(token),
            None => megastore_rpc::peer_common_name(request)
                .and_then(|name| directory.by_certificate(&name)),
        };
        match principal {
            Some(principal) => Ok(caller(Who::User(principal))),
            None => {
                let why = match token {
                    Some(_) => "the token this call carried is no user's (revoked, or mistyped)",
                    None => {
                        "this replica serves users only ([auth] require_users): send a user's token as `authorization: Bearer <token>`, or a user's client certificate"
                    }
                };
                let peer = request
                    .remote_addr()
                    .map_or_else(|| "unknown peer".to_string(), |a| a.to_string());
                let who = format!("no user, at {peer}");
                tracing::warn!(target: "megastore::audit", who, what = "public API", outcome = "denied", why);
                self.operator
                    .record(&who, "public API", "denied", Some(why));
                Err(Status::unauthenticated(why))
            }
        }
    }
}
