//! `cluster.toml`: what a deployment is made of — sites, replicas (kind, addresses,
//! data directory), lock service nodes and timeouts — parsed and validated.
//!
//! Responsibility: turn a file into a [`ClusterConfig`] every process can trust, or an
//! error that names the field at fault (`replicas[2].site: …`). Every process of a
//! cluster reads the same file.
//!
//! Invariants of a validated config: names and numeric ids are unique per kind of
//! process (a replica's and a `[[servers]]` entry's names share one namespace, and no
//! server has a replica's id: that id is the replica's first server); every site and
//! replica a process names is declared; every address parses and no two processes share
//! one, nor a replica server's data directory; there is at least one full replica and at
//! least one lockd node; a full replica's servers have a coordinator address; timeouts
//! are positive and the lock lease outlasts the election timeout.
//!
//! ```toml
//! [cluster]
//! name = "dev"
//! sites = ["A", "B", "C", "D"]
//!
//! [[replicas]]
//! name = "a"
//! id = 1
//! site = "A"
//! kind = "full"
//! address = "127.0.0.1:7101"
//! coordinator_address = "127.0.0.1:7201"
//! data_dir = "data/a"
//!
//! [[lockd]]
//! name = "lock-a"
//! id = 1
//! site = "A"
//! address = "127.0.0.1:7301"
//! data_dir = "data/lock-a"
//! ```

mod validate;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use megastore_types::limits::TRUNCATE_EVERY;
use megastore_types::{
    LockNodeId, ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology, TopologyError,
};

/// Why a config cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read. (The reason is in the message and is not also a
    /// `source`, so a printed chain says it once.)
    #[error("{path}: {why}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        why: std::io::Error,
    },
    /// The text is not valid TOML of the expected shape.
    #[error("{origin}: {message}")]
    Syntax {
        /// The file (or `<text>`).
        origin: String,
        /// The parser's message, with the line and field.
        message: String,
    },
    /// A field has a value that cannot work.
    #[error("{origin}: {field}: {message}")]
    Invalid {
        /// The file (or `<text>`).
        origin: String,
        /// The field, as a path: `replicas[1].site`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A whole deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The cluster itself.
    pub cluster: ClusterSection,
    /// Timeouts (defaults suit a WAN deployment; tests shorten them).
    #[serde(default)]
    pub timeouts: Timeouts,
    /// The replicas.
    #[serde(default)]
    pub replicas: Vec<ReplicaConfig>,
    /// Servers beyond each replica's first: more processes a replica's ranges can be
    /// moved to (docs/operations.md, "Adding a replica server").
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
    /// The lock service nodes.
    #[serde(default)]
    pub lockd: Vec<LockdConfig>,
    /// Mutual TLS on every gRPC endpoint (absent: plaintext).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Emulated wide-area round trips between sites (absent: none).
    #[serde(default)]
    pub wan: Vec<WanLink>,
    /// How much data history replicas keep.
    #[serde(default)]
    pub history: History,
    /// Who may call the administration API (absent: anyone who reaches a port).
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    /// The public API's bounds on open transactions.
    #[serde(default)]
    pub gateway: GatewayLimits,
}

/// `[gateway]`: how many transaction handles (`Begin`) a replica's public API keeps
/// open, and for how long unused — so no client, by mistake or on purpose, fills a
/// replica's memory with them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayLimits {
    /// A handle unused this long is dropped (a committed one's answer too).
    pub idle_txn_ms: u64,
    /// Open handles one replica keeps at most (and committed handles' answers).
    pub open_txns_max: u32,
    /// Open handles one connection (peer address and port) may have at most.
    pub open_txns_per_connection: u32,
    /// Open handles one user (`[auth] require_users`) may have at most on a replica.
    pub open_txns_per_user: u32,
}

impl Default for GatewayLimits {
    fn default() -> Self {
        Self {
            idle_txn_ms: 60_000,
            open_txns_max: 10_000,
            open_txns_per_connection: 1_000,
            open_txns_per_user: 1_000,
        }
    }
}

