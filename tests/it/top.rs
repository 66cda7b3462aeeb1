//! `megastore top` against real processes: writers at two sites over the public gRPC
//! API, one group hot (written at both sites, so its writers conflict) among many cold
//! ones, and the read-only replica killed while they write. The live view must name
//! the hot group first and the dead replica unreachable; afterwards each server's
//! per-group count of the hot group must be exactly the commits acknowledged there,
//! and its commit counter each commit once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use megastore_e2e::run_megastore;
use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use tonic::transport::Channel;

use crate::support::{api_at, grpc_committed, start_cluster};

/// How long the writers run (bounded by count too).
const LOAD: Duration = Duration::from_secs(10);
const WRITES_MAX: u64 = 2_000;
const COLD_GROUPS: u64 = 40;

/// One read-modify-write of row `k` of `group` over gRPC: whether it committed. (It
/// reads what it writes, so two sites' writers of the hot group conflict whenever
/// their transactions overlap — blind writes would only rebase.)
async fn write(api: &mut MegastoreClient<Channel>, group: &[u8], value: u64) -> bool {
    let Ok(begun) = api
        .begin(pb::BeginRequest {
            eg: group.to_vec(),
            root: None,
            ..Default::default()
        })
        .await
    else {
        return false;
    };
    let txn = begun.into_inner().txn;
    let read = pb::TxnReadRequest {
        txn,
        keys: vec![b"k".to_vec()],
    };
    if api.txn_read(read).await.is_err() {
        return false;
    }
    let row = pb::RowWrite {
        key: b"k".to_vec(),
        cells: vec![pb::CellWrite {
            column: b"v".to_vec(),
            change: Some(pb::cell_write::Change::Set(value.to_string().into_bytes())),
        }],
    };
    let written = api.write(pb::WriteRequest {
        txn,
        rows: vec![row],
    });
    if written.await.is_err() {
        return false;
    }
    grpc_committed(api.commit(pb::CommitRequest { txn }).await).is_some()
}

