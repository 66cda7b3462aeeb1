//! Helpers shared by the tests that drive a cluster through the client library.

use std::time::{Duration, Instant};

use megastore_client::{Client, ClientError};
use megastore_config::ClusterConfig;
use megastore_lock::{LockCommand, LockReply, LockRequest};
use megastore_paxos::{DataQuery, ReadMode, ReadResult};
use megastore_rpc::LockdClient;
use megastore_types::EgId;

pub(crate) fn eg(n: u32) -> EgId {
    megastore_client::group(format!("eg-{n:04}").as_bytes()).unwrap()
}

/// The key `name` of untyped group `eg`: what the client library is given.
pub(crate) fn row(_eg: &EgId, name: &str) -> Vec<u8> {
    name.as_bytes().to_vec()
}

/// The row store's key of key `name` of untyped group `eg`: what a replica's RocksDB
/// holds.
pub(crate) fn stored_row(eg: &EgId, name: &str) -> Vec<u8> {
    megastore_schema::keyspace::untyped_row(&eg.0, name.as_bytes())
}

pub(crate) fn counter_value(row: Option<megastore_rowstore::Row>) -> u64 {
    row.and_then(|r| {
        r.value(b"n")
            .map(|v| String::from_utf8_lossy(v).parse().unwrap())
    })
    .unwrap_or(0)
}

/// The counter `column` of untyped group `group` holds ([`increment`]'s), by a current
/// read through `client`.
pub(crate) async fn current_counter(client: &Client, group: &EgId, column: &str) -> u64 {
    let read = client
        .read(
            group,
            ReadMode::Current,
            DataQuery::Rows(vec![row(group, column)]),
        )
        .await
        .expect("a current read");
    counter_value(read.rows.into_iter().next())
}

