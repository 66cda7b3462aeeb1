//! `megastore bench --board` and `--leases`: the coordination recipes and leases.
//!
//! `--board`: W workers claim and complete T tasks of one task board
//! (`megastore_recipes::Board`, all tasks in one entity group), each worker taking the
//! next task; what is timed is each claim and each completion, and the tasks done per
//! second. With `--etcd`, the very same board code runs on etcd's transactions
//! ([`EtcdBackend`]), so the two systems run one decision logic.
//!
//! `--leases`: N leases granted, each kept alive once, then revoked, 16 at a time;
//! with `--etcd`, etcd's leases (keep-alives over a stream opened per lease beforehand,
//! as etcd's clients keep them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use megastore_config::ClusterConfig;
use megastore_recipes::{
    Assert, Backend, BackendError, Board, Entry, GroupBackend, Mutation, NewTask,
};
use serde::Serialize;

use crate::SpecError;
use crate::timing::{QueryKind, connect_at, histogram, kind, record, run_id};

/// Tasks added per transaction when the board is laid out.
const ADD_CHUNK: usize = 100;
/// Leases granted, kept alive or revoked at once.
const LEASE_CONCURRENCY: usize = 16;
/// How long a benchmark's claim or lease lives: longer than the run.
const BENCH_TTL: Duration = Duration::from_secs(600);

/// What `--board` or `--leases` measured.
#[derive(Debug, Clone, Serialize)]
pub struct CoordinationReport {
    /// `megastore` or `etcd`.
    pub system: String,
    /// `board` or `leases`.
    pub workload: String,
    /// Tasks (board) or leases.
    pub items: u32,
    /// Concurrent workers.
    pub workers: u32,
    /// Items done per second (board: claim + complete; leases: keep-alives).
    pub per_second: f64,
    /// Latency of each step.
    pub kinds: Vec<QueryKind>,
}

impl CoordinationReport {
    /// The report as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("the report always serializes")
    }
}

/// The versioned primitives on etcd, under a key prefix: a snapshot is one read-only
/// transaction (one revision); a key's version is its `mod_revision` (0: absent),
/// asserted with a compare of it — never reused, like megastore's versions, though
/// it does not grow by exactly one.
pub struct EtcdBackend {
    client: etcd_client::Client,
    prefix: String,
}

impl EtcdBackend {
    /// The backend on keys under `prefix` of the etcd cluster `client` talks to.
    pub fn new(client: etcd_client::Client, prefix: String) -> Self {
        Self { client, prefix }
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

fn etcd_error(e: etcd_client::Error) -> BackendError {
    BackendError(format!("etcd: {e}"))
}

impl Backend for EtcdBackend {
    async fn snapshot(&self, keys: &[String]) -> Result<BTreeMap<String, Entry>, BackendError> {
        let reads: Vec<TxnOp> = keys
            .iter()
            .map(|k| TxnOp::get(self.full(k), None))
            .collect();
        let answer = self
            .client
            .kv_client()
            .txn(Txn::new().and_then(reads))
            .await
            .map_err(etcd_error)?;
        let mut entries = BTreeMap::new();
        for (key, response) in keys.iter().zip(answer.op_responses()) {
            let TxnOpResponse::Get(get) = response else {
                return Err(BackendError(
                    "etcd answered a read with something else".into(),
                ));
            };
            let entry = match get.kvs().first() {
                Some(kv) => Entry {
                    version: u64::try_from(kv.mod_revision()).unwrap_or(0),
                    value: Some(kv.value().to_vec()),
                },
                None => Entry {
                    version: 0,
                    value: None,
                },
            };
            entries.insert(key.clone(), entry);
        }
        Ok(entries)
    }

    async fn txn(&self, asserts: &[Assert], mutations: &[Mutation]) -> Result<bool, BackendError> {
        let compares: Vec<Compare> = asserts
            .iter()
            .map(|a| match a.version {
                0 => Compare::version(self.full(&a.key), CompareOp::Equal, 0),
                v => Compare::mod_revision(
                    self.full(&a.key),
                    CompareOp::Equal,
                    i64::try_from(v).unwrap_or(i64::MAX),
                ),
            })
            .collect();
        let writes: Vec<TxnOp> = mutations
            .iter()
            .map(|m| match m {
                Mutation::Put(key, value) => TxnOp::put(self.full(key), value.clone(), None),
                Mutation::Delete(key) => TxnOp::delete(self.full(key), None),
            })
            .collect();
        let answer = self
            .client
            .kv_client()
            .txn(Txn::new().when(compares).and_then(writes))
            .await
            .map_err(etcd_error)?;
        Ok(answer.succeeded())
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>, BackendError> {
        let answer = self
            .client
            .kv_client()
            .get(
                self.full(prefix),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(etcd_error)?;
        Ok(answer
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = std::str::from_utf8(kv.key()).ok()?;
                Some(key.strip_prefix(&self.prefix)?.to_string())
            })
            .collect())
    }
}

fn check(items: u32, workers: u32) -> Result<(), SpecError> {
    if items == 0 || workers == 0 {
        return Err(SpecError::Invalid(
            "--runs (items) and --clients (workers) must be at least 1".into(),
        ));
    }
    Ok(())
}

/// W workers claim and complete every one of T tasks on `backend`'s board.
async fn board_on<B: Backend + 'static>(
    system: &str,
    backend: Arc<B>,
    tasks: u32,
    workers: u32,
) -> Result<CoordinationReport, SpecError> {
    check(tasks, workers)?;
    let board = Board::new(backend);
    let all: Vec<NewTask> = (0..tasks)
        .map(|i| NewTask {
            id: format!("t{i:07}"),
            deps: Vec::new(),
            payload: Vec::new(),
        })
        .collect();
    for chunk in all.chunks(ADD_CHUNK) {
        board
            .add(chunk)
            .await
            .map_err(|e| SpecError::Invalid(format!("laying out the board: {e}")))?;
    }
    let next = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    let runs: Vec<_> = (0..workers)
        .map(|w| {
            let (board, next) = (board.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                let (mut claims, mut completes) = (histogram(), histogram());
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= tasks {
                        return Ok((claims, completes));
                    }
                    let id = format!("t{i:07}");
                    let began = Instant::now();
                    let claim = board.claim(&id, &format!("worker-{w}"), BENCH_TTL).await?;
                    let claimed = Instant::now();
                    board.complete(&id, &claim.token).await?;
                    record(&mut claims, claimed - began);
                    record(&mut completes, claimed.elapsed());
                }
            })
        })
        .collect();
    let (mut claims, mut completes) = (histogram(), histogram());
    for run in futures::future::join_all(runs).await {
        let (c, d) = run
            .map_err(|e| SpecError::Invalid(format!("a worker panicked: {e}")))?
            .map_err(|e: megastore_recipes::RecipeError| {
                SpecError::Invalid(format!("a worker failed: {e}"))
            })?;
        claims.add(c).expect("same bounds");
        completes.add(d).expect("same bounds");
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(CoordinationReport {
        system: system.to_string(),
        workload: "board".into(),
        items: tasks,
        workers,
        per_second: f64::from(tasks) / seconds,
        kinds: vec![kind("claim", 1, &claims), kind("complete", 1, &completes)],
    })
}

