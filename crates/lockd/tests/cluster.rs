//! lockd as a real three-node cluster on loopback: gRPC between nodes, RocksDB
//! directories, openraft. It passes the lock service conformance suite, survives the
//! loss of its leader, keeps everything acknowledged across a restart of every node,
//! refuses a data directory stamped for another node, and answers file reads without
//! log entries but only while its leader reaches a majority.

use std::path::Path;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_lock::conformance::LockHarness;
use megastore_lock::{LockError, LockServiceExt};
use megastore_lockd::{LockdError, LockdNode};
use megastore_rpc::{BlockingLockdClient, LockdClient};

/// Three lockd nodes in one test process, each on its own port and directory.
///
/// The conformance suite assumes no leadership change in the middle of a case: a new
/// leader restarts every lease, which (rightly) keeps a lock past the moment a case
/// expects it to lapse. The election timeout is therefore generous for loopback, so
/// a busy CI machine does not call elections while the leader is healthy.
struct TestCluster {
    runtime: tokio::runtime::Runtime,
    config: ClusterConfig,
    nodes: Vec<Option<LockdNode>>,
    service: BlockingLockdClient,
    _dir: tempfile::TempDir,
    /// One cluster at a time, also under plain `cargo test` (which runs a binary's
    /// tests in parallel): two cores cannot host several without stretching timeouts.
    _alone: std::sync::MutexGuard<'static, ()>,
}

fn config_text(dir: &Path) -> String {
    let ports = megastore_e2e::free_ports(5);
    let mut free = ports.into_iter();
    let mut free_port = move || free.next().unwrap();
    let mut text = format!(
        "[cluster]\nname = \"lockd-test\"\nsites = [\"A\", \"B\", \"C\"]\n\n\
         [timeouts]\nlock_lease_ms = 2000\nelection_timeout_ms = 700\nheartbeat_ms = 100\nrpc_ms = 500\n\n\
         [[replicas]]\nname = \"a\"\nid = 1\nsite = \"A\"\nkind = \"full\"\n\
         address = \"127.0.0.1:{}\"\ncoordinator_address = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n",
        free_port(),
        free_port(),
        dir.join("replica-a").display()
    );
    for (i, site) in ["A", "B", "C"].iter().enumerate() {
        text += &format!(
            "\n[[lockd]]\nname = \"lock-{i}\"\nid = {}\nsite = \"{site}\"\naddress = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n",
            i + 1,
            free_port(),
            dir.join(format!("lock-{i}")).display()
        );
    }
    text
}

impl TestCluster {
    fn start() -> Self {
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let config = ClusterConfig::parse(&config_text(dir.path()), "test").unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = {
            let _inside = runtime.enter();
            LockdClient::new(&config).unwrap()
        };
        let service = BlockingLockdClient::new(client, runtime.handle().clone());
        let mut cluster = Self {
            _alone: alone,
            runtime,
            config,
            nodes: vec![None, None, None],
            service,
            _dir: dir,
        };
        for i in 0..3 {
            cluster.start_node(i);
        }
        cluster.wait_for_leader();
        cluster
    }

    fn start_node(&mut self, i: usize) {
        let name = format!("lock-{i}");
        let node = self
            .runtime
            .block_on(LockdNode::start(&self.config, &name))
            .unwrap();
        self.nodes[i] = Some(node);
    }

    fn stop_node(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            self.runtime.block_on(node.shutdown());
        }
    }

    fn leader(&self) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.as_ref().is_some_and(LockdNode::is_leader))
    }

    fn wait_for_leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(i) = self.leader() {
                return i;
            }
            assert!(Instant::now() < deadline, "no lockd leader within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop_node(i);
        }
    }
}

impl LockHarness for TestCluster {
    type Service = BlockingLockdClient;

    fn service(&self) -> &BlockingLockdClient {
        &self.service
    }

