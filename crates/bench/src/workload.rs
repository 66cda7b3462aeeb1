//! The closed loop: each client picks a group, reads or writes, records, repeats.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::closed_loop::run_clients;
use crate::report::{Done, Kind, Report};
use megastore_client::{Attempt, Client, ClientError};
use megastore_config::ClusterConfig;
use megastore_paxos::{DataQuery, ReadMode};
use megastore_types::{EgId, ReplicaKind};

/// The most concurrent clients a run may have (each holds connections to every process).
const CLIENTS_MAX: u32 = 4096;
/// The largest value a run may write: a log entry, and a snapshot of the group, travel
/// in one message.
use megastore_types::limits::VALUE_BYTES_MAX;

/// What to run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Entity groups the operations spread over (uniformly).
    pub groups: u32,
    /// Concurrent clients, each with one operation outstanding.
    pub clients: u32,
    /// The share of operations that are reads (0.0–1.0).
    pub read_fraction: f64,
    /// How reads are served.
    pub read_mode: ReadMode,
    /// Bytes per written value.
    pub value_size: usize,
    /// Stop after this long (after the warm-up).
    pub duration: Duration,
    /// Run this long first without measuring: a fresh group's first writes find no
    /// position leader, and a fresh connection has no call queues warm.
    pub warmup: Duration,
    /// Stop after this many operations (all clients together).
    pub operations: Option<u64>,
    /// Sites the clients act from, in turn (default: every full replica's site).
    pub sites: Vec<String>,
    /// Prefix of the groups' keys (so runs can use fresh groups).
    pub group_prefix: String,
    /// Attempts of one write before it counts as a conflict.
    pub write_attempts: u32,
    /// Each worker holds a client at every site and acts on a group from the site
    /// after the one that acted on it last — so no write comes from the site of the
    /// group's position leader (the last writer's). Otherwise each worker acts from
    /// one site (the sites taken in turn).
    pub rotate_sites: bool,
    /// Client connections per site that the workers share (worker `i` uses
    /// connection `i mod connections` at each site), as the request handlers of an
    /// application server share its one client; `None`: one connection per worker.
    /// Workers sharing a connection share its protocol core, which combines their
    /// commits to one group (docs/protocol.md, "Combining commits").
    pub connections: Option<u32>,
    /// Write each group once, in order, instead of picking groups at random: operation
    /// `n` writes group `n` (`megastore bench --fill`, to make many groups quickly).
    pub fill: bool,
    /// Also count the operations completed in each interval of this width, from the
    /// end of the warm-up ([`Report::timeline`](crate::Report)): what a stall (a range
    /// move, a replica killed) looks like over time.
    pub timeline: Option<Duration>,
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            groups: 100,
            clients: 8,
            read_fraction: 0.5,
            read_mode: ReadMode::Current,
            value_size: 100,
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            operations: None,
            sites: Vec::new(),
            group_prefix: "bench".into(),
            write_attempts: 8,
            rotate_sites: false,
            connections: None,
            fill: false,
            timeline: None,
        }
    }
}

/// Why a run cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// A setting is out of range.
    #[error("{0}")]
    Invalid(String),
    /// A client could not connect.
    #[error("connecting a client at site {site}: {error}")]
    Connect {
        /// The site.
        site: String,
        /// Why.
        error: ClientError,
    },
}

impl Spec {
    /// Checks what does not depend on the cluster: counts, sizes and shares.
    pub(crate) fn check_shape(&self) -> Result<(), SpecError> {
        let invalid = |m: String| Err(SpecError::Invalid(m));
        if self.groups == 0 {
            return invalid("--groups must be at least 1".into());
        }
        if self.clients == 0 || self.clients > CLIENTS_MAX {
            return invalid(format!(
                "--clients must be between 1 and {CLIENTS_MAX}, not {}",
                self.clients
            ));
        }
        if self.value_size > VALUE_BYTES_MAX {
            return invalid(format!(
                "--value-size must be at most {VALUE_BYTES_MAX} bytes (the value size limit), not {}",
                self.value_size
            ));
        }
        if let Err(e) = megastore_client::group(group_name(self, u32::MAX).as_bytes()) {
            return invalid(format!("--group-prefix {:?}: {e}", self.group_prefix));
        }
        if !(0.0..=1.0).contains(&self.read_fraction) {
            return invalid(format!(
                "--reads must be between 0 and 1, not {}",
                self.read_fraction
            ));
        }
        if self.connections == Some(0) {
            return invalid("--connections must be at least 1".into());
        }
        if self.fill && !self.warmup.is_zero() {
            return invalid(
                "--warmup does not go with --fill: every write of a fill counts".into(),
            );
        }
        if self.operations == Some(0) || self.duration.is_zero() {
            return invalid("--operations and --duration must be more than zero".into());
        }
        Ok(())
    }

