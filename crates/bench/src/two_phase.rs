//! `megastore bench --two-phase`: what a transaction across two groups costs next to
//! the same transaction in one group. One client at one site runs, one at a time and
//! interleaved, a read-modify-write of two keys in one group and a read-modify-write of
//! one key in each of two groups (two-phase commit); both are timed from the first
//! read to the commit's return.
//!
//! With hot writers, that many more clients at the same site write blindly, in closed
//! loops, to the cross-group transaction's coordinator group for as long as the runs
//! last: its prepare and decision then race their commits for the group's positions
//! (docs/performance.md, "Transactions across groups").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use megastore_client::{Attempt, Client, ClientError, Outcome, Transaction};
use megastore_config::ClusterConfig;
use megastore_types::EgId;
use serde::Serialize;

use crate::SpecError;
use crate::timing::{QueryKind, failed, histogram, kind, record};

/// What `--two-phase` measured.
#[derive(Debug, Clone, Serialize)]
pub struct TwoPhaseReport {
    /// Where the client acted from.
    pub site: String,
    /// The single-group transaction, then the cross-group one, then (with hot writers)
    /// the hot writers' blind writes.
    pub kinds: Vec<QueryKind>,
    /// Clients writing the coordinator group meanwhile.
    pub hot_writers: u32,
    /// Their commits per second, over the time the runs took.
    pub hot_writes_per_s: f64,
    /// Their writes that gave up after [`HOT_WRITE_ATTEMPTS`] attempts.
    pub hot_give_ups: u64,
}

/// Attempts of one hot writer's blind write before it gives up (as `megastore bench`'s
/// closed loop).
pub const HOT_WRITE_ATTEMPTS: u32 = 8;

/// What one hot writer did until it was told to stop.
struct HotWrites {
    latencies: Histogram<u64>,
    give_ups: u64,
}

/// Tells the hot writers to stop when dropped: after the runs, or when one fails.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A closed loop of blind writes of `key` in `eg` until `stop`.
async fn write_hot(
    client: Client,
    eg: EgId,
    key: Vec<u8>,
    stop: Arc<AtomicBool>,
) -> Result<HotWrites, ClientError> {
    let mut done = HotWrites {
        latencies: histogram(),
        give_ups: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        let mut committed = false;
        for _ in 0..HOT_WRITE_ATTEMPTS {
            let mut txn = client.begin(&eg);
            txn.set(&key, b"v", b"hot")?;
            if let Attempt::Done(_) = txn.commit().await? {
                committed = true;
                break;
            }
        }
        if committed {
            record(&mut done.latencies, began.elapsed());
        } else {
            done.give_ups += 1;
        }
    }
    Ok(done)
}

impl TwoPhaseReport {
    /// The report as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("the report always serializes")
    }
}

/// Adds one to counter `key` of the transaction's group.
async fn bump(txn: &mut Transaction, key: &[u8]) -> Result<(), ClientError> {
    let n: u64 = txn
        .get(key)
        .await?
        .and_then(|r| {
            r.value(b"n")
                .map(|v| String::from_utf8_lossy(v).parse().unwrap_or(0))
        })
        .unwrap_or(0);
    txn.set(key, b"n", (n + 1).to_string().as_bytes())
}

fn committed(outcome: &Outcome, what: &str) -> Result<(), SpecError> {
    match outcome {
        Outcome::Committed { .. } => Ok(()),
        Outcome::ReadOnly => Err(SpecError::Invalid(format!("{what} wrote nothing"))),
    }
}

/// Runs each transaction `runs` times from `site`, interleaved, while `hot_writers`
/// more clients there write the cross-group transaction's coordinator group.
pub async fn run_two_phase(
    config: &ClusterConfig,
    site: &str,
    runs: u32,
    hot_writers: u32,
) -> Result<TwoPhaseReport, SpecError> {
    if runs == 0 {
        return Err(SpecError::Invalid("--runs must be at least 1".into()));
    }
    let client = Client::connect(config, site)
        .await
        .map_err(|error| SpecError::Connect {
            site: site.to_string(),
            error,
        })?;
    // Fresh groups per run of the benchmark.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
        ^ u128::from(std::process::id());
    let group = |which: &str| -> Result<EgId, SpecError> {
        megastore_client::group(format!("bench-2pc-{which}-{run:x}").as_bytes())
            .map_err(failed("a group"))
    };
    let (single, left, right) = (group("single")?, group("left")?, group("right")?);
    let (mut one_group, mut two_groups) = (histogram(), histogram());
    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let writers_began = Instant::now();
    let mut writers = Vec::new();
    for i in 0..hot_writers {
        let writer = Client::connect(config, site)
            .await
            .map_err(|error| SpecError::Connect {
                site: site.to_string(),
                error,
            })?;
        let key = format!("hot-{i}").into_bytes();
        writers.push(tokio::spawn(write_hot(
            writer,
            left.clone(),
            key,
            stop.0.clone(),
        )));
    }
    // A first commit in each group, untimed: its first position has no leader yet.
    for eg in [&single, &left, &right] {
        client
            .transaction(eg, async |txn| bump(txn, b"warm").await)
            .await
            .map_err(failed("warming up"))?;
    }
    for _ in 0..runs {
        let began = Instant::now();
        let (_, outcome) = client
            .transaction(&single, async |txn| {
                bump(txn, b"a").await?;
                bump(txn, b"b").await
            })
            .await
            .map_err(failed("the single-group transaction"))?;
        record(&mut one_group, began.elapsed());
        committed(&outcome, "the single-group transaction")?;
        let began = Instant::now();
        let groups = [left.clone(), right.clone()];
        let (_, outcome) = client
            .transaction_multi(&groups, async |txn| {
                bump(txn.on(&left)?, b"a").await?;
                bump(txn.on(&right)?, b"b").await
            })
            .await
            .map_err(failed("the cross-group transaction"))?;
        record(&mut two_groups, began.elapsed());
        committed(&outcome, "the cross-group transaction")?;
    }
    let writers_took = writers_began.elapsed();
    drop(stop);
    let (mut hot, mut hot_give_ups) = (histogram(), 0);
    for writer in writers {
        let done = writer
            .await
            .map_err(|e| SpecError::Invalid(format!("a hot writer's task: {e}")))?
            .map_err(failed("a hot writer"))?;
        hot.add(&done.latencies)
            .map_err(|e| SpecError::Invalid(format!("merging latencies: {e}")))?;
        hot_give_ups += done.give_ups;
    }
    let mut kinds = vec![
        kind("one group, two keys (one commit)", 1, &one_group),
        kind("two groups, a key each (two-phase commit)", 1, &two_groups),
    ];
    if hot_writers > 0 {
        kinds.push(kind(
            &format!("a hot writer's blind write to the coordinator group ({hot_writers} writers)"),
            1,
            &hot,
        ));
    }
    Ok(TwoPhaseReport {
        site: site.to_string(),
        kinds,
        hot_writers,
        hot_writes_per_s: hot.len() as f64 / writers_took.as_secs_f64(),
        hot_give_ups,
    })
}
