//! `megastore bench --watches`: how long a committed change takes to reach a watcher.
//! A writer at one site puts one versioned key at a time (paced, so each change is timed
//! alone); a watcher at another site watches the group's keys. What is timed is the
//! writer's commit, and the delivery: from the commit's acknowledgement to the watcher
//! holding the change. With `--etcd`, the same against etcd: puts of one key prefix and
//! a watch of it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use megastore_client::{Mutation, TxnResult};
use megastore_config::ClusterConfig;
use megastore_types::Position;
use serde::Serialize;

use crate::SpecError;
use crate::timing::{QueryKind, connect_at, failed, histogram, kind, record, run_id};

/// Pause between two writes: changes are timed one by one, not as a backlog.
const PACE: Duration = Duration::from_millis(20);
/// How long the watcher may take for the last change.
const DRAIN: Duration = Duration::from_secs(30);

/// What `--watches` measured.
#[derive(Debug, Clone, Serialize)]
pub struct WatchReport {
    /// `megastore` or `etcd`.
    pub system: String,
    /// Where the writer acted from (megastore).
    pub writer_site: String,
    /// Where the watcher watched from (megastore).
    pub watcher_site: String,
    /// The writer's commit, and the delivery (commit acknowledged → watched).
    pub kinds: Vec<QueryKind>,
}

impl WatchReport {
    /// The report as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("the report always serializes")
    }
}

/// A name no earlier run used.
fn fresh(what: &str) -> String {
    format!("bench-watch-{what}-{:x}", run_id())
}

/// Writes `total` changes one at a time, [`PACE`] apart, with `write(n)`; when each was
/// acknowledged, and the writes' latencies.
async fn paced_writes<F, Fut>(
    total: u64,
    mut write: F,
) -> Result<(BTreeMap<u64, Instant>, hdrhistogram::Histogram<u64>), SpecError>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), SpecError>>,
{
    let mut acked = BTreeMap::new();
    let mut commits = histogram();
    for n in 0..total {
        let began = Instant::now();
        write(n).await?;
        let done = Instant::now();
        record(&mut commits, done - began);
        acked.insert(n, done);
        tokio::time::sleep(PACE).await;
    }
    Ok((acked, commits))
}

/// Records that change `n` reached the watcher `at`; a change watched twice fails the
/// run.
fn watched_once(
    watched: &mut BTreeMap<u64, Instant>,
    n: u64,
    at: Instant,
) -> Result<(), SpecError> {
    match watched.insert(n, at) {
        Some(_) => Err(SpecError::Invalid(format!("change {n} watched twice"))),
        None => Ok(()),
    }
}

/// The error of a watcher that waited [`DRAIN`] for the next change.
fn drained(seen: usize, total: u64) -> SpecError {
    SpecError::Invalid(format!("only {seen} of {total} changes arrived"))
}

/// The delivery histogram: each change's arrival at the watcher after its commit's
/// acknowledgement (a change can arrive first: the watcher may see it before the
/// writer hears back; that counts as 0).
fn delivery(
    acked: &BTreeMap<u64, Instant>,
    watched: &BTreeMap<u64, Instant>,
) -> hdrhistogram::Histogram<u64> {
    let mut h = histogram();
    for (n, at) in watched {
        if let Some(sent) = acked.get(n) {
            record(&mut h, at.saturating_duration_since(*sent));
        }
    }
    h
}