/// `--board` on the cluster of `config`: one client at `site` shared by the workers
/// (their commits to the board's group are combined), the board in a fresh group.
pub async fn run_board(
    config: &ClusterConfig,
    site: &str,
    tasks: u32,
    workers: u32,
) -> Result<CoordinationReport, SpecError> {
    let client = connect_at(config, site).await?;
    let eg = megastore_client::group(format!("bench-board-{:x}", run_id()).as_bytes())
        .map_err(|e| SpecError::Invalid(e.to_string()))?;
    board_on(
        "megastore",
        Arc::new(GroupBackend::new(client, eg)),
        tasks,
        workers,
    )
    .await
}

async fn etcd_client(endpoints: &[String]) -> Result<etcd_client::Client, SpecError> {
    etcd_client::Client::connect(endpoints, None)
        .await
        .map_err(|e| SpecError::Invalid(format!("connecting to etcd at {endpoints:?}: {e}")))
}

/// `--board --etcd`: the same board, on etcd, under a fresh prefix.
pub async fn run_etcd_board(
    endpoints: &[String],
    tasks: u32,
    workers: u32,
) -> Result<CoordinationReport, SpecError> {
    let client = etcd_client(endpoints).await?;
    let prefix = format!("bench-board-{:x}/", run_id());
    board_on(
        "etcd",
        Arc::new(EtcdBackend::new(client, prefix)),
        tasks,
        workers,
    )
    .await
}

/// Runs `step` on every item, [`LEASE_CONCURRENCY`] at a time; its latencies.
async fn timed_all<T, F, Fut>(
    items: Vec<T>,
    step: F,
) -> Result<hdrhistogram::Histogram<u64>, SpecError>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), SpecError>> + Send,
{
    let queue = Arc::new(std::sync::Mutex::new(items));
    let runs: Vec<_> = (0..LEASE_CONCURRENCY)
        .map(|_| {
            let (queue, step) = (Arc::clone(&queue), step.clone());
            tokio::spawn(async move {
                let mut latencies = histogram();
                loop {
                    let Some(item) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
                        return Ok::<_, SpecError>(latencies);
                    };
                    let began = Instant::now();
                    step(item).await?;
                    record(&mut latencies, began.elapsed());
                }
            })
        })
        .collect();
    let mut all = histogram();
    for run in futures::future::join_all(runs).await {
        let h = run.map_err(|e| SpecError::Invalid(format!("a task panicked: {e}")))??;
        all.add(h).expect("same bounds");
    }
    Ok(all)
}