#[test]
fn top_shows_the_hot_group_and_a_dead_replica_and_counts_each_groups_commits_exactly() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    let address = |name: &str| {
        config
            .replicas
            .iter()
            .find(|r| r.name == name)
            .unwrap()
            .address
            .clone()
    };
    // Per site: hot commits acknowledged, and every commit acknowledged.
    let acked: Arc<[[AtomicU64; 2]; 2]> = Arc::new(Default::default());
    let started = Instant::now();
    let writers: Vec<_> = [(0, "a"), (1, "b")]
        .into_iter()
        .flat_map(|(site, replica)| {
            let address = address(replica);
            // Two writers per site: one on the hot group, one over the cold ones
            // (which also writes the hot group every fourth time).
            [true, false].map(|hot_only| {
                let (address, acked) = (address.clone(), Arc::clone(&acked));
                runtime.spawn(async move {
                    let mut api = api_at(&address);
                    for i in 0..WRITES_MAX {
                        if started.elapsed() > LOAD {
                            break;
                        }
                        let hot = hot_only || i % 4 == 0;
                        let group = if hot {
                            b"hot".to_vec()
                        } else {
                            format!("cold-{}", i % COLD_GROUPS).into_bytes()
                        };
                        if write(&mut api, &group, i).await {
                            acked[site][1].fetch_add(1, Ordering::Relaxed);
                            if hot {
                                acked[site][0].fetch_add(1, Ordering::Relaxed);
                            }
                        } else {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                })
            })
        })
        .collect();

    std::thread::sleep(Duration::from_secs(3));
    cluster.process("replica-d").kill();
    let top = run_megastore(
        &[
            "top",
            "--config",
            &config_arg,
            "--frames",
            "2",
            "--interval",
            "1",
            "--size",
            "140x50",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(top.status.success(), "{top:?}");
    let last = top
        .stdout
        .split("--- frame 2 of 2")
        .nth(1)
        .expect("a second frame");
    let line_of = |needle: &str| {
        last.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{last}"))
    };
    assert!(line_of("│d ").contains("unreachable"), "{last}");
    assert!(line_of("│a ").contains("serving"), "{last}");
    // The hot table's first row is the hot group.
    let hot_header = last
        .lines()
        .position(|l| l.contains("commits (total)"))
        .expect("the hot groups' table");
    let first_hot = last.lines().nth(hot_header + 1).unwrap();
    assert!(first_hot.contains("\"hot\""), "{last}");
    // Site A commits, as its public API counts them.
    let site_a = line_of("│A ");
    let commits: f64 = site_a
        .trim_start_matches('│')
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no commits/s in {site_a:?}"));
    assert!(commits > 0.0, "{last}");

    runtime.block_on(async {
        for writer in writers {
            writer.await.unwrap();
        }
    });
    let polls = runtime.block_on(megastore_client::activity::poll_activity(&config, 64));
    let hot = megastore_client::group(b"hot").unwrap();
    for (site, replica) in [(0, "a"), (1, "b")] {
        let activity = polls
            .iter()
            .find(|p| p.name == replica)
            .and_then(|p| p.activity.clone())
            .expect("the replica answers");
        let counted = activity
            .hot
            .commits
            .iter()
            .find(|c| c.group == hot)
            .expect("the hot group is tracked");
        // Fewer groups than tracked slots: the counts are exact.
        assert_eq!(counted.error, 0);
        assert_eq!(
            counted.count,
            acked[site][0].load(Ordering::Relaxed),
            "{replica}: the hot group's commits counted against those acknowledged"
        );
        // The metrics count a commit whose outcome was unknown (then resolved) as
        // unknown; the hot groups count it once it is found committed.
        let all = acked[site][1].load(Ordering::Relaxed);
        let totals = activity.totals;
        assert!(
            totals.commits <= all && all <= totals.commits + totals.unknown_outcomes,
            "{replica}: {totals:?} against {all} commits acknowledged"
        );
        assert!(acked[site][0].load(Ordering::Relaxed) > 0);
    }
    let conflicts: u64 = polls
        .iter()
        .filter_map(|p| p.activity.as_ref())
        .map(|a| a.totals.conflicts)
        .sum();
    assert!(conflicts > 0, "writers of one group at two sites conflict");
    assert!(
        polls
            .iter()
            .find(|p| p.name == "d")
            .unwrap()
            .activity
            .is_none(),
        "d is dead"
    );
}

/// The live view on a terminal (a pseudo-terminal of 120 × 40, driven by Python's
/// `pty`): it draws, a replica nobody runs shows unreachable, `q` quits with status 0
/// and the terminal's main screen is restored.
#[test]
fn top_draws_on_a_terminal_and_q_quits() {
    let dir = tempfile::tempdir().unwrap();
    let config = megastore_e2e::write_cluster_config(dir.path());
    let script = r#"
import fcntl, os, pty, select, struct, sys, termios, time
binary, config = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    time.sleep(0.3)  # the parent sets the window size first
    os.execv(binary, [binary, "top", "--config", config, "--interval", "0.5"])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
out = b""
def pump(seconds):
    global out
    end = time.time() + seconds
    while time.time() < end:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return
pump(4)
os.write(fd, b"q")
status = None
end = time.time() + 10
while status is None and time.time() < end:
    pump(0.2)
    done, code = os.waitpid(pid, os.WNOHANG)
    if done:
        status = os.waitstatus_to_exitcode(code)
if status is None:
    os.kill(pid, 9)
print("status", status)
print("drawn", b"megastore top" in out and b"unreachable" in out)
print("restored", b"\x1b[?1049l" in out)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(megastore_e2e::megastore_bin())
        .arg(&config)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for expected in ["status 0", "drawn True", "restored True"] {
        assert!(stdout.contains(expected), "{expected:?} missing: {stdout}");
    }
}
