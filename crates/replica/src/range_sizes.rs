//! How many bytes each range a replica server holds takes in its store (issue 17,
//! rebalancing by size): every version of every row of the range's groups, as
//! `megastore_paxos::range_bytes` counts them.
//!
//! Measured by reading the rows, in a thread of its own: every [`MEASURE_EVERY`], and
//! as soon as the server comes to hold a range it has no size of (at start, a split's
//! new half, a move's target: the driver's [`RangeSizes::hold`] wakes the thread), the
//! whole read paced at [`READ_BYTES_PER_SECOND`] so that measuring never competes
//! with serving. A measurement is therefore up to a period plus its own reading time
//! old; between two, a range's size is the last one measured (a range not measured
//! yet has none). The ranges measured are those the driver last said the server
//! holds.
//!
//! Does not: estimate from RocksDB's files (the RocksDB crate this workspace links
//! offers no per-range estimate), nor count the global index rows of a range's
//! groups.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use megastore_metrics::ReplicaMetrics;
use megastore_placement::RangeId;
use megastore_rowstore::KeyRange;
use megastore_rowstore_rocksdb::RocksStore;

/// The time between the end of one measurement and the start of the next.
pub(crate) const MEASURE_EVERY: Duration = Duration::from_secs(30);
/// How soon after a measurement a range held with no size yet (held while it ran, or
/// whose reading failed) is measured again.
const UNMEASURED_AFTER: Duration = Duration::from_millis(500);
/// How fast a measurement reads at most.
pub(crate) const READ_BYTES_PER_SECOND: u64 = 64 << 20;
/// Rows read at once.
const PAGE_ROWS: usize = 256;

#[derive(Debug, Default)]
struct Shared {
    /// The ranges the server holds, with their group keys.
    held: Vec<(RangeId, KeyRange)>,
    /// The last size measured of each range held.
    bytes: BTreeMap<RangeId, u64>,
}

impl Shared {
    fn unmeasured(&self) -> bool {
        self.held
            .iter()
            .any(|(range, _)| !self.bytes.contains_key(range))
    }
}

/// The sizes measured, and what to measure. Dropping it stops the measuring thread
/// and waits for it, so the store is no longer read (nor kept open) afterwards: a
/// server stopped and started again in one process opens the store again at once.
#[derive(Debug)]
pub(crate) struct RangeSizes {
    shared: Arc<Mutex<Shared>>,
    /// Wakes the thread; dropped, stops it.
    wake: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RangeSizes {
    /// Starts measuring `store` in a thread named after the server `name`, each size
    /// also set in `metrics`.
    pub(crate) fn start(
        store: Arc<RocksStore>,
        metrics: ReplicaMetrics,
        name: &str,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (wake, woken) = std::sync::mpsc::channel();
        let measuring = Measuring {
            store,
            metrics,
            shared: Arc::clone(&shared),
            woken,
        };
        let thread = std::thread::Builder::new()
            .name(format!("sizes-{name}"))
            .spawn(move || measuring.run())?;
        Ok(Self {
            shared,
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    /// From now on the server holds `held` (ranges and their group keys); a range no
    /// longer held forgets its size (and its metric is set to 0), and one not
    /// measured yet is measured soon.
    pub(crate) fn hold(&self, held: Vec<(RangeId, KeyRange)>, metrics: &ReplicaMetrics) {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.bytes.retain(|range, _| {
            let kept = held.iter().any(|(h, _)| h == range);
            if !kept {
                metrics.range_bytes(range.0, 0);
            }
            kept
        });
        shared.held = held;
        if shared.unmeasured()
            && let Some(wake) = &self.wake
        {
            let _ = wake.send(());
        }
    }

    /// The last size measured of `range` (`None`: not measured since it is held).
    pub(crate) fn bytes(&self, range: RangeId) -> Option<u64> {
        let shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.bytes.get(&range).copied()
    }
}

impl Drop for RangeSizes {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The measuring thread's side.
struct Measuring {
    store: Arc<RocksStore>,
    metrics: ReplicaMetrics,
    shared: Arc<Mutex<Shared>>,
    woken: Receiver<()>,
}

impl Measuring {
    /// Waits `wait` or until woken; false once told to stop.
    fn pause(&self, wait: Duration) -> bool {
        !matches!(
            self.woken.recv_timeout(wait),
            Err(RecvTimeoutError::Disconnected)
        )
    }

    fn run(&self) {
        let mut wait = MEASURE_EVERY;
        while self.pause(wait) {
            let held = self
                .shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .held
                .clone();
            for (range, keys) in held {
                // Paced: each page's bytes at the rate; a stop ends the reading.
                let pace = |bytes: u64| {
                    let took = bytes as f64 / READ_BYTES_PER_SECOND as f64;
                    if self.pause(Duration::from_secs_f64(took)) {
                        ControlFlow::Continue(())
                    } else {
                        ControlFlow::Break(())
                    }
                };
                match megastore_paxos::range_bytes(&*self.store, &keys, PAGE_ROWS, pace) {
                    Ok(Some(bytes)) => {
                        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
                        // Still held (it may have moved away while it was read).
                        if shared.held.iter().any(|(h, _)| *h == range) {
                            shared.bytes.insert(range, bytes);
                            self.metrics.range_bytes(range.0, bytes);
                        }
                    }
                    Ok(None) => return,
                    Err(e) => tracing::warn!("measuring {range}: {e}"),
                }
            }
            let unmeasured = self
                .shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .unmeasured();
            wait = if unmeasured {
                UNMEASURED_AFTER
            } else {
                MEASURE_EVERY
            };
        }
    }
}