/// `[auth]`: the replicas' administration service (`megastore.admin.v1.Admin`: backup,
/// group listings, lag, activity) answers only calls that carry the operator token,
/// as `authorization: Bearer <token>`. The token is the first line of
/// `operator_token_file` (relative paths are relative to the config file); servers
/// read it at start, and the tools send it from the same config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// A file holding the operator token (keep it readable by operators only).
    pub operator_token_file: PathBuf,
    /// Where servers append the audit log, one JSON object per line (relative paths
    /// are relative to the config file; absent: only the processes' own logs).
    #[serde(default)]
    pub audit_file: Option<PathBuf>,
    /// Client certificates (by common name) whose holders are operators too, as the
    /// token holder is (with `[tls]`).
    #[serde(default)]
    pub operator_certificates: Vec<String>,
    /// Whether the public API serves only users (`megastore user`): every call must
    /// carry a user's token (`authorization: Bearer <token>`) or come with a user's
    /// client certificate, and may do only what the user's roles grant (or carry the
    /// operator token). Off: the public API serves anyone who reaches it.
    #[serde(default)]
    pub require_users: bool,
}

/// The shortest operator token accepted: a guessable token protects nothing.
pub const OPERATOR_TOKEN_MIN_BYTES: usize = 16;

/// `[history]`: how many log positions of data history a replica keeps below its
/// truncation point. Reads at older positions are refused, and the cell versions only
/// they could see are garbage-collected. (The client library's reads ask for the
/// position they have just found, so they never ask that far back.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct History {
    /// Positions kept (at least 1).
    pub kept_positions: u64,
    /// Log entries each replica keeps below the point every replica has applied, so
    /// that a watcher that far behind (or resuming after a disconnect) still reads
    /// every change; an older start position is refused as collected. Each kept entry
    /// stays in memory for every group that has it.
    pub log_positions: u64,
    /// Log entries a replica's group may hold while another replica does not answer
    /// (down, or cut off), which holds truncation back: past this many, the group's log
    /// is truncated to half of it, and the replica that was away installs a snapshot
    /// of the group when it is back. Bounds what an outage costs the other replicas in
    /// memory and disk. At least twice `log_positions` + 64; unset,
    /// [`History::outage_log_bound`] decides.
    pub outage_log_positions: Option<u64>,
}

impl History {
    /// The outage bound in force: `outage_log_positions` if set, else
    /// [`OUTAGE_LOG_POSITIONS_DEFAULT`] or, if more, the least allowed with
    /// `log_positions` (twice `log_positions` + 64).
    pub fn outage_log_bound(&self) -> u64 {
        self.outage_log_positions
            .unwrap_or_else(|| OUTAGE_LOG_POSITIONS_DEFAULT.max(self.outage_log_floor()))
    }

    /// The least `outage_log_positions` may be: the sweep truncates a busy group's log
    /// every [`TRUNCATE_EVERY`] positions above the watchers' entries, and an outage's
    /// truncation to half the bound must leave at least that much.
    pub fn outage_log_floor(&self) -> u64 {
        // Saturating: `log_positions` is bounded only once the config is validated.
        self.log_positions
            .saturating_add(TRUNCATE_EVERY)
            .saturating_mul(2)
    }
}

/// The default of [`History::log_positions`].
pub const LOG_POSITIONS_DEFAULT: u64 = 64;

/// The outage bound unless set (or raised by `log_positions`): [`History::outage_log_bound`].
pub const OUTAGE_LOG_POSITIONS_DEFAULT: u64 = 1024;

/// The most [`History::log_positions`] may be.
pub const LOG_POSITIONS_MAX: u64 = 100_000;

impl Default for History {
    fn default() -> Self {
        Self {
            kept_positions: 256,
            log_positions: LOG_POSITIONS_DEFAULT,
            outage_log_positions: None,
        }
    }
}

