//! A current read sees every write acknowledged before it began (docs/protocol.md,
//! "Current read, vouched: local"), over real processes at a hot group with a 40 ms
//! round trip between sites: writers at site B keep an entry in flight at site A's
//! full replica nearly all the time — accepted there, and marked visible there only
//! after their writer learned it chosen and acknowledged it — so readers at A, vouched
//! by A's coordinator, meet one and are served once A has it visible (their long poll)
//! or once they settled it from the voters (their catch-up), whichever comes first,
//! while the witness is killed and started again. Checked: each writer's key, as every
//! current read saw it, holds at least the value that writer had acknowledged before
//! the read began (a read served at A's visible position as it found it would miss
//! them: a long poll's answer trusted without looking fails this).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use megastore_client::{Attempt, Client, Outcome};
use megastore_paxos::{DataQuery, ReadMode};
use megastore_types::EgId;

use crate::support::{
    connect, counter_value, start_cluster_with, wait_for_acks, wan_between_all_sites,
};

const WRITERS: usize = 8;
const READERS: usize = 4;
const LOAD: Duration = Duration::from_secs(12);
/// Emulated round trip between every two sites: a writer's entry stays in flight at
/// its replica for about this long.
const RTT_MS: u64 = 40;

fn group() -> EgId {
    megastore_client::group(b"read-hot").unwrap()
}

fn key(writer: usize) -> Vec<u8> {
    format!("w-{writer:02}").into_bytes()
}

/// Writes 1, 2, 3, … to its key, blind, and publishes each acknowledged value. It
/// stops at its first error: an outcome left unknown could land after a later write
/// and set the key back, which a reader would rightly see.
async fn writer(client: Client, w: usize, acked: Arc<Vec<AtomicU64>>, count: Arc<AtomicUsize>) {
    let eg = group();
    let deadline = Instant::now() + LOAD;
    let mut value = 0u64;
    while Instant::now() < deadline {
        value += 1;
        let mut txn = client.begin(&eg);
        let result = match txn.set(&key(w), b"n", value.to_string().as_bytes()) {
            Ok(()) => txn.commit().await,
            Err(e) => Err(e),
        };
        match result {
            Ok(Attempt::Done(Outcome::Committed { .. })) => {
                acked[w].store(value, Ordering::SeqCst);
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Attempt::Done(other)) => panic!("writer {w}: a write ended {other:?}"),
            Ok(Attempt::Retry { .. }) => {}
            Err(_) => return,
        }
    }
}

/// What one reader found: reads checked, reads that failed (during the fault), and
/// every stale value it saw.
#[derive(Debug, Default)]
struct ReaderSaw {
    checked: usize,
    failed: usize,
    stale: Vec<String>,
}

/// Current reads of every writer's key until the load ends, each checked against the
/// values acknowledged before it began.
async fn reader(client: Client, acked: Arc<Vec<AtomicU64>>) -> ReaderSaw {
    let eg = group();
    let deadline = Instant::now() + LOAD;
    let keys: Vec<Vec<u8>> = (0..WRITERS).map(key).collect();
    let mut saw = ReaderSaw::default();
    while Instant::now() < deadline {
        let floor: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        let read = client
            .read(&eg, ReadMode::Current, DataQuery::Rows(keys.clone()))
            .await;
        let Ok(read) = read else {
            saw.failed += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        saw.checked += 1;
        for (w, floor) in floor.iter().enumerate() {
            let row = read.rows.iter().find(|r| r.key == key(w)).cloned();
            let value = counter_value(row);
            if value < *floor {
                saw.stale.push(format!(
                    "writer {w}: read {value} at {:?}, {floor} acknowledged before the read",
                    read.position
                ));
            }
        }
    }
    saw
}

#[test]
fn current_reads_at_a_hot_group_see_every_write_acknowledged_before_them_through_a_kill() {
    let wan = wan_between_all_sites(RTT_MS);
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster_with(&wan);
    let site = |c: usize| if c < WRITERS { "B" } else { "A" };
    let clients: Vec<Client> = (0..WRITERS + READERS)
        .map(|c| runtime.block_on(connect(&config, site(c))))
        .collect();
    let eg = group();
    runtime.block_on(crate::support::create_group(&clients[0], &eg));
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let count = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let task = writer(clients[w].clone(), w, acked.clone(), count.clone());
            runtime.spawn(task)
        })
        .collect();
    let readers: Vec<_> = (0..READERS)
        .map(|r| runtime.spawn(reader(clients[WRITERS + r].clone(), acked.clone())))
        .collect();
    // The witness dies under the load and comes back while it goes on.
    wait_for_acks(&count, 100, Duration::from_secs(20));
    cluster.process("replica-c").kill();
    let at_kill = count.load(Ordering::Relaxed);
    wait_for_acks(&count, at_kill + 100, Duration::from_secs(20));
    cluster.start_process("replica-c");
    for w in writers {
        runtime.block_on(w).unwrap();
    }
    let saw: Vec<ReaderSaw> = readers
        .into_iter()
        .map(|r| runtime.block_on(r).unwrap())
        .collect();
    let stale: Vec<&String> = saw.iter().flat_map(|s| &s.stale).collect();
    assert!(stale.is_empty(), "stale current reads: {stale:#?}");
    let checked: usize = saw.iter().map(|s| s.checked).sum();
    let failed: usize = saw.iter().map(|s| s.failed).sum();
    assert!(
        checked >= 200,
        "only {checked} current reads checked ({failed} failed)"
    );
    let acked_writes = count.load(Ordering::Relaxed);
    assert!(
        acked_writes >= 300,
        "only {acked_writes} writes acknowledged"
    );
}
