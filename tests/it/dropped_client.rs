//! A client dropped right after its commit: what it sent still reaches every replica.
//!
//! The client library's driver polls the requests its core sends itself. When the
//! last handle of a `Client` is gone, the driver stops; the requests still in flight (a
//! commit's visible marks) must finish anyway, or replicas learn the position only
//! through their sweep. This cluster's sweep is ten minutes, so only the marks can make
//! the position visible within the test's patience.

use std::time::{Duration, Instant};

use crate::support::{connect, eg, first_commit, start_cluster_edited};

/// Groups each committed by a client of its own, dropped right after the commit.
const GROUPS: u32 = 4;

#[test]
fn a_client_dropped_after_its_commit_still_marks_it_visible_everywhere() {
    let (_alone, _dir, _cluster, config, runtime) =
        start_cluster_edited(|text| text.replace("sweep_ms = 300", "sweep_ms = 600000"));
    assert_eq!(config.timeouts.sweep_ms, 600_000, "the sweep is slowed");
    let groups: Vec<_> = (0..GROUPS).map(|i| eg(60 + i)).collect();
    runtime.block_on(async {
        for (i, group) in groups.iter().enumerate() {
            // Each site's client in turn, so marks leave from more than one place.
            let client = connect(&config, ["A", "B"][i % 2]).await;
            first_commit(&client, group).await;
            drop(client);
        }
        let peers = megastore_rpc::Peers::new(&config).expect("the cluster's peers");
        for group in &groups {
            let started = Instant::now();
            loop {
                let status =
                    megastore_client::status::cluster_status(&config, &peers, Some(group)).await;
                let behind: Vec<_> = status
                    .replicas
                    .iter()
                    .filter(|r| r.log.is_none_or(|log| log.visible.0 < 1))
                    .map(|r| (r.name.clone(), r.log))
                    .collect();
                if behind.is_empty() {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(15),
                    "{group}: the dropped client's commit is not visible at {behind:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
}