/// `[[wan]]`: an emulated round trip between two sites, for seeing wide-area latency on
/// one machine. Every replica and client request from one of the sites to a replica or
/// coordinator at the other waits this long before it is sent (the request and its
/// reply together cross the link once each way). Leave it out of real deployments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanLink {
    /// The two sites.
    pub between: [String; 2],
    /// Their round-trip time in milliseconds.
    pub rtt_ms: u64,
}

/// `[tls]`: every process serves gRPC over TLS and demands a client certificate signed
/// by `ca_file`; every process and client presents `cert_file` (relative paths are
/// relative to the config file). `megastore certs` makes a CA and a certificate for
/// every host of a config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate authority (PEM) that signs every certificate of the cluster.
    pub ca_file: PathBuf,
    /// This process's certificate chain (PEM), valid for every host it is reached at.
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// The cluster's name: data directories are stamped with it.
    pub name: String,
    /// The sites, by name; processes name the site they run at.
    pub sites: Vec<String>,
}

/// `[[replicas]]`: one replica server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaConfig {
    /// What `--id` names it by.
    pub name: String,
    /// Its protocol id: never reuse one for a different replica.
    pub id: u16,
    /// Its site.
    pub site: String,
    /// Full, witness or read-only.
    pub kind: ReplicaKind,
    /// Where it serves replication and the public API.
    pub address: String,
    /// Where its coordinator serves (full replicas only).
    #[serde(default)]
    pub coordinator_address: Option<String>,
    /// Its RocksDB directory (relative paths are relative to the config file).
    pub data_dir: PathBuf,
    /// Where it serves Prometheus metrics (`GET /metrics`); none if absent.
    #[serde(default)]
    pub metrics_address: Option<String>,
    /// Where its coordinator serves Prometheus metrics (full replicas only).
    #[serde(default)]
    pub coordinator_metrics_address: Option<String>,
    /// Where it serves the administration service (`megastore.admin.v1.Admin`:
    /// backups, listings, lag) instead of `address` — `127.0.0.1:…` keeps it to the
    /// host; absent: on `address`.
    #[serde(default)]
    pub admin_address: Option<String>,
    /// How many entity groups it keeps loaded in memory (absent:
    /// [`CACHE_GROUPS_DEFAULT`]). Past it, quiescent groups are dropped least recently
    /// used first, and loaded again from their root row when next asked for; groups
    /// with work left stay, so the count can pass it by that many.
    #[serde(default)]
    pub cache_groups: Option<u64>,
}

/// A replica's group cache when `cache_groups` is absent: at a few kB per loaded
/// group (docs/performance.md), a few hundred MB.
pub const CACHE_GROUPS_DEFAULT: u64 = 100_000;

impl ReplicaConfig {
    /// Where it serves its administration service: `admin_address`, else `address`.
    pub fn admin_endpoint(&self) -> &str {
        self.admin_address.as_deref().unwrap_or(&self.address)
    }

    /// How many groups it keeps loaded: `cache_groups`, else [`CACHE_GROUPS_DEFAULT`].
    pub fn cache_groups(&self) -> usize {
        usize::try_from(self.cache_groups.unwrap_or(CACHE_GROUPS_DEFAULT)).unwrap_or(usize::MAX)
    }
}

