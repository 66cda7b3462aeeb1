//! How much each range a replica server holds is written (issue 17, rebalancing): the
//! log entries it applied per range since it started, and per second over the last
//! [`RATE_WINDOW`]. Every replica of a range applies every entry chosen there, so any
//! one replica's count is the range's commit count (one that was down or behind
//! counts less until it catches up).
//!
//! Entries are counted under the range that holds their group in the placement the
//! server judges by when it applies them: after a split the left half, which keeps the
//! id, keeps the counts from before.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use megastore_client::status::RangeApplied;
use megastore_placement::{Placement, RangeId, ServerId};
use megastore_types::ReplicaId;

/// The window the rate is measured over.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(10);
const WINDOW_SECONDS: usize = RATE_WINDOW.as_secs() as usize;

/// Per range: a total and one bucket per second of the window.
#[derive(Debug, Default, Clone)]
struct Counts {
    total: u64,
    /// `(second since start, entries applied in it)`, by `second % WINDOW_SECONDS`.
    seconds: [(u64, u64); WINDOW_SECONDS],
}

/// The counts of every range a server applied entries in.
#[derive(Debug)]
pub(crate) struct RangeActivity {
    started: Instant,
    ranges: BTreeMap<RangeId, Counts>,
}

impl RangeActivity {
    /// No entries yet, counting from `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            started: now,
            ranges: BTreeMap::new(),
        }
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_secs()
    }

    /// `entries` were applied in `range` at `now`.
    pub(crate) fn record(&mut self, range: RangeId, entries: u64, now: Instant) {
        let second = self.second(now);
        let counts = self.ranges.entry(range).or_default();
        counts.total += entries;
        let bucket = &mut counts.seconds[(second % WINDOW_SECONDS as u64) as usize];
        if bucket.0 != second {
            *bucket = (second, 0);
        }
        bucket.1 += entries;
    }

    /// The ranges `placement` puts `replica`'s slot on `server` (in key order), each
    /// with its counts at `now` (none yet: zero).
    pub(crate) fn report(
        &self,
        placement: &Placement,
        server: ServerId,
        replica: ReplicaId,
        now: Instant,
    ) -> Vec<RangeApplied> {
        let second = self.second(now);
        crate::placement_follower::ranges_held(placement, server, replica)
            .map(|range| {
                let counts = self.ranges.get(&range.id);
                // The window's whole seconds before this one, and this one so far.
                let recent: u64 = counts.map_or(0, |c| {
                    c.seconds
                        .iter()
                        .filter(|(at, _)| *at + (WINDOW_SECONDS as u64) > second)
                        .map(|(_, n)| n)
                        .sum()
                });
                RangeApplied {
                    range: range.id,
                    applied: counts.map_or(0, |c| c.total),
                    per_second: recent as f64 / RATE_WINDOW.as_secs_f64(),
                    bytes: None,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megastore_types::{ReplicaInfo, ReplicaKind, SiteId, Topology};

    fn placement() -> Placement {
        let info = |id, kind, site| ReplicaInfo {
            id: ReplicaId(id),
            kind,
            site: SiteId(site),
        };
        let topology = Topology::new(vec![
            info(1, ReplicaKind::Full, 0),
            info(2, ReplicaKind::Full, 1),
            info(3, ReplicaKind::Witness, 2),
        ])
        .unwrap();
        Placement::one_server_per_replica(&topology)
            .split(RangeId(0), b"m")
            .unwrap()
    }

    #[test]
    fn a_range_counts_its_entries_since_start_and_over_the_window() {
        let start = Instant::now();
        let mut activity = RangeActivity::new(start);
        let at = |secs| start + Duration::from_secs(secs);
        activity.record(RangeId(0), 30, at(0));
        activity.record(RangeId(0), 20, at(5));
        activity.record(RangeId(1), 7, at(9));
        let report = activity.report(&placement(), ServerId(1), ReplicaId(1), at(9));
        assert_eq!(
            report,
            vec![
                RangeApplied {
                    range: RangeId(0),
                    applied: 50,
                    per_second: 5.0,
                    bytes: None,
                },
                RangeApplied {
                    range: RangeId(1),
                    applied: 7,
                    per_second: 0.7,
                    bytes: None,
                },
            ]
        );
        // Ten seconds on, the first second has left the window; the totals stay.
        let later = activity.report(&placement(), ServerId(1), ReplicaId(1), at(10));
        assert_eq!((later[0].applied, later[0].per_second), (50, 2.0));
        // A bucket reused a window later starts again from zero.
        activity.record(RangeId(0), 1, at(15));
        let reused = activity.report(&placement(), ServerId(1), ReplicaId(1), at(15));
        assert_eq!((reused[0].applied, reused[0].per_second), (51, 0.1));
    }

    #[test]
    fn only_the_ranges_placed_on_the_server_are_reported() {
        let activity = RangeActivity::new(Instant::now());
        let report = activity.report(&placement(), ServerId(9), ReplicaId(1), Instant::now());
        assert!(report.is_empty(), "{report:?}");
    }
}
