//! The replica server's work on groups that outlives the clients that caused it: the
//! delivery of queue messages its applied entries sent (docs/protocol.md, "Queues"),
//! the settling of cross-group transactions prepared in its groups whose clients
//! may be gone ("Two-phase commit", recovery), and the collection of the decisions
//! its groups recorded once they are old and finished everywhere ("Two-phase
//! commit", collection). Both run the protocol core's operations
//! through the replica's embedded client library — exactly-once and safe however many
//! replicas run them — so this module only decides *when*: a group comes in when the
//! replica applies such an entry (or finds one at start), waits its turn, and is
//! worked on again until nothing is left.
//!
//! So that every full replica does not race for the same work, they take turns by
//! config order: the first delivers at once, the next a second later (finding the
//! outbox empty if the first succeeded), and so on. Prepared transactions are left to
//! their own clients for the prepared timeout first: a live client finishes its own in
//! milliseconds.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use megastore_client::Client;
use megastore_paxos::{AfterPage, CollectionPass};
use megastore_types::EgId;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a full replica waits per full replica before it in config order.
const TURN: Duration = Duration::from_secs(1);

/// How long after a delivery that could not finish it is tried again.
const DELIVERY_RETRY: Duration = Duration::from_millis(200);

/// Works on each group that comes in on `groups`, `delay` after it came in, and again
/// `retry` later while `work` says there is more, until the channel closes; `waiting`
/// hears how many groups wait.
async fn per_group<F, Fut>(
    mut groups: mpsc::UnboundedReceiver<EgId>,
    delay: Duration,
    retry: Duration,
    waiting: impl Fn(usize),
    mut work: F,
) where
    F: FnMut(EgId) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut due: BTreeMap<EgId, Instant> = BTreeMap::new();
    loop {
        waiting(due.len());
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
                    if work(eg.clone()).await {
                        due.insert(eg, Instant::now() + retry);
                    }
                }
            }
        }
    }
}

/// Delivers the outboxes of the groups that come in on `groups`, each after `delay`.
pub(crate) async fn deliver(
    client: Client,
    metrics: megastore_metrics::ReplicaMetrics,
    delay: Duration,
    groups: mpsc::UnboundedReceiver<EgId>,
) {
    let waiting = metrics.clone();
    per_group(
        groups,
        delay,
        DELIVERY_RETRY,
        move |n| waiting.outboxes_waiting(n),
        |eg| {
            let (client, metrics) = (client.clone(), metrics.clone());
            async move {
                match client.deliver(&eg).await {
                    Ok(done) => {
                        metrics.delivered(done.delivered);
                        done.more || !done.skipped.is_empty()
                    }
                    Err(e) => {
                        tracing::debug!(group = %eg, "delivery failed: {e}; trying again");
                        true
                    }
                }
            }
        },
    )
    .await;
}

/// Settles the prepared transactions of the groups that come in on `groups`, each
/// `delay` after it came in (the prepared timeout and this replica's turn), again
/// every `retry` while some are undecided or could not be settled.
pub(crate) async fn settle(
    client: Client,
    metrics: megastore_metrics::ReplicaMetrics,
    delay: Duration,
    retry: Duration,
    groups: mpsc::UnboundedReceiver<EgId>,
) {
    let waiting = metrics.clone();
    per_group(
        groups,
        delay,
        retry,
        move |n| waiting.prepared_waiting(n),
        |eg| {
            let (client, metrics) = (client.clone(), metrics.clone());
            async move {
                match client.settle_prepared(&eg).await {
                    Ok(settled) => {
                        metrics.prepared_settled(settled.committed, settled.aborted);
                        settled.undecided > 0 || settled.failed > 0
                    }
                    Err(e) => {
                        tracing::debug!(group = %eg, "settling prepared transactions failed: {e}; trying again");
                        true
                    }
                }
            }
        },
    )
    .await;
}

/// Collects the old decision rows of the coordinator groups that come in on `groups`,
/// each `delay` after it came in (the retention and this replica's turn), a page at a
/// time, again every `retention` while the core's [`CollectionPass`] says some are
/// kept (younger than the retention, or with a participant not finished yet).
pub(crate) async fn collect(
    client: Client,
    metrics: megastore_metrics::ReplicaMetrics,
    delay: Duration,
    retention: Duration,
    groups: mpsc::UnboundedReceiver<EgId>,
) {
    let waiting = metrics.clone();
    per_group(
        groups,
        delay,
        retention,
        move |n| waiting.decisions_waiting(n),
        |eg| {
            let (client, metrics) = (client.clone(), metrics.clone());
            async move {
                let mut pass = CollectionPass::default();
                let mut after = None;
                loop {
                    match client.collect_decisions(&eg, after, retention).await {
                        Ok(page) => {
                            metrics.decisions_collected(page.collected);
                            match pass.after_page(&page) {
                                AfterPage::Next(next) => after = Some(next),
                                AfterPage::LookAgain => return true,
                                AfterPage::Done => return false,
                            }
                        }
                        Err(e) => {
                            tracing::debug!(group = %eg, "collecting decisions failed: {e}; trying again");
                            return true;
                        }
                    }
                }
            }
        },
    )
    .await;
}

/// Replica `me`'s wait before it works on a group: one turn per full replica before
/// it (none for a replica that is not full).
pub(crate) fn turn(
    config: &megastore_config::ClusterConfig,
    me: megastore_types::ReplicaId,
) -> Option<Duration> {
    let full: Vec<u16> = config
        .replicas
        .iter()
        .filter(|r| r.kind == megastore_types::ReplicaKind::Full)
        .map(|r| r.id)
        .collect();
    let rank = full.iter().position(|id| *id == me.0)?;
    Some(TURN * u32::try_from(rank).unwrap_or(u32::MAX))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
