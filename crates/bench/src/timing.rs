//! What the one-at-a-time benchmarks (`--queries`, `--queues`, `--two-phase`) share:
//! a latency histogram per measure, and its summary.

use std::time::Duration;

use hdrhistogram::Histogram;
use megastore_client::{Client, ClientError};
use megastore_config::ClusterConfig;
use serde::Serialize;

use crate::SpecError;

/// One measure's summary: runs timed and hdrhistogram percentiles, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct QueryKind {
    /// What was timed.
    pub kind: String,
    /// Entities each run found.
    pub hits: usize,
    /// Runs timed.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Slowest.
    pub max_us: u64,
}

/// A client error, as the benchmark's, saying what it was doing.
pub(crate) fn failed(what: &str) -> impl Fn(ClientError) -> SpecError + '_ {
    move |e| SpecError::Invalid(format!("{what}: {e}"))
}

/// An empty latency histogram (1 µs to an hour, 3 significant figures).
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Records one latency.
pub(crate) fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    histogram.saturating_record(micros.max(1));
}

/// The summary of measure `name`, each run having found `hits` entities.
pub(crate) fn kind(name: &str, hits: usize, histogram: &Histogram<u64>) -> QueryKind {
    QueryKind {
        kind: name.to_string(),
        hits,
        count: histogram.len(),
        p50_us: histogram.value_at_quantile(0.5),
        p99_us: histogram.value_at_quantile(0.99),
        max_us: histogram.max(),
    }
}

/// A client of `config`'s cluster at `site`, or the error naming the site.
pub(crate) async fn connect_at(config: &ClusterConfig, site: &str) -> Result<Client, SpecError> {
    Client::connect(config, site)
        .await
        .map_err(|error| SpecError::Connect {
            site: site.to_string(),
            error,
        })
}

/// A number no earlier run used (the time and the process id), to name a run's fresh
/// groups or keys so that no earlier run's data is in the way.
pub(crate) fn run_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
        ^ u128::from(std::process::id())
}
