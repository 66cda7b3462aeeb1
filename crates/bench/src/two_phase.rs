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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use megastore_client::{Attempt, Client, ClientError, Outcome, Transaction};
use megastore_config::ClusterConfig;
use megastore_types::EgId;
use serde::Serialize;

use crate::SpecError;
use crate::timing::{QueryKind, connect_at, failed, histogram, kind, record, run_id};

/// What `--two-phase` measured.
#[derive(Debug, Clone, Serialize)]
pub struct TwoPhaseReport {
    /// Where the client acted from.
    pub site: String,
    /// The single-group transaction, then the cross-group one, then (with hot writers)
    /// the hot writers' blind writes.
    pub kinds: Vec<QueryKind>,
    /// Cross-group transactions that gave up after the client's attempts, each of them
    /// conflicting (not timed).
    pub two_phase_give_ups: u64,
    /// Attempts of the cross-group transactions beyond each one's first: each after
    /// an abort — a conflict (the hot writers write other rows, so a lost position's),
    /// or an outcome unknown at first and then resolved as aborted.
    pub two_phase_retries: u64,
    /// Clients writing the coordinator group meanwhile.
    pub hot_writers: u32,
    /// Their commits per second while the runs lasted (after each had committed once).
    pub hot_writes_per_s: f64,
    /// Their writes that gave up after [`HOT_WRITE_ATTEMPTS`] attempts while the runs
    /// lasted.
    pub hot_give_ups: u64,
    /// Their writes that failed with an error while the runs lasted (each writer goes
    /// on after a pause); the first error's message is in `hot_error`.
    pub hot_errors: u64,
    /// The first error a hot writer met, if any (warming up included).
    pub hot_error: Option<String>,
    /// Hot writers that had not committed once when the runs began: they began after
    /// [`HOT_WARM_UP_MAX`] without them.
    pub hot_writers_cold: u32,
}

/// Attempts of one hot writer's blind write before it gives up (as `megastore bench`'s
/// closed loop).
pub const HOT_WRITE_ATTEMPTS: u32 = 8;

/// How long the runs wait for every hot writer's first commit before they begin
/// without the ones still trying.
pub const HOT_WARM_UP_MAX: Duration = Duration::from_secs(30);

/// How long a hot writer pauses after an error before it writes again (so a cluster
/// that refuses everything is not asked in a tight loop).
const HOT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// What one hot writer did until it was told to stop.
struct HotWrites {
    latencies: Histogram<u64>,
    give_ups: u64,
    errors: u64,
    first_error: Option<String>,
}

/// Tells the hot writers to stop when dropped: after the runs, or when the runs end
/// early with an error.
struct StopOnDrop(Arc<HotPhase>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Relaxed);
    }
}

/// What the hot writers share with the runs: when to count, and when to stop.
struct HotPhase {
    /// Set once every writer has committed (so its first commits, which duel before
    /// relaying, stay out of the measure, as `megastore bench --warmup` leaves them).
    measuring: AtomicBool,
    stop: AtomicBool,
}

/// A closed loop of blind writes of `key` in `eg` until told to stop. `warmed` hears
/// once, of its first commit.
async fn write_hot(
    client: Client,
    eg: EgId,
    key: Vec<u8>,
    phase: Arc<HotPhase>,
    warmed: tokio::sync::mpsc::Sender<()>,
) -> HotWrites {
    let mut warmed = Some(warmed);
    let mut done = HotWrites {
        latencies: histogram(),
        give_ups: 0,
        errors: 0,
        first_error: None,
    };
    while !phase.stop.load(Ordering::Relaxed) {
        let measuring = phase.measuring.load(Ordering::Relaxed);
        let began = Instant::now();
        let committed = match write_once(&client, &eg, &key).await {
            Ok(committed) => committed,
            Err(e) => {
                done.errors += u64::from(measuring);
                done.first_error.get_or_insert_with(|| e.to_string());
                tokio::time::sleep(HOT_ERROR_PAUSE).await;
                continue;
            }
        };
        if committed && let Some(warmed) = warmed.take() {
            // The runs may have failed and gone: nobody to tell.
            let _ = warmed.send(()).await;
        }
        match (measuring, committed) {
            (false, _) => {}
            (true, true) => record(&mut done.latencies, began.elapsed()),
            (true, false) => done.give_ups += 1,
        }
    }
    done
}