/// `[[servers]]`: one more replica server for a replica's slot. Each `[[replicas]]`
/// entry is its replica's first server (server id = replica id); a server listed here
/// runs the same way (`megastore replica --id NAME`, and `megastore coordinator --id
/// NAME` for a full replica's), holds none of the replica's ranges when it starts, and
/// takes over ranges moved to it. It has the replica's id, site and kind, and its own
/// addresses and data directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// What `--id` names it by (unique among replicas and servers).
    pub name: String,
    /// Its server id in the placement: never a replica's id (that is the replica's
    /// first server), never reused for a different server.
    pub id: u16,
    /// The replica (its `name`) whose ranges it may hold.
    pub replica: String,
    /// Where it serves replication and the public API.
    pub address: String,
    /// Where its coordinator serves (a full replica's servers only).
    #[serde(default)]
    pub coordinator_address: Option<String>,
    /// Its RocksDB directory (relative paths are relative to the config file).
    pub data_dir: PathBuf,
    /// Where it serves Prometheus metrics (`GET /metrics`); none if absent.
    #[serde(default)]
    pub metrics_address: Option<String>,
    /// Where its coordinator serves Prometheus metrics (a full replica's servers only).
    #[serde(default)]
    pub coordinator_metrics_address: Option<String>,
    /// Where it serves the administration service instead of `address`.
    #[serde(default)]
    pub admin_address: Option<String>,
    /// How many entity groups it keeps loaded in memory (absent:
    /// [`CACHE_GROUPS_DEFAULT`]).
    #[serde(default)]
    pub cache_groups: Option<u64>,
}

/// One replica server process: a replica's first server (its `[[replicas]]` entry) or
/// one of its `[[servers]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProcess {
    /// Its server id in the placement.
    pub server: u16,
    /// Whether it is the replica's first server (its `[[replicas]]` entry).
    pub first: bool,
    /// What it runs as: the replica's entry with this server's name, addresses, data
    /// directory and cache size (the replica's id, site and kind are its own).
    pub process: ReplicaConfig,
}

impl ServerConfig {
    /// The process this server runs as, given its replica's entry.
    fn process_of(&self, replica: &ReplicaConfig) -> ReplicaConfig {
        ReplicaConfig {
            name: self.name.clone(),
            id: replica.id,
            site: replica.site.clone(),
            kind: replica.kind,
            address: self.address.clone(),
            coordinator_address: self.coordinator_address.clone(),
            data_dir: self.data_dir.clone(),
            metrics_address: self.metrics_address.clone(),
            coordinator_metrics_address: self.coordinator_metrics_address.clone(),
            admin_address: self.admin_address.clone(),
            cache_groups: self.cache_groups,
        }
    }
}

/// `[[lockd]]`: one lock service node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockdConfig {
    /// What `--id` names it by.
    pub name: String,
    /// Its Raft node id: never reuse one for a different node.
    pub id: u16,
    /// Its site.
    pub site: String,
    /// Where it serves the lock service and Raft.
    pub address: String,
    /// Its RocksDB directory (relative paths are relative to the config file).
    pub data_dir: PathBuf,
    /// Where it serves Prometheus metrics (`GET /metrics`); none if absent.
    #[serde(default)]
    pub metrics_address: Option<String>,
}

/// How long cross-group decisions are kept when `[timeouts] decision_retention_ms` is
/// not given.
pub const DECISION_RETENTION_DEFAULT: Duration = Duration::from_secs(3_600);

/// `[timeouts]`, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// How long a lock service session lives without a keep-alive.
    pub lock_lease_ms: u64,
    /// Raft election timeout of the lock service (the upper bound is twice this).
    pub election_timeout_ms: u64,
    /// Raft heartbeat interval of the lock service.
    pub heartbeat_ms: u64,
    /// How long one RPC may take before it is retried elsewhere or given up.
    pub rpc_ms: u64,
    /// Bound on the rate error between any two processes' clocks, in parts per
    /// million: coordinators shorten their leases by it.
    pub max_clock_drift_ppm: u32,
    /// Time between a replica's sweeps (finishing abandoned positions, catching up,
    /// truncating the log).
    pub sweep_ms: u64,
    /// How long a cross-group transaction may stay prepared and undecided before
    /// whoever meets it (a reader, a writer it locks out, a replica's sweep) aborts it:
    /// how long a client that died mid-commit can lock rows. Half the lock lease when
    /// not given.
    pub prepared_ms: Option<u64>,
    /// How long a cross-group transaction's decision row is kept, counted from when the
    /// transaction began preparing; after it, once every participant is finished, the
    /// full replicas delete it. A client that lost a commit's answer resolves it by
    /// the transaction's id within this window. One hour when not given; at least four
    /// prepared timeouts and five lock leases (how long a client resolves).
    pub decision_retention_ms: Option<u64>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            lock_lease_ms: 10_000,
            election_timeout_ms: 1_500,
            heartbeat_ms: 300,
            rpc_ms: 2_000,
            max_clock_drift_ppm: 200,
            sweep_ms: 1_000,
            prepared_ms: None,
            decision_retention_ms: None,
        }
    }
}

