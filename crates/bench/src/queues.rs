//! `megastore bench --queues`: how long a queue message takes from its sender's
//! commit to its consumption at another site. A sender at one site commits messages
//! one at a time (each in its own transaction of the sender group, paced); a consumer
//! at another site receives and consumes them in transactions of the receiver group as
//! fast as it can. Delivery is left to the replicas (nobody calls `deliver`): what is
//! timed is what an application sees.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use serde::Serialize;

use crate::SpecError;
use crate::timing::{QueryKind, connect_at, failed, histogram, kind, record, run_id};

const QUEUE: &str = "bench";
/// Pause between two sends: messages are timed one by one, not as a backlog.
const PACE: Duration = Duration::from_millis(20);
/// How long the consumer waits for the last message.
const DRAIN: Duration = Duration::from_secs(60);

/// What `--queues` measured.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    /// Where the sender acted from.
    pub sender_site: String,
    /// Where the consumer acted from.
    pub receiver_site: String,
    /// Each measure: the send's commit, the delivery (from the send's
    /// acknowledgement to its consumption's), the consuming commit.
    pub kinds: Vec<QueryKind>,
}

impl QueueReport {
    /// The report as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).expect("the report always serializes")
    }
}

/// Sends `messages` from `sender_site` to a consumer at `receiver_site`, and times
/// each send, delivery and consumption.
pub async fn run_queues(
    config: &ClusterConfig,
    sender_site: &str,
    receiver_site: &str,
    messages: u32,
) -> Result<QueueReport, SpecError> {
    if messages == 0 {
        return Err(SpecError::Invalid("--runs must be at least 1".into()));
    }
    let (sender, consumer) = (
        connect_at(config, sender_site).await?,
        connect_at(config, receiver_site).await?,
    );
    // Fresh groups per run, so no earlier run's messages are in the way.
    let run = run_id();
    let from = megastore_client::group(format!("bench-queue-from-{run:x}").as_bytes())
        .map_err(failed("the sender group"))?;
    let to = megastore_client::group(format!("bench-queue-to-{run:x}").as_bytes())
        .map_err(failed("the receiver group"))?;
    let total = u64::from(messages);
    let consuming = {
        let to = to.clone();
        async move {
            let mut consumed: BTreeMap<u64, Instant> = BTreeMap::new();
            let mut commits = histogram();
            let started = Instant::now();
            while (consumed.len() as u64) < total {
                if started.elapsed() > DRAIN + PACE * messages {
                    return Err(SpecError::Invalid(format!(
                        "only {} of {total} messages arrived",
                        consumed.len()
                    )));
                }
                let began = Instant::now();
                let (received, _) = consumer
                    .transaction(&to, async |txn| txn.receive(QUEUE, 100).await)
                    .await
                    .map_err(failed("consuming"))?;
                let done = Instant::now();
                if received.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                record(&mut commits, done - began);
                for message in received {
                    let n = String::from_utf8_lossy(&message.body)
                        .parse::<u64>()
                        .map_err(|_| {
                            SpecError::Invalid("a message that is not the benchmark's".into())
                        })?;
                    if consumed.insert(n, done).is_some() {
                        return Err(SpecError::Invalid(format!("message {n} consumed twice")));
                    }
                }
            }
            Ok::<_, SpecError>((consumed, commits))
        }
    };
    let sending = async {
        let mut acked: BTreeMap<u64, Instant> = BTreeMap::new();
        let mut commits = histogram();
        for n in 0..total {
            let began = Instant::now();
            sender
                .transaction(&from, async |txn| {
                    txn.send(&to, QUEUE, n.to_string().as_bytes())
                })
                .await
                .map_err(failed("sending"))?;
            let done = Instant::now();
            record(&mut commits, done - began);
            acked.insert(n, done);
            tokio::time::sleep(PACE).await;
        }
        Ok::<_, SpecError>((acked, commits))
    };
    let (sent, received) = futures::join!(sending, consuming);
    let ((acked, send_commits), (consumed, consume_commits)) = (sent?, received?);
    let mut delivery = histogram();
    for (n, at) in &consumed {
        let sent_at = acked[n];
        record(&mut delivery, at.saturating_duration_since(sent_at));
    }
    Ok(QueueReport {
        sender_site: sender_site.to_string(),
        receiver_site: receiver_site.to_string(),
        kinds: vec![
            kind("send (the sender's commit)", 1, &send_commits),
            kind("delivery (send acknowledged → consumed)", 1, &delivery),
            kind("consume (the receiver's commit)", 1, &consume_commits),
        ],
    })
}