/// One blind write of `key` in `eg`, in up to [`HOT_WRITE_ATTEMPTS`] attempts: whether
/// it committed.
async fn write_once(client: &Client, eg: &EgId, key: &[u8]) -> Result<bool, ClientError> {
    for _ in 0..HOT_WRITE_ATTEMPTS {
        let mut txn = client.begin(eg);
        txn.set(key, b"v", b"hot")?;
        if let Attempt::Done(_) = txn.commit().await? {
            return Ok(true);
        }
    }
    Ok(false)
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
    let client = connect_at(config, site).await?;
    // Fresh groups per run of the benchmark.
    let run = run_id();
    let group = |which: &str| -> Result<EgId, SpecError> {
        megastore_client::group(format!("bench-2pc-{which}-{run:x}").as_bytes())
            .map_err(failed("a group"))
    };
    let (single, left, right) = (group("single")?, group("left")?, group("right")?);
    let (mut one_group, mut two_groups) = (histogram(), histogram());
    let (mut two_phase_give_ups, mut two_phase_retries) = (0, 0);
    // A first commit in each group, untimed: its first position has no leader yet
    // (and the hot writers start after it, as they would at a group in use).
    for eg in [&single, &left, &right] {
        client
            .transaction(eg, async |txn| bump(txn, b"warm").await)
            .await
            .map_err(failed("warming up"))?;
    }
    let phase = StopOnDrop(Arc::new(HotPhase {
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
    }));
    let (warmed, mut warmed_writers) = tokio::sync::mpsc::channel(hot_writers.max(1) as usize);
    let mut writers = Vec::new();
    for i in 0..hot_writers {
        let writer = connect_at(config, site).await?;
        let key = format!("hot-{i}").into_bytes();
        writers.push(tokio::spawn(write_hot(
            writer,
            left.clone(),
            key,
            phase.0.clone(),
            warmed.clone(),
        )));
    }
    drop(warmed);
    // The runs start once every hot writer has committed: a writer's first commits
    // duel for positions until it relays, which is a start, not the steady state. Not
    // later than `HOT_WARM_UP_MAX`, though: the report counts the writers still cold.
    let warm_up_ends = tokio::time::Instant::now() + HOT_WARM_UP_MAX;
    let mut hot_writers_cold = hot_writers;
    while hot_writers_cold > 0 {
        match tokio::time::timeout_at(warm_up_ends, warmed_writers.recv()).await {
            Ok(Some(())) => hot_writers_cold -= 1,
            Ok(None) | Err(_) => break,
        }
    }
    phase.0.measuring.store(true, Ordering::Relaxed);
    let measure_began = Instant::now();
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
        let attempts = AtomicU64::new(0);
        let multi = client
            .transaction_multi(&groups, async |txn| {
                attempts.fetch_add(1, Ordering::Relaxed);
                bump(txn.on(&left)?, b"a").await?;
                bump(txn.on(&right)?, b"b").await
            })
            .await;
        match multi {
            Ok((_, outcome)) => {
                record(&mut two_groups, began.elapsed());
                committed(&outcome, "the cross-group transaction")?;
            }
            // Starved at a hot coordinator group: counted, as the hot writers' give-ups.
            Err(ClientError::TooManyConflicts { .. }) => two_phase_give_ups += 1,
            Err(e) => return Err(failed("the cross-group transaction")(e)),
        }
        two_phase_retries += attempts.into_inner().saturating_sub(1);
    }
    let measured_for = measure_began.elapsed();
    drop(phase);
    let (mut hot, mut hot_give_ups, mut hot_errors, mut hot_error) = (histogram(), 0, 0, None);
    for writer in writers {
        let done = writer
            .await
            .map_err(|e| SpecError::Invalid(format!("a hot writer's task: {e}")))?;
        hot.add(&done.latencies)
            .map_err(|e| SpecError::Invalid(format!("merging latencies: {e}")))?;
        hot_give_ups += done.give_ups;
        hot_errors += done.errors;
        hot_error = hot_error.or(done.first_error);
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
        two_phase_give_ups,
        two_phase_retries,
        hot_writers,
        hot_writes_per_s: hot.len() as f64 / measured_for.as_secs_f64(),
        hot_give_ups,
        hot_errors,
        hot_error,
        hot_writers_cold,
    })
}
