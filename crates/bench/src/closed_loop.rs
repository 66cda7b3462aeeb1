//! The closed loop every system's workload shares: each client, one operation
//! outstanding, picks an item and whether to read, runs the operation, records it,
//! and repeats until the spec's deadline or operation count.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rand::Rng;

use crate::Spec;
use crate::report::{Done, Kind, Recorder, Report, Window};

/// One operation of a closed loop: the item (group or key) `n`, a read or a write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pick {
    pub(crate) n: u32,
    pub(crate) read: bool,
}

/// Runs one closed loop per client of `clients`, each owning its client's state `C`:
/// `operation(state, pick)` runs one operation and gives the state back with what
/// happened. Items are uniformly random below the spec's groups, reads its read share
/// — or, with `fill`, each item once, in order, written. `progress` hears how many
/// operations are done; the report names `sites`, and counts the process's CPU from
/// the end of the warm-up.
pub(crate) async fn run_clients<C, F, Fut>(
    spec: &Spec,
    sites: &[String],
    clients: Vec<C>,
    progress: impl Fn(u64) + Send + Sync + 'static,
    operation: F,
) -> Report
where
    C: Send + 'static,
    F: Fn(C, Pick) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (C, Done)> + Send,
{
    let window = Window::of(spec);
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(progress);
    let mut tasks = Vec::new();
    for mut client in clients {
        let spec = spec.clone();
        let operation = operation.clone();
        let (issued, done, progress) = (issued.clone(), done.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            let mut recorder = Recorder::with_timeline(spec.timeline);
            while Instant::now() < window.until {
                let measured = window.measuring();
                let n = if measured {
                    issued.fetch_add(1, Ordering::Relaxed)
                } else {
                    0
                };
                if spec.operations.is_some_and(|limit| n >= limit) {
                    break;
                }
                let pick = if spec.fill {
                    // Each item once: the operations are numbered below `groups`.
                    Pick {
                        n: u32::try_from(n % u64::from(spec.groups)).expect("below groups"),
                        read: false,
                    }
                } else {
                    let mut rng = rand::rng();
                    Pick {
                        n: rng.random_range(0..spec.groups),
                        read: rng.random_bool(spec.read_fraction),
                    }
                };
                let (back, outcome) = operation(client, pick).await;
                client = back;
                if measured {
                    recorder.add(outcome, window.from.elapsed());
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                }
            }
            recorder
        }));
    }
    let cpu_before = window.cpu_at_start().await;
    let mut recorder = Recorder::with_timeline(spec.timeline);
    for task in tasks {
        match task.await {
            Ok(r) => recorder.merge(r),
            Err(e) => recorder.error(Kind::Write, format!("a client task failed: {e}")),
        }
    }
    let mut report = recorder.report(spec, sites, window.from.elapsed());
    report.client_cpu_s = crate::report::process_cpu_seconds() - cpu_before;
    report
}