    fn advance(&mut self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

mod conformance {
    use super::TestCluster;
    megastore_lock::lock_service_conformance_tests!(TestCluster::start());
}

#[test]
fn the_service_survives_the_loss_of_its_leader() {
    let mut cluster = TestCluster::start();
    let s = &cluster.service;
    let (session, lease) = s.open_session("coordinator-a").unwrap();
    let first = s.acquire(session, "coordinator/1").unwrap();
    assert_eq!(s.write_file("catalog", 0, b"v1").unwrap(), 1);

    let leader = cluster.wait_for_leader();
    cluster.stop_node(leader);
    let started = Instant::now();
    // Keep the session alive across the election, as a coordinator would.
    let s = &cluster.service;
    s.keep_alive(session)
        .expect("a new leader serves, and restarted the leases");
    assert!(
        started.elapsed() < lease * 2,
        "failover took {:?}",
        started.elapsed()
    );
    let holder = s.holder("coordinator/1").unwrap().unwrap();
    assert_eq!((holder.session, holder.sequencer), (session, first));
    assert_eq!(s.write_file("catalog", 1, b"v2").unwrap(), 2);
    let (other, _) = s.open_session("coordinator-b").unwrap();
    assert!(matches!(
        s.acquire(other, "coordinator/1"),
        Err(LockError::Held(_))
    ));
    // An application's lock taken after the election fences above every token the old
    // leader handed out.
    let (app, _) = s.grant_lease("app", megastore_lock::LEASE_TTL_MIN).unwrap();
    assert!(s.acquire(app, "app/lock/job").unwrap() > first);
}

/// Writes a file as a careful user does: a write whose outcome is unknown
/// (`Unavailable`: it may have been applied, say across an election) is resolved by
/// reading the file back before it is tried again.
fn write_file_resolving(s: &BlockingLockdClient, name: &str, expected: u64, contents: &[u8]) {
    for _ in 0..20 {
        match s.write_file(name, expected, contents) {
            Ok(version) => {
                assert_eq!(version, expected + 1);
                return;
            }
            Err(LockError::Unavailable) => match s.read_file(name) {
                Ok(Some(file)) if file.version == expected + 1 => {
                    assert_eq!(file.contents, contents);
                    return;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            },
            Err(e) => panic!("writing {name} at version {expected}: {e}"),
        }
    }
    panic!("could not write {name} at version {expected}");
}

#[test]
fn everything_acknowledged_survives_a_restart_of_every_node() {
    let mut cluster = TestCluster::start();
    let s = &cluster.service;
    let (session, lease) = s.open_session("coordinator-a").unwrap();
    let (idle, _) = s.open_session("idle").unwrap();
    let sequencer = s.acquire(session, "coordinator/1").unwrap();
    // An application's leases keep their own ttl through the restart, and their keys.
    let (app, app_ttl) = s.grant_lease("app", lease * 3).unwrap();
    s.put_leased(app, "app/key/member", b"kept").unwrap();
    let (short, short_ttl) = s
        .grant_lease("short", megastore_lock::LEASE_TTL_MIN)
        .unwrap();
    s.put_leased(short, "app/key/gone", b"lapses").unwrap();
    for v in 0..20u64 {
        write_file_resolving(s, "catalog", v, format!("v{}", v + 1).as_bytes());
    }
    for i in 0..3 {
        cluster.stop_node(i);
    }
    for i in 0..3 {
        cluster.start_node(i);
    }
    cluster.wait_for_leader();
    let s = &cluster.service;
    let file = s.read_file("catalog").unwrap().unwrap();
    assert_eq!((file.version, file.contents.as_slice()), (20, &b"v20"[..]));
    // The session outlived the outage: the new leader restarted every lease.
    s.keep_alive(session).unwrap();
    let holder = s.holder("coordinator/1").unwrap().unwrap();
    assert_eq!(holder.sequencer, sequencer);
    // Sequencers keep growing after the restart: they still fence.
    let (other, _) = s.open_session("b").unwrap();
    assert!(s.acquire(other, "other-lock").unwrap() > sequencer);
    // Leases run on the new leader's clock: a session nobody keeps alive still lapses
    // one lease later (restarted processes read a clock that starts again from zero).
    std::thread::sleep(lease + lease / 4);
    assert_eq!(s.keep_alive(idle), Err(LockError::SessionExpired(idle)));
    assert!(short_ttl < lease);
    assert_eq!(s.keep_alive(short), Err(LockError::SessionExpired(short)));
    assert_eq!(
        s.keep_alive(app).unwrap(),
        app_ttl,
        "renewed by its own ttl"
    );
    let names: Vec<_> = s
        .list_leased("app/")
        .unwrap()
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(
        names,
        ["app/key/member"],
        "the short lease's key went with it"
    );
}

#[test]
fn a_data_directory_stamped_for_another_node_is_refused() {
    let mut cluster = TestCluster::start();
    cluster.stop_node(1);
    let mut config = cluster.config.clone();
    config.lockd[1].data_dir = config.lockd[0].data_dir.clone();
    cluster.stop_node(0);
    let refused = cluster
        .runtime
        .block_on(LockdNode::start(&config, "lock-1"));
    match refused {
        Err(e @ LockdError::WrongDataDir { .. }) => {
            assert!(e.to_string().contains("lockd id 1"), "{e}");
        }
        Err(e) => panic!("expected a refused directory, got {e}"),
        Ok(_) => panic!("a node started on another node's directory"),
    }
    let unknown = cluster
        .runtime
        .block_on(LockdNode::start(&config, "lock-9"));
    assert!(matches!(unknown, Err(LockdError::UnknownNode { .. })));
}

#[test]
fn a_resent_command_is_applied_once() {
    use megastore_lock::{LockCommand, LockReply, LockRequest};
    let cluster = TestCluster::start();
    let client = {
        let _inside = cluster.runtime.enter();
        LockdClient::new(&cluster.config).unwrap()
    };
    let write = |id: u64, expected: u64| LockRequest {
        id,
        command: LockCommand::WriteFile {
            name: "catalog".into(),
            expected,
            contents: b"v1".to_vec(),
        },
    };
    let at_leader = |request: LockRequest| {
        cluster.runtime.block_on(async {
            for node in cluster.config.lockd_ids() {
                if let Some(response) = client.send(node, request.clone()).await
                    && response.result != Err(LockError::NotLeader)
                {
                    return response.result;
                }
            }
            panic!("no leader answered");
        })
    };
    assert_eq!(
        at_leader(write(41, 0)),
        Ok(LockReply::Written { version: 1 })
    );
    // The same request again (a resend after a lost answer): the first result, and
    // the file is not written twice.
    assert_eq!(
        at_leader(write(41, 0)),
        Ok(LockReply::Written { version: 1 })
    );
    // A new request with the same content is a new write, refused by its version.
    assert_eq!(
        at_leader(write(42, 0)),
        Err(LockError::VersionMismatch {
            expected: 0,
            current: 1
        })
    );
    assert_eq!(
        cluster
            .service
            .read_file("catalog")
            .unwrap()
            .unwrap()
            .version,
        1
    );
}

/// A file read is answered without a log entry (after a read-index round), and still
/// sees every write acknowledged before it began: a reader checks that against a
/// writer's acknowledged versions while the leader is stopped between them.
#[test]
fn file_reads_add_no_log_entries_and_see_every_acknowledged_write_across_a_leader_loss() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const NAME: &str = "placement/ranges";
    const WRITES: u64 = 60;
    let mut cluster = TestCluster::start();
    write_file_resolving(&cluster.service, NAME, 0, b"1");
    let leader = cluster.wait_for_leader();
    let last_index = |cluster: &TestCluster, node: usize| {
        let node = cluster.nodes[node].as_ref().expect("running");
        node.raft().metrics().borrow().last_log_index
    };
    let before = last_index(&cluster, leader);
    for _ in 0..50 {
        let file = cluster.service.read_file(NAME).unwrap().expect("written");
        assert_eq!((file.version, file.contents.as_slice()), (1, &b"1"[..]));
    }
    assert_eq!(
        last_index(&cluster, leader),
        before,
        "50 file reads appended log entries"
    );

    let client = || {
        let _inside = cluster.runtime.enter();
        let client = LockdClient::new(&cluster.config).unwrap();
        BlockingLockdClient::new(client, cluster.runtime.handle().clone())
    };
    let (writer, reader) = (client(), client());
    let acked = Arc::new(AtomicU64::new(1));
    let done = Arc::new(AtomicBool::new(false));
    let writing = {
        let (acked, done) = (Arc::clone(&acked), Arc::clone(&done));
        std::thread::spawn(move || {
            for version in 1..WRITES {
                let contents = (version + 1).to_string();
                write_file_resolving(&writer, NAME, version, contents.as_bytes());
                acked.store(version + 1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let reading = {
        let (acked, done) = (Arc::clone(&acked), Arc::clone(&done));
        std::thread::spawn(move || {
            let (mut checked, mut last) = (0u64, 0u64);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                let floor = acked.load(Ordering::SeqCst);
                match reader.read_file(NAME) {
                    Ok(Some(file)) => {
                        assert!(
                            file.version >= floor.max(last),
                            "read version {} after {floor} was acknowledged and {last} read",
                            file.version
                        );
                        assert_eq!(file.contents, file.version.to_string().as_bytes());
                        (checked, last) = (checked + 1, file.version);
                    }
                    Ok(None) => panic!("{NAME} vanished"),
                    Err(LockError::NotLeader | LockError::Unavailable) => {}
                    Err(e) => panic!("reading {NAME}: {e}"),
                }
            }
            checked
        })
    };
    // Stop the leader a third of the way through (or once the writer is gone: its
    // join below reports why).
    while acked.load(Ordering::SeqCst) < WRITES / 3 && !writing.is_finished() {
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster.stop_node(leader);
    writing.join().expect("the writer");
    let checked = reading.join().expect("the reader");
    assert!(checked >= 20, "only {checked} reads checked");
    let file = cluster.service.read_file(NAME).unwrap().expect("written");
    assert_eq!(file.version, WRITES);
}

/// A leader cut off from its followers does not answer a file read from its applied
/// state: the read-index round needs a majority, and without one the read is refused
/// (a new leader elsewhere could have acknowledged a newer version meanwhile).
#[test]
fn a_leader_without_a_majority_answers_no_file_read() {
    use megastore_lock::{LockCommand, LockRequest};
    let mut cluster = TestCluster::start();
    write_file_resolving(&cluster.service, "placement/ranges", 0, b"1");
    let leader = cluster.wait_for_leader();
    for follower in (0..3).filter(|&i| i != leader) {
        cluster.stop_node(follower);
    }
    let client = {
        let _inside = cluster.runtime.enter();
        LockdClient::new(&cluster.config).unwrap()
    };
    let node = cluster.config.lockd_ids()[leader];
    let read = LockRequest {
        id: 7,
        command: LockCommand::ReadFile {
            name: "placement/ranges".into(),
        },
    };
    let answer = cluster
        .runtime
        .block_on(client.send(node, read))
        .map(|response| response.result);
    assert!(
        !matches!(answer, Some(Ok(_))),
        "a leader without a majority answered a read: {answer:?}"
    );
}
