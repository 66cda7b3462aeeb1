//! The replica server's delivery of queue messages (docs/protocol.md, "Queues"): every
//! full replica delivers the outboxes of the groups whose entries it applied with
//! messages in them, through its embedded client library — the protocol core's
//! delivery, which is exactly-once however many deliverers run. So that they do not
//! all race for every message, the full replicas take turns by config order: the
//! first delivers at once, the next a second later (finding the outbox empty if the
//! first succeeded), and so on; a delivery that could not finish (a conflict, an
//! outbox longer than one batch, an unavailable receiver) is tried again.

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_client::Client;
use megastore_types::EgId;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a full replica waits per full replica before it in config order.
const TURN: Duration = Duration::from_secs(1);

/// How long after a delivery that could not finish it is tried again.
const RETRY: Duration = Duration::from_millis(200);

/// Delivers the groups that come in on `groups`, each after `delay`, until the
/// channel closes.
pub(crate) async fn deliver(
    client: Client,
    metrics: megastore_metrics::ReplicaMetrics,
    delay: Duration,
    mut groups: mpsc::UnboundedReceiver<EgId>,
) {
    let mut due: BTreeMap<EgId, Instant> = BTreeMap::new();
    loop {
        metrics.outboxes_waiting(due.len());
        let next = due.values().min().copied();
        tokio::select! {
            group = groups.recv() => match group {
                Some(eg) => {
                    let at = Instant::now() + delay;
                    due.entry(eg).or_insert(at);
                }
                None => return,
            },
            () = sleep_until(next) => {
                let now = Instant::now();
                let ready: Vec<EgId> = due
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(eg, _)| eg.clone())
                    .collect();
                for eg in ready {
                    due.remove(&eg);
                    let again = match client.deliver(&eg).await {
                        Ok(done) => {
                            metrics.delivered(done.delivered);
                            done.more || !done.skipped.is_empty()
                        }
                        Err(e) => {
                            tracing::debug!(group = %eg, "delivery failed: {e}; trying again");
                            true
                        }
                    };
                    if again {
                        due.insert(eg, Instant::now() + RETRY);
                    }
                }
            }
        }
    }
}

/// This replica's wait before it delivers: one turn per full replica before it.
pub(crate) fn turn(config: &megastore_config::ClusterConfig, me: &str) -> Option<Duration> {
    let full: Vec<&str> = config
        .replicas
        .iter()
        .filter(|r| r.kind == megastore_types::ReplicaKind::Full)
        .map(|r| r.name.as_str())
        .collect();
    let rank = full.iter().position(|n| *n == me)?;
    Some(TURN * u32::try_from(rank).unwrap_or(u32::MAX))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