/// Writes `changes` versioned keys from `writer_site`, one at a time, while a watcher
/// at `watcher_site` watches them; times each commit and delivery.
pub async fn run_watches(
    config: &ClusterConfig,
    writer_site: &str,
    watcher_site: &str,
    changes: u32,
) -> Result<WatchReport, SpecError> {
    if changes == 0 {
        return Err(SpecError::Invalid("--runs must be at least 1".into()));
    }
    let (writer, watcher) = (
        connect_at(config, writer_site).await?,
        connect_at(config, watcher_site).await?,
    );
    let eg = megastore_client::group(fresh("group").as_bytes()).map_err(failed("the group"))?;
    let total = u64::from(changes);
    let mut watch = watcher
        .watch_keys(&eg, b"", Position(1))
        .map_err(failed("watching"))?;
    let watching = async {
        let mut watched: BTreeMap<u64, Instant> = BTreeMap::new();
        while (watched.len() as u64) < total {
            let event = tokio::time::timeout(DRAIN, watch.next())
                .await
                .map_err(|_| drained(watched.len(), total))?
                .map_err(failed("watching"))?;
            let at = Instant::now();
            for (_, entry) in event.changes {
                let n = String::from_utf8_lossy(&entry.key)
                    .parse::<u64>()
                    .map_err(|_| SpecError::Invalid("a key that is not the benchmark's".into()))?;
                watched_once(&mut watched, n, at)?;
            }
        }
        Ok::<_, SpecError>(watched)
    };
    let writing = paced_writes(total, |n| {
        let (writer, eg) = (&writer, &eg);
        async move {
            let put = Mutation::Put {
                key: n.to_string().into_bytes(),
                value: vec![b'x'; 256],
            };
            match writer
                .versioned_txn(eg, &[], &[put])
                .await
                .map_err(failed("writing"))?
            {
                TxnResult::Applied { .. } => Ok(()),
                TxnResult::AssertFailed { .. } => unreachable!("the put asserts nothing"),
            }
        }
    });
    let (written, watched) = futures::join!(writing, watching);
    let ((acked, commits), watched) = (written?, watched?);
    Ok(WatchReport {
        system: "megastore".into(),
        writer_site: writer_site.to_string(),
        watcher_site: watcher_site.to_string(),
        kinds: vec![
            kind("write (the writer's commit)", 1, &commits),
            kind(
                "delivery (commit acknowledged → watched)",
                1,
                &delivery(&acked, &watched),
            ),
        ],
    })
}

/// The same against the etcd cluster at `endpoints`: puts of `changes` keys under a
/// fresh prefix, one at a time, and a watch of the prefix on its own connection.
pub async fn run_etcd_watches(
    endpoints: &[String],
    changes: u32,
) -> Result<WatchReport, SpecError> {
    if changes == 0 {
        return Err(SpecError::Invalid("--runs must be at least 1".into()));
    }
    let connect = || async {
        etcd_client::Client::connect(endpoints, None)
            .await
            .map_err(|e| SpecError::Invalid(format!("connecting to etcd at {endpoints:?}: {e}")))
    };
    let (writer, mut watcher) = (connect().await?, connect().await?);
    let prefix = format!("{}/", fresh("prefix"));
    let mut stream = watcher
        .watch(
            prefix.clone(),
            Some(etcd_client::WatchOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| SpecError::Invalid(format!("watching etcd: {e}")))?;
    let total = u64::from(changes);
    let watching = async {
        let mut watched: BTreeMap<u64, Instant> = BTreeMap::new();
        while (watched.len() as u64) < total {
            let message = tokio::time::timeout(DRAIN, stream.message())
                .await
                .map_err(|_| drained(watched.len(), total))?
                .map_err(|e| SpecError::Invalid(format!("watching etcd: {e}")))?
                .ok_or_else(|| SpecError::Invalid("etcd ended the watch".into()))?;
            let at = Instant::now();
            for event in message.events() {
                let Some(kv) = event.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key());
                let n = key
                    .strip_prefix(prefix.as_str())
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or_else(|| SpecError::Invalid(format!("a key not of the run: {key}")))?;
                watched_once(&mut watched, n, at)?;
            }
        }
        Ok::<_, SpecError>(watched)
    };
    let writing = paced_writes(total, |n| {
        let (mut writer, key) = (writer.clone(), format!("{prefix}{n}"));
        async move {
            writer
                .put(key, vec![b'x'; 256], None)
                .await
                .map(|_| ())
                .map_err(|e| SpecError::Invalid(format!("writing to etcd: {e}")))
        }
    });
    let (written, watched) = futures::join!(writing, watching);
    let ((acked, commits), watched) = (written?, watched?);
    Ok(WatchReport {
        system: "etcd".into(),
        writer_site: String::new(),
        watcher_site: String::new(),
        kinds: vec![
            kind("write (the writer's put)", 1, &commits),
            kind(
                "delivery (put acknowledged → watched)",
                1,
                &delivery(&acked, &watched),
            ),
        ],
    })
}
