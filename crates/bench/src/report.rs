//! Latency histograms per operation kind, and the report made of them.

use std::time::Duration;

use hdrhistogram::Histogram;
use megastore_paxos::ReadMode;
use serde::Serialize;

use crate::Spec;

/// Error messages kept per kind (the count goes on).
const ERRORS_KEPT: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

fn histogram() -> Histogram<u64> {
    // Microseconds, from 1 µs to an hour, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// When a closed-loop run measures: after its warm-up (operations that begin earlier
/// are neither timed nor counted), until its deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) from: std::time::Instant,
    pub(crate) until: std::time::Instant,
}

impl Window {
    /// The window of `spec`, from now.
    pub(crate) fn of(spec: &Spec) -> Self {
        let from = std::time::Instant::now() + spec.warmup;
        Self {
            from,
            until: from + spec.duration,
        }
    }

    /// Whether an operation beginning now is measured.
    pub(crate) fn measuring(&self) -> bool {
        std::time::Instant::now() >= self.from
    }

    /// The process's CPU seconds when the warm-up ends (waits for it).
    pub(crate) async fn cpu_at_start(&self) -> f64 {
        tokio::time::sleep_until(self.from.into()).await;
        process_cpu_seconds()
    }
}

/// CPU seconds (user and system) this process has spent so far, from
/// `/proc/self/stat` (in clock ticks, 100 a second on Linux); 0 where there is none.
pub(crate) fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The command name (field 2) may hold spaces: count fields after its ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; what follows ')' starts at
    // field 3.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// One client's (or all clients') measurements.
pub(crate) struct Recorder {
    reads: Histogram<u64>,
    writes: Histogram<u64>,
    read_errors: u64,
    write_errors: u64,
    conflicts: u64,
    messages: Vec<String>,
    /// The interval width of the timeline, if one is kept, and its intervals by number.
    timeline: Option<(Duration, std::collections::BTreeMap<u64, Interval>)>,
}

/// What completed in one interval of a run's timeline (latencies in microseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Interval {
    /// Where it starts, in milliseconds from the end of the warm-up.
    pub at_ms: u64,
    /// Reads completed in it.
    pub reads: u64,
    /// Writes completed in it.
    pub writes: u64,
    /// Operations that failed or gave up on conflicts in it.
    pub failed: u64,
    /// The slowest write completed in it.
    pub write_max_us: u64,
    /// The slowest read completed in it.
    pub read_max_us: u64,
}

impl Interval {
    fn merge(&mut self, other: &Interval) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.failed += other.failed;
        self.write_max_us = self.write_max_us.max(other.write_max_us);
        self.read_max_us = self.read_max_us.max(other.read_max_us);
    }
}

/// One operation's outcome, recorded only if the run's [`Window`] measures it.
pub(crate) enum Done {
    Timed(Kind, Duration),
    Failed(Kind, String),
    Conflict,
}

impl Recorder {
    /// Records an operation that completed `since_start` after the warm-up.
    pub(crate) fn add(&mut self, done: Done, since_start: Duration) {
        if let Some((width, intervals)) = &mut self.timeline {
            let number =
                u64::try_from(since_start.as_nanos() / width.as_nanos().max(1)).unwrap_or(u64::MAX);
            let interval = intervals.entry(number).or_default();
            match &done {
                Done::Timed(Kind::Read, latency) => {
                    interval.reads += 1;
                    interval.read_max_us = interval.read_max_us.max(micros(*latency));
                }
                Done::Timed(Kind::Write, latency) => {
                    interval.writes += 1;
                    interval.write_max_us = interval.write_max_us.max(micros(*latency));
                }
                Done::Failed(..) | Done::Conflict => interval.failed += 1,
            }
        }
        match done {
            Done::Timed(kind, latency) => self.record(kind, latency),
            Done::Failed(kind, message) => self.error(kind, message),
            Done::Conflict => self.conflict(),
        }
    }

    pub(crate) fn new() -> Self {
        Self {
            reads: histogram(),
            writes: histogram(),
            read_errors: 0,
            write_errors: 0,
            conflicts: 0,
            messages: Vec::new(),
            timeline: None,
        }
    }

    /// A recorder that also keeps a timeline of intervals `width` wide, if given.
    pub(crate) fn with_timeline(width: Option<Duration>) -> Self {
        Self {
            timeline: width.map(|w| (w, std::collections::BTreeMap::new())),
            ..Self::new()
        }
    }

    pub(crate) fn record(&mut self, kind: Kind, latency: Duration) {
        let histogram = match kind {
            Kind::Read => &mut self.reads,
            Kind::Write => &mut self.writes,
        };
        histogram.saturating_record(micros(latency));
    }

