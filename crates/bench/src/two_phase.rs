//! `megastore bench --two-phase`: what a transaction across two groups costs next to
//! the same transaction in one group. One client at one site runs, one at a time and
//! interleaved, a read-modify-write of two keys in one group and a read-modify-write of
//! one key in each of two groups (two-phase commit); both are timed from the first
//! read to the commit's return.

use std::time::Instant;

use megastore_client::{Client, ClientError, Outcome, Transaction};
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
    /// The single-group transaction, then the cross-group one.
    pub kinds: Vec<QueryKind>,
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

/// Runs each transaction `runs` times from `site`, interleaved.
pub async fn run_two_phase(
    config: &ClusterConfig,
    site: &str,
    runs: u32,
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
    Ok(TwoPhaseReport {
        site: site.to_string(),
        kinds: vec![
            kind("one group, two keys (one commit)", 1, &one_group),
            kind("two groups, a key each (two-phase commit)", 1, &two_groups),
        ],
    })
}