    pub(crate) fn check(&self, config: &ClusterConfig) -> Result<Vec<String>, SpecError> {
        self.check_shape()?;
        let invalid = |m: String| Err(SpecError::Invalid(m));
        let sites = if self.sites.is_empty() {
            config
                .replicas
                .iter()
                .filter(|r| r.kind == ReplicaKind::Full)
                .map(|r| r.site.clone())
                .collect()
        } else {
            self.sites.clone()
        };
        for site in &sites {
            if config.site_id(site).is_none() {
                return invalid(format!(
                    "--site {site:?} is not a site of the cluster (sites: {})",
                    config.cluster.sites.join(", ")
                ));
            }
        }
        if sites.is_empty() {
            return invalid("the cluster has no full replica to act from".into());
        }
        Ok(sites)
    }
}

pub(crate) fn group_name(spec: &Spec, n: u32) -> String {
    format!("{}-{n:06}", spec.group_prefix)
}

fn group(spec: &Spec, n: u32) -> EgId {
    megastore_client::group(group_name(spec, n).as_bytes())
        .expect("Spec::check refused group names over the limit")
}

/// The one key each group's workload reads and writes.
pub(crate) const KEY: &[u8] = b"bench";

async fn write(
    client: &Client,
    eg: &EgId,
    value: &[u8],
    attempts: u32,
) -> Result<bool, ClientError> {
    for _ in 0..attempts {
        let mut txn = client.begin(eg);
        txn.set(KEY, b"v", value)?;
        match txn.commit().await? {
            Attempt::Done(_) => return Ok(true),
            Attempt::Retry { .. } => continue,
        }
    }
    Ok(false)
}

/// Runs `spec` against the cluster of `config`; `progress` is called with the number of
/// operations done so far (often; keep it cheap).
pub async fn run(
    config: &ClusterConfig,
    spec: &Spec,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<Report, SpecError> {
    let sites = spec.check(config)?;
    let mut workers = Vec::new();
    // Connections by (site, number): shared by the workers that map to one.
    let mut connections: HashMap<(&String, usize), Client> = HashMap::new();
    for i in 0..spec.clients as usize {
        let at: Vec<&String> = if spec.rotate_sites {
            sites.iter().collect()
        } else {
            vec![&sites[i % sites.len()]]
        };
        let number = spec.connections.map_or(i, |c| i % c as usize);
        let mut clients = Vec::new();
        for site in at {
            let client = match connections.get(&(site, number)) {
                Some(client) => client.clone(),
                None => {
                    let client = Client::connect(config, site).await.map_err(|error| {
                        SpecError::Connect {
                            site: site.clone(),
                            error,
                        }
                    })?;
                    connections.insert((site, number), client.clone());
                    client
                }
            };
            clients.push(client);
        }
        workers.push(clients);
    }
    // Each worker's clients (one per site it acts from), and which of them acted on
    // each group last.
    let workers: Vec<(Vec<Client>, HashMap<u32, usize>)> = workers
        .into_iter()
        .map(|clients| (clients, HashMap::new()))
        .collect();
    let shared = Arc::new(spec.clone());
    let value = Arc::new(vec![b'x'; spec.value_size]);
    let report = run_clients(spec, &sites, workers, progress, move |worker, pick| {
        let (spec, value) = (shared.clone(), value.clone());
        async move {
            let (clients, mut last_site) = worker;
            let eg = group(&spec, pick.n);
            let site = last_site
                .get(&pick.n)
                .map_or(0, |s| (s + 1) % clients.len());
            last_site.insert(pick.n, site);
            let client = &clients[site];
            let began = Instant::now();
            let outcome = if pick.read {
                let query = DataQuery::Rows(vec![KEY.to_vec()]);
                match client.read(&eg, spec.read_mode, query).await {
                    Ok(_) => Done::Timed(Kind::Read, began.elapsed()),
                    Err(e) => Done::Failed(Kind::Read, e.to_string()),
                }
            } else {
                match write(client, &eg, &value, spec.write_attempts).await {
                    Ok(true) => Done::Timed(Kind::Write, began.elapsed()),
                    Ok(false) => Done::Conflict,
                    Err(e) => Done::Failed(Kind::Write, e.to_string()),
                }
            };
            ((clients, last_site), outcome)
        }
    })
    .await;
    Ok(report)
}