    pub(crate) fn error(&mut self, kind: Kind, message: String) {
        match kind {
            Kind::Read => self.read_errors += 1,
            Kind::Write => self.write_errors += 1,
        }
        if self.messages.len() < ERRORS_KEPT {
            self.messages.push(message);
        }
    }

    pub(crate) fn conflict(&mut self) {
        self.conflicts += 1;
    }

    pub(crate) fn merge(&mut self, other: Recorder) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.reads.add(&other.reads);
        let _ = self.writes.add(&other.writes);
        self.read_errors += other.read_errors;
        self.write_errors += other.write_errors;
        self.conflicts += other.conflicts;
        for m in other.messages {
            if self.messages.len() < ERRORS_KEPT {
                self.messages.push(m);
            }
        }
        if let (Some((_, mine)), Some((_, theirs))) = (&mut self.timeline, other.timeline) {
            for (number, interval) in theirs {
                mine.entry(number).or_default().merge(&interval);
            }
        }
    }

    pub(crate) fn report(self, spec: &Spec, sites: &[String], elapsed: Duration) -> Report {
        let kind = |name: &str, h: &Histogram<u64>, errors: u64| KindReport {
            kind: name.to_string(),
            count: h.len(),
            errors,
            per_second: h.len() as f64 / elapsed.as_secs_f64().max(1e-9),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
            curve: h
                .iter_quantiles(4)
                .map(|v| (v.quantile_iterated_to(), v.value_iterated_to()))
                .collect(),
        };
        Report {
            system: "megastore".into(),
            client_cpu_s: 0.0,
            groups: spec.groups,
            clients: spec.clients,
            read_fraction: spec.read_fraction,
            read_mode: match spec.read_mode {
                ReadMode::Current => "current",
                ReadMode::Snapshot => "snapshot",
                ReadMode::Inconsistent => "inconsistent",
                ReadMode::AtPosition(_) => "at-position",
            }
            .to_string(),
            value_size: spec.value_size,
            sites: sites.to_vec(),
            rotate_sites: spec.rotate_sites,
            connections: spec.connections,
            elapsed_s: elapsed.as_secs_f64(),
            kinds: vec![
                kind("read", &self.reads, self.read_errors),
                kind("write", &self.writes, self.write_errors),
            ],
            conflicts: self.conflicts,
            error_messages: self.messages,
            timeline: self.timeline.map(|(width, intervals)| Timeline {
                from_unix_ms: unix_ms(std::time::SystemTime::now())
                    .saturating_sub(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)),
                width_ms: u64::try_from(width.as_millis()).unwrap_or(u64::MAX),
                intervals: timeline(width, elapsed, intervals),
            }),
        }
    }
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
fn unix_ms(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A latency in whole microseconds, at least 1 (the histograms' lowest value).
fn micros(latency: Duration) -> u64 {
    u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Every interval of a run `elapsed` long, empty ones included (a stall is an empty
/// interval), stamped with where it starts.
fn timeline(
    width: Duration,
    elapsed: Duration,
    mut intervals: std::collections::BTreeMap<u64, Interval>,
) -> Vec<Interval> {
    let width_ns = width.as_nanos().max(1);
    let last_measured = intervals.keys().next_back().copied().unwrap_or(0);
    let spanned = u64::try_from(elapsed.as_nanos().div_ceil(width_ns)).unwrap_or(u64::MAX);
    (0..spanned.max(last_measured + 1))
        .map(|number| Interval {
            at_ms: u64::try_from(u128::from(number) * width_ns / 1_000_000).unwrap_or(u64::MAX),
            ..intervals.remove(&number).unwrap_or_default()
        })
        .collect()
}

/// One operation kind's results (latencies in microseconds).
#[derive(Debug, Clone, Serialize)]
pub struct KindReport {
    /// "read" or "write".
    pub kind: String,
    /// Completed operations.
    pub count: u64,
    /// Failed operations.
    pub errors: u64,
    /// Completed operations per second.
    pub per_second: f64,
    /// Median latency.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Slowest.
    pub max_us: u64,
    /// Mean.
    pub mean_us: f64,
    /// The latency distribution: (quantile, latency µs) points from the median-less
    /// start to the slowest, finer towards the tail (for a percentile plot; not in the
    /// JSON line).
    #[serde(skip)]
    pub curve: Vec<(f64, u64)>,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What was measured: `megastore`, or `etcd` (`--etcd`).
    pub system: String,
    /// CPU seconds the benchmark's own process (its clients) spent, connecting
    /// included: with the servers' CPU, what the work cost.
    pub client_cpu_s: f64,
    /// Entity groups used.
    pub groups: u32,
    /// Concurrent clients.
    pub clients: u32,
    /// Share of reads asked for.
    pub read_fraction: f64,
    /// How reads were served.
    pub read_mode: String,
    /// Bytes per written value.
    pub value_size: usize,
    /// The sites clients acted from.
    pub sites: Vec<String>,
    /// Whether each client rotated through the sites per group (writes never from the
    /// leader's site).
    pub rotate_sites: bool,
    /// Client connections per site the clients shared (`None`: one each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
    /// How long the run took.
    pub elapsed_s: f64,
    /// Per operation kind.
    pub kinds: Vec<KindReport>,
    /// Writes that gave up after their attempts all conflicted.
    pub conflicts: u64,
    /// The first few error messages.
    pub error_messages: Vec<String>,
    /// What completed in each interval of [`Spec::timeline`]'s width, from the end of
    /// the warm-up (`None`: not asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

/// A run's operations over time.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    /// When the first interval starts (the end of the warm-up), in milliseconds since
    /// the Unix epoch: to line the run up with what else happened (a move's steps).
    pub from_unix_ms: u64,
    /// Each interval's width.
    pub width_ms: u64,
    /// Every interval of the run, empty ones included.
    pub intervals: Vec<Interval>,
}

impl Report {
    /// Completed operations of every kind.
    pub fn operations(&self) -> u64 {
        self.kinds.iter().map(|k| k.count).sum()
    }

    /// The report as one JSON line, for scripts.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_recorded_latencies() {
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        for ms in 1..=100u64 {
            let r = if ms % 2 == 0 { &mut a } else { &mut b };
            r.record(Kind::Write, Duration::from_millis(ms));
        }
        a.record(Kind::Read, Duration::from_micros(250));
        b.error(Kind::Read, "boom".into());
        b.conflict();
        a.merge(b);
        let report = a.report(&Spec::default(), &["A".to_string()], Duration::from_secs(2));
        let write = &report.kinds[1];
        assert_eq!(write.count, 100);
        assert!((write.per_second - 50.0).abs() < 1e-9);
        // Three significant digits: within 0.1% of the true value.
        assert!(
            (49_950..=50_050).contains(&write.p50_us),
            "{}",
            write.p50_us
        );
        assert!(
            (98_900..=99_100).contains(&write.p99_us),
            "{}",
            write.p99_us
        );
        assert!(
            (99_900..=100_100).contains(&write.max_us),
            "{}",
            write.max_us
        );
        let read = &report.kinds[0];
        assert_eq!((read.count, read.errors), (1, 1));
        assert_eq!(report.conflicts, 1);
        assert_eq!(report.error_messages, vec!["boom".to_string()]);
        let json: serde_json::Value = serde_json::from_str(&report.json_line()).unwrap();
        assert_eq!(json["kinds"][1]["count"], 100);
        assert!(json.get("timeline").is_none(), "no timeline unless asked");
    }

    #[test]
    fn the_timeline_counts_each_interval_and_keeps_the_empty_ones() {
        let width = Some(Duration::from_millis(100));
        let (mut a, mut b) = (
            Recorder::with_timeline(width),
            Recorder::with_timeline(width),
        );
        let ms = Duration::from_millis;
        a.add(Done::Timed(Kind::Write, ms(3)), ms(10));
        b.add(Done::Timed(Kind::Write, ms(7)), ms(99));
        b.add(Done::Timed(Kind::Read, ms(1)), ms(120));
        // Nothing completes from 200 to 400 ms: a stall, then one slow write.
        a.add(Done::Timed(Kind::Write, ms(280)), ms(430));
        a.add(Done::Conflict, ms(450));
        b.add(Done::Failed(Kind::Read, "gone".into()), ms(455));
        a.merge(b);
        let report = a.report(&Spec::default(), &["A".to_string()], ms(500));
        let timeline = report.timeline.as_ref().expect("a timeline was asked for");
        assert_eq!(timeline.width_ms, 100);
        let counts: Vec<(u64, u64, u64, u64, u64)> = timeline
            .intervals
            .iter()
            .map(|i| (i.at_ms, i.reads, i.writes, i.failed, i.write_max_us))
            .collect();
        assert_eq!(
            counts,
            vec![
                (0, 0, 2, 0, 7_000),
                (100, 1, 0, 0, 0),
                (200, 0, 0, 0, 0),
                (300, 0, 0, 0, 0),
                (400, 0, 1, 2, 280_000),
            ]
        );
        // The totals are the histograms' too.
        assert_eq!(
            (
                report.kinds[1].count,
                report.conflicts,
                report.kinds[0].errors
            ),
            (3, 1, 1)
        );
        let json: serde_json::Value = serde_json::from_str(&report.json_line()).unwrap();
        assert_eq!(json["timeline"]["intervals"][4]["write_max_us"], 280_000);
    }
}