impl Timeouts {
    /// The lock lease.
    pub fn lock_lease(&self) -> Duration {
        Duration::from_millis(self.lock_lease_ms)
    }

    /// The RPC timeout.
    pub fn rpc(&self) -> Duration {
        Duration::from_millis(self.rpc_ms)
    }

    /// The prepared timeout of cross-group transactions (half the lock lease unless
    /// set).
    pub fn prepared(&self) -> Duration {
        self.prepared_ms
            .map_or(self.lock_lease() / 2, Duration::from_millis)
    }

    /// How long cross-group decisions are kept (one hour unless set).
    pub fn decision_retention(&self) -> Duration {
        self.decision_retention_ms
            .map_or(DECISION_RETENTION_DEFAULT, Duration::from_millis)
    }
}

impl ClusterConfig {
    /// Reads and validates a config file; relative data directories are resolved
    /// against the file's directory.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|why| ConfigError::Read {
            path: path.to_path_buf(),
            why,
        })?;
        let mut config = Self::parse(&text, &path.display().to_string())?;
        let base = path.parent().unwrap_or(Path::new("."));
        for r in &mut config.replicas {
            r.data_dir = base.join(&r.data_dir);
        }
        for s in &mut config.servers {
            s.data_dir = base.join(&s.data_dir);
        }
        for l in &mut config.lockd {
            l.data_dir = base.join(&l.data_dir);
        }
        if let Some(tls) = &mut config.tls {
            for file in [&mut tls.ca_file, &mut tls.cert_file, &mut tls.key_file] {
                *file = base.join(&*file);
            }
        }
        if let Some(auth) = &mut config.auth {
            auth.operator_token_file = base.join(&auth.operator_token_file);
            if let Some(audit) = &mut auth.audit_file {
                *audit = base.join(&*audit);
            }
        }
        Ok(config)
    }

    /// The operator token of `[auth]` (`None` without `[auth]`), read from its file
    /// now: an unreadable, empty or short token is an error naming the file.
    pub fn operator_token(&self) -> Result<Option<String>, ConfigError> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        let path = &auth.operator_token_file;
        let text = std::fs::read_to_string(path).map_err(|why| ConfigError::Read {
            path: path.clone(),
            why,
        })?;
        let token = text.lines().next().unwrap_or_default().trim().to_string();
        if token.len() < OPERATOR_TOKEN_MIN_BYTES {
            return Err(ConfigError::Invalid {
                origin: path.display().to_string(),
                field: "auth.operator_token_file".into(),
                message: format!(
                    "the token (its first line) must be at least {OPERATOR_TOKEN_MIN_BYTES} bytes, not {}",
                    token.len()
                ),
            });
        }
        Ok(Some(token))
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let config: ClusterConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        validate::check(&config).map_err(|(field, message)| ConfigError::Invalid {
            origin: origin.to_string(),
            field,
            message,
        })?;
        Ok(config)
    }

    /// The emulated round trip between two sites (zero within a site, and between
    /// sites no `[[wan]]` link names).
    pub fn wan_rtt(&self, from: &str, to: &str) -> Duration {
        self.wan
            .iter()
            .find(|l| {
                (l.between[0] == from && l.between[1] == to)
                    || (l.between[0] == to && l.between[1] == from)
            })
            .map_or(Duration::ZERO, |l| Duration::from_millis(l.rtt_ms))
    }

    /// The id of a site.
    pub fn site_id(&self, name: &str) -> Option<SiteId> {
        self.cluster
            .sites
            .iter()
            .position(|s| s == name)
            .and_then(|i| u16::try_from(i).ok())
            .map(SiteId)
    }

    /// The protocol's view of the replicas.
    pub fn topology(&self) -> Result<Topology, TopologyError> {
        Topology::new(
            self.replicas
                .iter()
                .map(|r| ReplicaInfo {
                    id: ReplicaId(r.id),
                    kind: r.kind,
                    site: self.site_id(&r.site).unwrap_or(SiteId(u16::MAX)),
                })
                .collect(),
        )
    }

    /// The replica called `name`.
    pub fn replica(&self, name: &str) -> Option<&ReplicaConfig> {
        self.replicas.iter().find(|r| r.name == name)
    }

    /// The replica with protocol id `id`.
    pub fn replica_by_id(&self, id: ReplicaId) -> Option<&ReplicaConfig> {
        self.replicas.iter().find(|r| r.id == id.0)
    }

    /// Every replica server process, in config order: each replica's first server,
    /// then the `[[servers]]`.
    pub fn server_processes(&self) -> Vec<ServerProcess> {
        let firsts = self.replicas.iter().map(|r| ServerProcess {
            server: r.id,
            first: true,
            process: r.clone(),
        });
        let more = self.servers.iter().filter_map(|s| {
            Some(ServerProcess {
                server: s.id,
                first: false,
                process: s.process_of(self.replica(&s.replica)?),
            })
        });
        firsts.chain(more).collect()
    }

    /// The replica server process called `name` (a replica's or a server's name).
    pub fn server_process(&self, name: &str) -> Option<ServerProcess> {
        self.server_processes()
            .into_iter()
            .find(|p| p.process.name == name)
    }

    /// The replica server process called `name`, or an error listing the names there
    /// are.
    pub fn named_server_process(&self, name: &str) -> Result<ServerProcess, String> {
        self.server_process(name).ok_or_else(|| {
            format!(
                "no replica or server is called {name:?} in the config (replicas and servers: {})",
                Self::names(
                    self.server_processes()
                        .iter()
                        .map(|p| p.process.name.as_str())
                )
            )
        })
    }

    /// The lockd node called `name`.
    pub fn lockd_node(&self, name: &str) -> Option<&LockdConfig> {
        self.lockd.iter().find(|l| l.name == name)
    }

    /// The lockd node with id `id`.
    pub fn lockd_by_id(&self, id: LockNodeId) -> Option<&LockdConfig> {
        self.lockd.iter().find(|l| l.id == id.0)
    }

    /// Every lockd node id, in config order.
    pub fn lockd_ids(&self) -> Vec<LockNodeId> {
        self.lockd.iter().map(|l| LockNodeId(l.id)).collect()
    }

    /// Names of every process of a kind, for "no such name" errors.
    pub fn names<'a>(names: impl Iterator<Item = &'a str>) -> String {
        let names: BTreeSet<&str> = names.collect();
        names.into_iter().collect::<Vec<_>>().join(", ")
    }
}

/// Checks an address field: `host:port`, where host is an IP literal or a DNS name
/// (compose gives containers names).
pub fn check_address(text: &str) -> Result<(), String> {
    let shape = || format!("{text:?} is not an address like 127.0.0.1:7101");
    let (host, port) = text.rsplit_once(':').ok_or_else(shape)?;
    if host.is_empty() || host.contains(char::is_whitespace) || host.contains('/') {
        return Err(shape());
    }
    port.parse::<u16>().map_err(|_| shape())?;
    Ok(())
}

/// Resolves an address to listen on or connect to.
pub fn resolve_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    text.to_socket_addrs()
        .map_err(|e| format!("cannot resolve {text:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}