fn leases_report(
    system: &str,
    leases: u32,
    grants: &hdrhistogram::Histogram<u64>,
    keep_alives: &hdrhistogram::Histogram<u64>,
    keep_alive_seconds: f64,
    revokes: &hdrhistogram::Histogram<u64>,
) -> CoordinationReport {
    CoordinationReport {
        system: system.to_string(),
        workload: "leases".into(),
        items: leases,
        workers: LEASE_CONCURRENCY as u32,
        per_second: f64::from(leases) / keep_alive_seconds,
        kinds: vec![
            kind("grant", 1, grants),
            kind("keep_alive", 1, keep_alives),
            kind("revoke", 1, revokes),
        ],
    }
}

/// `--leases` on the cluster of `config`, from `site`.
pub async fn run_leases(
    config: &ClusterConfig,
    site: &str,
    leases: u32,
) -> Result<CoordinationReport, SpecError> {
    check(leases, 1)?;
    let client = connect_at(config, site).await?;
    let granted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let grants = {
        let (client, granted) = (client.clone(), Arc::clone(&granted));
        timed_all((0..leases).collect(), move |i| {
            let (client, granted) = (client.clone(), Arc::clone(&granted));
            async move {
                let lease = client
                    .grant_lease(&format!("bench-{i}"), BENCH_TTL)
                    .await
                    .map_err(|e| SpecError::Invalid(format!("granting a lease: {e}")))?;
                granted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(lease);
                Ok(())
            }
        })
        .await?
    };
    let leases_held: Vec<_> = granted.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let started = Instant::now();
    let keep_alives = {
        let client = client.clone();
        timed_all(leases_held.clone(), move |mut lease| {
            let client = client.clone();
            async move {
                client
                    .keep_alive(&mut lease)
                    .await
                    .map_err(|e| SpecError::Invalid(format!("keeping a lease alive: {e}")))
            }
        })
        .await?
    };
    let keep_alive_seconds = started.elapsed().as_secs_f64();
    let revokes = timed_all(leases_held, move |lease| {
        let client = client.clone();
        async move {
            client
                .revoke_lease(lease.id)
                .await
                .map_err(|e| SpecError::Invalid(format!("revoking a lease: {e}")))
        }
    })
    .await?;
    Ok(leases_report(
        "megastore",
        leases,
        &grants,
        &keep_alives,
        keep_alive_seconds,
        &revokes,
    ))
}

/// `--leases --etcd`: etcd's leases, each kept alive once over its own stream.
pub async fn run_etcd_leases(
    endpoints: &[String],
    leases: u32,
) -> Result<CoordinationReport, SpecError> {
    check(leases, 1)?;
    let client = etcd_client(endpoints).await?;
    let failed = |what: &'static str| {
        move |e: etcd_client::Error| SpecError::Invalid(format!("{what}: {e}"))
    };
    let granted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let ttl = i64::try_from(BENCH_TTL.as_secs()).unwrap_or(i64::MAX);
    let grants = {
        let (client, granted) = (client.clone(), Arc::clone(&granted));
        timed_all((0..leases).collect(), move |_| {
            let (mut client, granted) = (client.clone(), Arc::clone(&granted));
            async move {
                let lease = client
                    .lease_grant(ttl, None)
                    .await
                    .map_err(failed("granting a lease"))?;
                granted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(lease.id());
                Ok(())
            }
        })
        .await?
    };
    let ids: Vec<i64> = granted.lock().unwrap_or_else(|p| p.into_inner()).clone();
    // Streams are opened before the clock starts: an etcd client keeps one per lease.
    let mut streams = Vec::with_capacity(ids.len());
    for id in &ids {
        let mut client = client.clone();
        streams.push(
            client
                .lease_keep_alive(*id)
                .await
                .map_err(failed("opening a keep-alive stream"))?,
        );
    }
    let started = Instant::now();
    let keep_alives = timed_all(streams, move |(mut keeper, mut stream)| async move {
        keeper
            .keep_alive()
            .await
            .map_err(failed("keeping a lease alive"))?;
        match stream
            .message()
            .await
            .map_err(failed("keeping a lease alive"))?
        {
            Some(answer) if answer.ttl() > 0 => Ok(()),
            _ => Err(SpecError::Invalid("etcd did not renew a lease".into())),
        }
    })
    .await?;
    let keep_alive_seconds = started.elapsed().as_secs_f64();
    let revokes = timed_all(ids, move |id| {
        let mut client = client.clone();
        async move {
            client
                .lease_revoke(id)
                .await
                .map_err(failed("revoking a lease"))?;
            Ok(())
        }
    })
    .await?;
    Ok(leases_report(
        "etcd",
        leases,
        &grants,
        &keep_alives,
        keep_alive_seconds,
        &revokes,
    ))
}