/// Connects, retrying while the cluster is still starting.
pub(crate) async fn connect(config: &ClusterConfig, site: &str) -> Client {
    let started = Instant::now();
    loop {
        match Client::connect(config, site).await {
            Ok(client) => return client,
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "cannot connect: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

pub(crate) async fn increment(client: &Client, eg: &EgId, name: &str) -> Result<u64, ClientError> {
    let key = row(eg, name);
    let (value, _) = client
        .transaction(eg, async |txn| {
            let next = counter_value(txn.get(&key).await?) + 1;
            txn.set(&key, b"n", next.to_string().as_bytes())?;
            Ok(next)
        })
        .await?;
    Ok(value)
}

/// A writer at `site` while a test's fault runs: increments the counters named `site`
/// of `groups`, alternately, through a client at `site`, until `stop` (at most 5,000
/// tries, for at most two minutes), counting each acknowledged one in `acked`. Returns
/// per group how many were acknowledged and how many failed (their outcome unknown).
pub(crate) async fn increments_until(
    config: &ClusterConfig,
    site: &str,
    groups: &[EgId; 2],
    stop: &std::sync::atomic::AtomicBool,
    acked: &std::sync::atomic::AtomicU64,
) -> [(u64, u64); 2] {
    use std::sync::atomic::Ordering;
    let client = connect(config, site).await;
    let mut counts = [(0u64, 0u64); 2];
    let started = Instant::now();
    for n in 0..5_000 {
        if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(120) {
            break;
        }
        let i = n % 2;
        match increment(&client, &groups[i], site).await {
            Ok(_) => {
                counts[i].0 += 1;
                acked.fetch_add(1, Ordering::SeqCst);
            }
            Err(_) => counts[i].1 += 1,
        }
    }
    counts
}

/// Every counter of [`increments_until`]'s writers at `sites` holds exactly its
/// acknowledged increments, give or take those of unknown outcome: read currently
/// through `client`.
pub(crate) async fn assert_counted(
    client: &Client,
    sites: &[&str],
    groups: &[EgId; 2],
    outcomes: &[[(u64, u64); 2]],
) {
    for (site, counts) in sites.iter().zip(outcomes) {
        for (group, (ok, failed)) in groups.iter().zip(counts) {
            let value = current_counter(client, group, site).await;
            assert!(
                (*ok..=ok + failed).contains(&value),
                "{group} ({site}): counter {value}, {ok} increments acknowledged, {failed} failed"
            );
        }
    }
}

/// Current reads of `key` until one satisfies `done` (bounded).
pub(crate) async fn current_read_until(
    client: &Client,
    group: &EgId,
    key: &[u8],
    done: impl Fn(&ReadResult) -> bool,
) -> ReadResult {
    let started = Instant::now();
    loop {
        if let Ok(read) = client
            .read(
                group,
                ReadMode::Current,
                DataQuery::Rows(vec![key.to_vec()]),
            )
            .await
            && done(&read)
        {
            return read;
        }
        // Generous: on a loaded 2-core machine a coordinator can take several leases to
        // hold its lock and vouch (CI once missed 15 s while a simulator run shared it).
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no such current read within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates `group` by a first commit (row `created`), so that a load's first
/// transactions do not all race for its first position.
pub(crate) async fn create_group(client: &Client, group: &EgId) {
    client
        .transaction(group, async |txn| {
            txn.set(b"created", b"n", b"1")?;
            Ok(())
        })
        .await
        .expect("a first commit");
}

pub(crate) async fn first_commit(client: &Client, group: &EgId) {
    let started = Instant::now();
    while let Err(e) = increment(client, group, "counter").await {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no first commit: {e}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Which node leads: the one that answers a holder query instead of `NotLeader`.
pub(crate) async fn find_leader(client: &LockdClient, config: &ClusterConfig) -> Option<usize> {
    for (i, id) in config.lockd_ids().into_iter().enumerate() {
        let request = LockRequest {
            id: 7,
            command: LockCommand::Holder {
                lock: "probe".into(),
            },
        };
        if let Some(response) = client.send(id, request).await
            && matches!(response.result, Ok(LockReply::Holder(_)))
        {
            return Some(i);
        }
    }
    None
}

/// What every cluster test starts with: its turn (one cluster at a time), a directory,
/// the default topology running as processes, its config, and a runtime for clients.
pub(crate) fn start_cluster() -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    megastore_e2e::LocalCluster,
    ClusterConfig,
    tokio::runtime::Runtime,
) {
    start_cluster_with("")
}

/// Config lines joining every two of the test cluster's sites by an emulated round
/// trip of `rtt_ms` (`[[wan]]`), for [`start_cluster_with`].
pub(crate) fn wan_between_all_sites(rtt_ms: u64) -> String {
    let sites = ["A", "B", "C", "D"];
    let mut wan = String::new();
    for (i, a) in sites.iter().enumerate() {
        for b in &sites[i + 1..] {
            wan += &format!("\n[[wan]]\nbetween = [\"{a}\", \"{b}\"]\nrtt_ms = {rtt_ms}\n");
        }
    }
    wan
}

/// [`start_cluster`] with `toml` added to the config file (a `[history]` section, say).
pub(crate) fn start_cluster_with(
    toml: &str,
) -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    megastore_e2e::LocalCluster,
    ClusterConfig,
    tokio::runtime::Runtime,
) {
    start_cluster_edited(|text| format!("{text}{toml}"))
}

/// [`start_cluster`] with its config file's text replaced by `edit` of it.
pub(crate) fn start_cluster_edited(
    edit: impl FnOnce(&str) -> String,
) -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    megastore_e2e::LocalCluster,
    ClusterConfig,
    tokio::runtime::Runtime,
) {
    let alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cluster = megastore_e2e::LocalCluster::start_configured(dir.path(), |path| {
        let text = std::fs::read_to_string(path).expect("the config file");
        std::fs::write(path, edit(&text)).expect("write the config file");
    });
    let config = ClusterConfig::load(&cluster.config_path).expect("the cluster's config");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    (alone, dir, cluster, config, runtime)
}

/// Replica process `process` started rejoining (its store was lost or restored), and its
/// directory `data` is stamped so.
pub(crate) fn assert_rejoined(
    cluster: &mut megastore_e2e::LocalCluster,
    process: &str,
    data: &std::path::Path,
) {
    let log = cluster.process(process).log();
    assert!(
        log.contains("rejoining=true"),
        "{process} did not rejoin:\n{log}"
    );
    let stamp = std::fs::read_to_string(data.join("MEGASTORE_STAMP")).unwrap();
    assert!(stamp.contains("\"rejoining\": true"), "{stamp}");
}

/// The address (host:port) of replica `name`'s public API in `config`.
pub(crate) fn replica_address(config: &ClusterConfig, name: &str) -> String {
    config
        .replicas
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no replica {name}"))
        .address
        .clone()
}

/// A client of the public gRPC API at `address` (host:port): it connects on first use,
/// so calls fail until the replica is up and reconnect after it restarts; messages up
/// to the API's limit.
pub(crate) fn api_at(
    address: &str,
) -> megastore_rpc::pb::client::megastore_client::MegastoreClient<tonic::transport::Channel> {
    let endpoint = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .expect("a valid address");
    megastore_rpc::pb::client::megastore_client::MegastoreClient::new(endpoint.connect_lazy())
        .max_decoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX)
        .max_encoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX)
}

/// `megastore schema apply` of the repository's schema file `file` (e.g.
/// `schema/photos.msdl`) to the cluster of `config` (a path), run in `dir`; fails the
/// test if it is refused. The catalog the file compiles to, for the typed calls.
pub(crate) fn apply_schema(
    config: &str,
    file: &str,
    dir: &std::path::Path,
) -> megastore_schema::Catalog {
    let path = megastore_e2e::repo_root().join(file);
    let path = path.to_str().expect("a UTF-8 path");
    let applied = megastore_e2e::run_megastore(
        &["schema", "apply", path, "--config", config],
        dir,
        Duration::from_secs(60),
    );
    assert!(applied.status.success(), "{applied:?}");
    let text = std::fs::read_to_string(path).expect("the schema file");
    megastore_schema::compile(file, &text, None).expect("the schema compiles")
}

/// Begins a transaction on the untyped group `name` through the public gRPC API and
/// stages `key`'s `column` = `value`: the transaction's handle, or `None` if a call
/// failed (the replica may be down).
pub(crate) async fn grpc_begin_with_write(
    api: &mut megastore_rpc::pb::client::megastore_client::MegastoreClient<
        tonic::transport::Channel,
    >,
    name: &[u8],
    (key, column, value): (&[u8], &[u8], &[u8]),
) -> Option<u64> {
    use megastore_rpc::pb::client as pb;
    let begun = api
        .begin(pb::BeginRequest {
            eg: name.to_vec(),
            root: None,
            ..Default::default()
        })
        .await
        .ok()?;
    let txn = begun.into_inner().txn;
    let row = pb::RowWrite {
        key: key.to_vec(),
        cells: vec![pb::CellWrite {
            column: column.to_vec(),
            change: Some(pb::cell_write::Change::Set(value.to_vec())),
        }],
    };
    api.write(pb::WriteRequest {
        txn,
        rows: vec![row],
    })
    .await
    .ok()?;
    Some(txn)
}

/// The position a gRPC `Commit` answered committed at, if it committed.
pub(crate) fn grpc_committed(
    response: Result<tonic::Response<megastore_rpc::pb::client::CommitResponse>, tonic::Status>,
) -> Option<u64> {
    match response.ok()?.into_inner().outcome {
        Some(megastore_rpc::pb::client::commit_response::Outcome::Committed(c)) => Some(c.position),
        _ => None,
    }
}

/// Every row of the untyped group `group`, by key, as a current read at the replica
/// whose public API is at `address` shows them.
pub(crate) async fn grpc_current_rows(
    address: &str,
    group: &[u8],
) -> std::collections::BTreeMap<Vec<u8>, megastore_rpc::pb::client::Row> {
    use megastore_rpc::pb::client as pb;
    let read = api_at(address)
        .read(pb::ReadRequest {
            eg: group.to_vec(),
            mode: pb::ReadMode::Current as i32,
            query: Some(pb::RowQuery {
                query: Some(pb::row_query::Query::Range(pb::row_query::Range::default())),
            }),
        })
        .await
        .expect("a current read")
        .into_inner();
    read.rows.into_iter().map(|r| (r.key.clone(), r)).collect()
}

/// Asks `api` whether transaction `id` of the untyped group `group` committed
/// (`Resolve`), until it can tell (within a minute).
pub(crate) async fn grpc_resolve(
    api: &mut megastore_rpc::pb::client::megastore_client::MegastoreClient<
        tonic::transport::Channel,
    >,
    group: &[u8],
    id: megastore_rpc::pb::client::TxnId,
) -> bool {
    use megastore_rpc::pb::client as pb;
    use pb::resolve_response::Outcome;
    let started = Instant::now();
    loop {
        let answer = api
            .resolve(pb::ResolveRequest {
                eg: group.to_vec(),
                root: None,
                id: Some(id),
            })
            .await;
        match answer.map(|r| r.into_inner().outcome) {
            Ok(Some(Outcome::Committed(_))) => return true,
            Ok(Some(Outcome::NotCommitted(_))) => return false,
            other => assert!(
                started.elapsed() < Duration::from_secs(60),
                "transaction {id:?} still unresolved: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `acked` reaches `count` (the transactions a load's tasks acknowledged
/// together), failing the test after `within`.
pub(crate) fn wait_for_acks(
    acked: &std::sync::atomic::AtomicUsize,
    count: usize,
    within: Duration,
) {
    let started = Instant::now();
    while acked.load(std::sync::atomic::Ordering::Relaxed) < count {
        assert!(
            started.elapsed() < within,
            "only {} of {count} transactions acknowledged",
            acked.load(std::sync::atomic::Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
