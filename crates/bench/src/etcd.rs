//! `megastore bench --etcd ENDPOINTS`: the same closed loop against an etcd cluster, for
//! a side-by-side comparison (`scripts/compare-etcd.sh`): each client puts (or, for the
//! read share, gets — linearizable, etcd's default) one of `groups` keys, with values of
//! the same size, one operation outstanding, until the same deadline or count; with
//! `--connections`, the clients share that many connections, as megastore's do.

use std::sync::Arc;
use std::time::Instant;

use crate::closed_loop::run_clients;
use crate::report::{Done, Kind, Report};
use crate::{Spec, SpecError};

/// The key of item `n` (`bench/000042`), under the spec's group prefix.
fn key(prefix: &str, n: u32) -> String {
    format!("{prefix}/{n:06}")
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
    let value = Arc::new(vec![b'x'; spec.value_size]);
    let prefix = Arc::new(spec.group_prefix.clone());
    let sites = ["etcd".to_string()];
    let mut report = run_clients(spec, &sites, clients, progress, move |mut client, pick| {
        let (value, prefix) = (value.clone(), prefix.clone());
        async move {
            let key = key(&prefix, pick.n);
            let began = Instant::now();
            let outcome = if pick.read {
                match client.get(key, None).await {
                    Ok(_) => Done::Timed(Kind::Read, began.elapsed()),
                    Err(e) => Done::Failed(Kind::Read, e.to_string()),
                }
            } else {
                match client.put(key, value.to_vec(), None).await {
                    Ok(_) => Done::Timed(Kind::Write, began.elapsed()),
                    Err(e) => Done::Failed(Kind::Write, e.to_string()),
                }
            };
            (client, outcome)
        }
    })
    .await;
    report.system = "etcd".into();
    Ok(report)
}
