//! `megastore bench --etcd ENDPOINTS`: the same closed loop against an etcd cluster, for
//! a side-by-side comparison (`scripts/compare-etcd.sh`): each client puts (or, for the
//! read share, gets — linearizable, etcd's default) one of `groups` keys, with values of
//! the same size, one operation outstanding, until the same deadline or count; with
//! `--connections`, the clients share that many connections, as megastore's do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rand::Rng;

use crate::report::{Done, Kind, Recorder, Report, Window};
use crate::{Spec, SpecError};

/// The key of item `n` (`bench/000042`), under the spec's prefix.
fn key(spec: &Spec, n: u32) -> String {
    format!("{}/{n:06}", spec.group_prefix)
}

/// Runs `spec` (its groups are keys here; sites and read modes do not apply) against
/// the etcd cluster at `endpoints`; `progress` hears how many operations are done.
pub async fn run_etcd(
    endpoints: &[String],
    spec: &Spec,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<Report, SpecError> {
    if endpoints.is_empty() {
        return Err(SpecError::Invalid("--etcd: name an endpoint".into()));
    }
    spec.check_shape()?;
    // One connection per client, as each megastore client has its own — or, with
    // `connections`, client `i` shares connection `i mod connections`, as megastore's do.
    let connections = spec
        .connections
        .map_or(spec.clients, |c| c.min(spec.clients)) as usize;
    let mut shared: Vec<etcd_client::Client> = Vec::with_capacity(connections);
    for _ in 0..connections {
        let client = etcd_client::Client::connect(endpoints, None)
            .await
            .map_err(|e| SpecError::Invalid(format!("connecting to etcd at {endpoints:?}: {e}")))?;
        shared.push(client);
    }
    let clients: Vec<_> = (0..spec.clients as usize)
        .map(|i| shared[i % connections].clone())
        .collect();
    let window = Window::of(spec);
    let issued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(progress);
    let mut tasks = Vec::new();
    for mut client in clients {
        let spec = spec.clone();
        let (issued, done, progress) = (issued.clone(), done.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            let mut recorder = Recorder::new();
            let value = vec![b'x'; spec.value_size];
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
                let (n, is_read) = {
                    let mut rng = rand::rng();
                    (
                        rng.random_range(0..spec.groups),
                        rng.random_bool(spec.read_fraction),
                    )
                };
                let key = key(&spec, n);
                let began = Instant::now();
                let outcome = if is_read {
                    match client.get(key, None).await {
                        Ok(_) => Done::Timed(Kind::Read, began.elapsed()),
                        Err(e) => Done::Failed(Kind::Read, e.to_string()),
                    }
                } else {
                    match client.put(key, value.clone(), None).await {
                        Ok(_) => Done::Timed(Kind::Write, began.elapsed()),
                        Err(e) => Done::Failed(Kind::Write, e.to_string()),
                    }
                };
                if measured {
                    recorder.add(outcome);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                }
            }
            recorder
        }));
    }
    let cpu_before = window.cpu_at_start().await;
    let mut recorder = Recorder::new();
    for task in tasks {
        match task.await {
            Ok(r) => recorder.merge(r),
            Err(e) => recorder.error(Kind::Write, format!("a client task failed: {e}")),
        }
    }
    let mut report = recorder.report(spec, &["etcd".to_string()], window.from.elapsed());
    report.system = "etcd".into();
    report.client_cpu_s = crate::report::process_cpu_seconds() - cpu_before;
    Ok(report)
}
