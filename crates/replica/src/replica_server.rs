//! `megastore replica`: one replica on its RocksDB directory, serving `Replication`
//! (`replication_service.rs` turns its calls into events).
//!
//! ```text
//!   gRPC calls ─┐                        ┌─► RocksDB (persists buffered; one WAL sync per batch)
//!   replies  ───┼─► events ─► driver ────┼─► replies to waiting calls (after the sync)
//!   timer ──────┘   (batch)   thread     └─► requests to peers (tokio tasks; answers come back as events)
//! ```
//!
//! The driver thread owns the `Replica` state machine and the store: it takes every
//! event that is waiting (a batch), steps the machine on each, writes what they persist
//! without syncing, syncs the WAL once, and only then lets their replies and requests
//! leave — group commit, with "reply only after the state it depends on is durable"
//! kept for every reply in the batch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use megastore_config::{ClusterConfig, resolve_address};
use megastore_paxos::{
    Batch, FailedInstall, Message, Replica, ReplicaConfig, ReplicaInput, ReplicaReply,
    ReplicaRequest,
};
use megastore_placement::ServerPlacement;
use megastore_rowstore::RowRead;
use megastore_rowstore_rocksdb::RocksStore;
use megastore_rpc::Transport;
use megastore_rpc::pb::replication::replication_server::ReplicationServer;
use megastore_types::{ClientId, EgId, NodeId, ReplicaId, Time};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::ProcessError;
use crate::admin::AdminService;
use crate::clock::Clock;
use crate::gateway::Gateway;
use crate::moves_driver::MoveEvent;
use crate::placement_follower;
use crate::range_activity::RangeActivity;
use crate::registry;
use crate::replication_service::ReplicationService;
use crate::settings::sweep_config;
use crate::stamp::check_or_stamp;
use megastore_client::Client;
use megastore_client::status::RangeApplied;
use megastore_metrics::{MetricsServer, Registry, ReplicaMetrics};
use megastore_rpc::Peers;
use megastore_rpc::pb::admin::admin_server::AdminServer;
use megastore_rpc::pb::client::megastore_server::MegastoreServer;
use std::sync::atomic::AtomicU64;

/// The most events one batch takes (and so shares one WAL sync).
const BATCH_MAX: usize = 256;

pub(crate) enum Event {
    /// A request from a client or another replica's sweep.
    Call {
        request: ReplicaRequest,
        reply: oneshot::Sender<ReplicaReply>,
    },
    /// The answer to a request this replica sent.
    Answer {
        from: NodeId,
        message: Message,
    },
    /// Take a consistent copy of the store into `into` (after the current batch is
    /// synced, so it holds whole batches).
    Checkpoint {
        into: std::path::PathBuf,
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// How far behind what it has heard of the replica is, now.
    Lag {
        reply: oneshot::Sender<megastore_paxos::ReplicaLag>,
    },
    /// A newer placement read from lockd.
    Placement(megastore_placement::Placement),
    /// The ranges it holds and the entries it applied in each, with the version of
    /// the placement it judges by.
    Ranges {
        reply: oneshot::Sender<(u64, Vec<RangeApplied>)>,
    },
    /// Freeze `range` for move `move_id` away from this server, then answer (after
    /// the sync) whether it is frozen for it.
    Freeze {
        range: megastore_placement::RangeId,
        move_id: megastore_placement::Version,
        reply: oneshot::Sender<bool>,
    },
    /// Run the voter catch-up pass over `range` for its voter change at `changed_at`
    /// (or wait for the one running for it), and answer when it ends.
    CatchUpVoters {
        range: megastore_placement::RangeId,
        changed_at: megastore_placement::Version,
        reply: oneshot::Sender<
            Result<megastore_paxos::VoterPassHeld, megastore_paxos::VoterPassRefused>,
        >,
    },
    /// A move's copy step, carried out after the batch before it is synced.
    Move(MoveEvent),
    /// The registered groups within `range`, in order, at most `limit`.
    ListGroups {
        range: megastore_rowstore::KeyRange,
        limit: usize,
        reply: oneshot::Sender<Vec<Vec<u8>>>,
    },
    Stop,
}

/// A running replica process.
pub struct ReplicaProcess {
    events: mpsc::Sender<Event>,
    driver: Option<std::thread::JoinHandle<()>>,
    stop_serving: Option<tokio::sync::watch::Sender<bool>>,
    /// The servers: the replica's address, and its admin address if it has one.
    served: Vec<tokio::task::JoinHandle<()>>,
    metrics_server: Option<MetricsServer>,
    rejoining: bool,
    /// The task polling lockd for newer placements.
    following: tokio::task::JoinHandle<()>,
}

impl ReplicaProcess {
    /// Starts the replica called `name`: checks its directory's stamp (rejoining when
    /// it lost its store), opens the store, and serves at its address.
    pub async fn start(config: &ClusterConfig, name: &str) -> Result<Self, ProcessError> {
        let server = config
            .named_server_process(name)
            .map_err(ProcessError::UnknownName)?;
        let me = &server.process;
        let id = ReplicaId(me.id);
        let member = placement_follower::Member::of(&server);
        let topology = config
            .topology()
            .map_err(|e| ProcessError::Config(e.to_string()))?;
        let address = resolve_address(&me.address).map_err(ProcessError::Config)?;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|e| ProcessError::Bind(me.address.clone(), e.to_string()))?;
        // Administration on an address of its own, if it has one (localhost, say).
        let admin_listener = match &me.admin_address {
            Some(admin_address) => {
                let at = resolve_address(admin_address).map_err(ProcessError::Config)?;
                Some(
                    TcpListener::bind(at)
                        .await
                        .map_err(|e| ProcessError::Bind(admin_address.clone(), e.to_string()))?,
                )
            }
            None => None,
        };
        let store = RocksStore::open(&me.data_dir)
            .map_err(|e| ProcessError::Store(format!("replica {name}: {e}")))?;
        crate::admin::remove_scratch(&me.data_dir);
        registry::check_layout(&store).map_err(|e| {
            ProcessError::Config(format!(
                "replica {name}: data directory {}: {e}",
                me.data_dir.display()
            ))
        })?;
        let open_index_kept = registry::open_index_kept(&store)
            .map_err(|e| ProcessError::Store(format!("replica {name}: {e}")))?;
        let peers = Peers::at_site(config, &me.site).map_err(ProcessError::Config)?;
        let rejoining = check_or_stamp(config, member, &me.data_dir, peers.lockd()).await?;
        if rejoining {
            tracing::warn!(replica = %name, "store lost since this replica last served: rejoining (no vote per group until caught up)");
        }
        let placement = server_placement(&store, member, peers.lockd(), &topology).await?;
        let known_placement = placement.view().version();
        let core = Replica::new(ReplicaConfig {
            id,
            topology: topology.clone(),
            bugs: megastore_paxos::ProtocolBugs::NONE,
            sweep: Some(sweep_config(config, id, topology.clone())),
            rejoining,
            cache_groups: Some(me.cache_groups()),
        })
        .placed(placement);

        let metrics = ReplicaMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let delivery_metrics = metrics.clone();
        let (events_tx, events) = mpsc::channel();
        // A full replica delivers the queue messages of the groups it applies, and
        // settles the cross-group transactions prepared there once their own clients
        // had time to.
        let turn = crate::group_work::turn(config, id);
        let (outboxes, outboxes_rx) = tokio::sync::mpsc::unbounded_channel();
        let (prepared, prepared_rx) = tokio::sync::mpsc::unbounded_channel();
        let (decided, decided_rx) = tokio::sync::mpsc::unbounded_channel();
        let store = Arc::new(store);
        let sizes =
            crate::range_sizes::RangeSizes::start(Arc::clone(&store), metrics.clone(), name)
                .map_err(|e| ProcessError::Config(format!("cannot start the sizes thread: {e}")))?;
        let driver = Driver {
            outboxes: turn.is_some().then_some(outboxes),
            prepared: turn.is_some().then_some(prepared),
            decided: turn.is_some().then_some(decided),
            metrics,
            core,
            store,
            sizes,
            clock: Clock::start(),
            peers,
            runtime: tokio::runtime::Handle::current(),
            events: events_tx.clone(),
            waiting: BTreeMap::new(),
            next_caller: 0,
            pass_waiters: Vec::new(),
            install_warned: BTreeMap::new(),
            wake: None,
            evicted_counted: 0,
            open_index_kept,
            activity: RangeActivity::new(std::time::Instant::now()),
            // Measured at the first tick.
            lag_measured: std::time::Instant::now()
                .checked_sub(LAG_EVERY)
                .unwrap_or_else(std::time::Instant::now),
        };
        let driver = std::thread::Builder::new()
            .name(format!("replica-{name}"))
            .spawn(move || driver.run(&events))
            .map_err(|e| ProcessError::Config(format!("cannot start the replica thread: {e}")))?;
        let placement_events = events_tx.clone();
        let topology_for_moves = topology.clone();
        let following = placement_follower::follow(
            megastore_rpc::LockdClient::new(config).map_err(ProcessError::Config)?,
            topology,
            known_placement,
            Some(member),
            move |placement| match placement_events.send(Event::Placement(placement)) {
                Ok(()) => placement_follower::Fed::Taken,
                Err(_) => placement_follower::Fed::Gone,
            },
        );

        // The public API: a client library at this replica's site, on behalf of
        // callers in any language.
        let gateway = Client::connect_as_relay(config, &me.site)
            .await
            .map_err(|e| ProcessError::Lock(format!("starting the public API: {e}")))?;
        gateway.metrics().register(&mut registry);
        if let Some(turn) = turn {
            tokio::spawn(crate::group_work::deliver(
                gateway.clone(),
                delivery_metrics.clone(),
                turn,
                outboxes_rx,
            ));
            let prepared_timeout = megastore_client::proposer_timeouts(config).prepared;
            tokio::spawn(crate::group_work::settle(
                gateway.clone(),
                delivery_metrics.clone(),
                prepared_timeout + turn,
                prepared_timeout,
                prepared_rx,
            ));
            let retention = config.timeouts.decision_retention();
            tokio::spawn(crate::group_work::collect(
                gateway.clone(),
                delivery_metrics.clone(),
                retention + turn,
                retention,
                decided_rx,
            ));
        }
        let metrics_server = match &me.metrics_address {
            Some(address) => Some(
                MetricsServer::start(address, registry, None, config.tls.as_ref())
                    .await
                    .map_err(|e| ProcessError::Config(e.to_string()))?,
            ),
            None => None,
        };
        let lockd = megastore_rpc::LockdClient::new(config).map_err(ProcessError::Config)?;
        let operator = megastore_rpc::OperatorAuth::from_config(config, &format!("replica {name}"))
            .map_err(ProcessError::Config)?;
        let access = crate::gateway_access::AccessControl::start(
            config,
            operator.clone(),
            megastore_rpc::LockdClient::new(config).map_err(ProcessError::Config)?,
        );
        let admin = AdminServer::new(AdminService {
            events: events_tx.clone(),
            gateway: gateway.clone(),
            data_dir: me.data_dir.clone(),
            next: AtomicU64::new(0),
            operator,
            moves: Arc::new(crate::admin_moves::MoveContext {
                config: Arc::new(config.clone()),
                lockd: megastore_rpc::LockdClient::new(config).map_err(ProcessError::Config)?,
                topology: topology_for_moves,
            }),
        })
        .max_decoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX)
        .max_encoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX);
        // The public API takes what the library can commit: one message holds the
        // largest transaction (documented in docs/client-api.md, "Limits").
        let relay = gateway.clone();
        let gateway = MegastoreServer::new(Gateway::new(gateway, lockd, &config.gateway, access))
            .max_decoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX)
            .max_encoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX);

        let (stop_serving, stopped) = tokio::sync::watch::channel(false);
        let service = ReplicationServer::new(ReplicationService {
            events: events_tx.clone(),
            metrics: delivery_metrics.clone(),
            relay,
            stopped: stopped.clone(),
        })
        .max_decoding_message_size(megastore_types::limits::MESSAGE_BYTES_MAX)
        // A snapshot reply carries a whole group.
        .max_encoding_message_size(megastore_types::limits::REPLICATION_REPLY_BYTES_MAX);
        // The protocol is for cluster members: a user's certificate reaches the public
        // API only.
        let service = tonic::service::interceptor::InterceptedService::new(
            service,
            megastore_rpc::members_only,
        );
        let mut server = Transport::from_config(config)
            .and_then(|t| t.server())
            .map_err(|e| ProcessError::Config(e.to_string()))?;
        let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        let mut served = Vec::new();
        let router = server.add_service(service).add_service(gateway);
        let router = match admin_listener {
            Some(admin_listener) => {
                let mut admin_server = Transport::from_config(config)
                    .and_then(|t| t.server())
                    .map_err(|e| ProcessError::Config(e.to_string()))?;
                let stopped = stopped.clone();
                served.push(tokio::spawn(async move {
                    let result = admin_server
                        .add_service(admin)
                        .serve_with_incoming_shutdown(
                            Transport::incoming(admin_listener),
                            until_stopped(stopped),
                        )
                        .await;
                    if let Err(e) = result {
                        tracing::error!("replica admin server failed: {e}");
                    }
                }));
                router
            }
            None => router.add_service(admin),
        };
        served.push(tokio::spawn(async move {
            let result = router
                .serve_with_incoming_shutdown(Transport::incoming(listener), until_stopped(stopped))
                .await;
            if let Err(e) = result {
                tracing::error!("replica server failed: {e}");
            }
        }));
        Ok(Self {
            events: events_tx,
            driver: Some(driver),
            stop_serving: Some(stop_serving),
            served,
            metrics_server,
            rejoining,
            following,
        })
    }

    /// Whether it started as a rejoining replica (its store was lost).
    pub fn rejoining(&self) -> bool {
        self.rejoining
    }

    /// Stops serving, then stops the driver (closing the store).
    pub async fn shutdown(mut self) {
        self.following.abort();
        if let Some(stop) = self.stop_serving.take() {
            let _ = stop.send(true);
        }
        for served in self.served.drain(..) {
            let _ = served.await;
        }
        if let Some(metrics) = self.metrics_server.take() {
            metrics.shutdown().await;
        }
        let _ = self.events.send(Event::Stop);
        if let Some(driver) = self.driver.take() {
            let _ = tokio::task::spawn_blocking(move || driver.join()).await;
        }
    }
}

/// Owns the state machine and the store.
/// An operator waiting for the voter catch-up pass over a range for one change.
type PassWaiter = (
    megastore_placement::RangeId,
    megastore_placement::Version,
    oneshot::Sender<Result<megastore_paxos::VoterPassHeld, megastore_paxos::VoterPassRefused>>,
);

/// How often a failed snapshot install of one group is logged at most.
const INSTALL_WARN_EVERY: Duration = Duration::from_secs(60);
/// Groups whose failed installs are logged within one [`INSTALL_WARN_EVERY`] at most
/// (the metric counts every failure).
const INSTALL_WARNED_MAX: usize = 64;

struct Driver {
    metrics: ReplicaMetrics,
    core: Replica,
    store: Arc<RocksStore>,
    clock: Clock,
    peers: Arc<Peers>,
    runtime: tokio::runtime::Handle,
    events: mpsc::Sender<Event>,
    /// Calls waiting for their reply, by the caller id they were given.
    waiting: BTreeMap<u32, oneshot::Sender<ReplicaReply>>,
    next_caller: u32,
    /// Operators waiting for a voter catch-up pass, by its range and change.
    pass_waiters: Vec<PassWaiter>,
    /// When a failed snapshot install of each group was last logged.
    install_warned: BTreeMap<EgId, std::time::Instant>,
    wake: Option<Time>,
    /// When the lag and cache gauges were last updated.
    lag_measured: std::time::Instant,
    /// The core's evictions already added to the metric.
    evicted_counted: u64,
    /// The store lists every group with work left in the open index.
    open_index_kept: bool,
    /// The entries applied per range.
    activity: RangeActivity,
    /// The bytes each range held takes, measured in the background.
    sizes: crate::range_sizes::RangeSizes,
    /// Groups with queue messages to deliver, for a full replica's delivery task.
    outboxes: Option<tokio::sync::mpsc::UnboundedSender<EgId>>,
    /// Groups with prepared cross-group transactions, for a full replica's settling
    /// task.
    prepared: Option<tokio::sync::mpsc::UnboundedSender<EgId>>,
    /// Coordinator groups with cross-group decisions, for a full replica's collection
    /// of old ones.
    decided: Option<tokio::sync::mpsc::UnboundedSender<EgId>>,
}

/// The placement the replica judges by at start: the one it persisted when it last
/// judged by one (never an older one: *placement-never-goes-back*), else the one lockd
/// holds now — which names this replica once it joined: a replica new to the
/// placement adds itself first ([`placement_follower::join`]). Its freezes come with
/// it.
async fn server_placement(
    store: &RocksStore,
    member: placement_follower::Member,
    lockd: &megastore_rpc::LockdClient,
    topology: &megastore_types::Topology,
) -> Result<ServerPlacement, ProcessError> {
    let bugs = megastore_placement::PlacementBugs::NONE;
    let stored = megastore_paxos::load_server_placement(store, member.server, bugs)
        .map_err(|e| ProcessError::Store(format!("server {}: {e}", member.server.0)))?;
    if let Some(placement) = stored {
        return Ok(placement);
    }
    let view = placement_follower::join(lockd, topology, member)
        .await
        .map_err(ProcessError::Lock)?;
    Ok(ServerPlacement::new(member.server, view, BTreeMap::new(), bugs).0)
}

/// The registry's groups after `after`, a page at a time (a replica that cannot read
/// its registry cannot serve: it stops).
fn registered_page(store: &RocksStore, after: Option<&EgId>) -> Vec<EgId> {
    const PAGE: usize = 1024;
    megastore_paxos::list_groups(store, after, PAGE).unwrap_or_else(|e| {
        tracing::error!("reading the group registry failed: {e}; stopping the replica");
        std::process::exit(70);
    })
}

/// The thread looking for pending queue and 2PC work: told to stop, and joined, when
/// dropped.
struct PendingSearch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PendingSearch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A task that takes groups, and the rows of a group that give it work.
type PendingTask = (
    Option<tokio::sync::mpsc::UnboundedSender<EgId>>,
    fn(&EgId) -> megastore_rowstore::KeyRange,
);

/// Sends each registered group with a row in a task's range to that task.
fn find_pending_work(
    store: &RocksStore,
    tasks: &[PendingTask],
    stop: &std::sync::atomic::AtomicBool,
) {
    /// The pause between pages of groups (each page is up to three short scans per
    /// group): a million groups take some tens of seconds, beside serving.
    const PAUSE: Duration = Duration::from_millis(5);
    let first = megastore_rowstore::ScanOptions {
        limit: Some(1),
        ..Default::default()
    };
    let mut after = None;
    loop {
        let page = registered_page(store, after.as_ref());
        let Some(last) = page.last().cloned() else {
            return;
        };
        for eg in page {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            for (task, range) in tasks {
                let Some(task) = task else { continue };
                match store.scan(&range(&eg), megastore_rowstore::LATEST, &first) {
                    Ok(rows) if !rows.is_empty() => {
                        if task.send(eg.clone()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(group = %eg, "cannot read its pending work: {e}"),
                }
            }
        }
        after = Some(last);
        std::thread::sleep(PAUSE);
    }
}

/// How often the lag gauges are updated (each update looks at every loaded group).
const LAG_EVERY: Duration = Duration::from_secs(1);

/// The caller id of the driver's own requests (their replies are dropped); callers
/// are numbered below it.
const DRIVER: u32 = megastore_paxos::DRIVER_CLIENT.0;

impl Driver {
    fn run(mut self, events: &mpsc::Receiver<Event>) {
        let mut batch = Batch::new();
        // The core loads what needs looking after itself (the groups the open index
        // lists) at its first step. A store written by a version without the index
        // gets every group loaded once, which lists those with work left.
        if !self.open_index_kept {
            tracing::info!("building the open index: loading every group once");
            let mut after = None;
            loop {
                let page = registered_page(&self.store, after.as_ref());
                let Some(last) = page.last().cloned() else {
                    break;
                };
                for eg in page {
                    self.step(megastore_paxos::load_group(eg), &mut batch);
                }
                self.release(std::mem::take(&mut batch));
                after = Some(last);
            }
            if let Err(e) = registry::mark_open_index_kept(&*self.store) {
                tracing::error!("recording the open index failed: {e}; stopping the replica");
                std::process::exit(70);
            }
        }
        self.step(ReplicaInput::Tick, &mut batch);
        self.release(batch);
        self.placement_measured();
        // Stopped and joined before the store closes: a thread still inside RocksDB when
        // the process exits can abort it.
        let _search = self.find_outboxes();
        loop {
            let timeout = self
                .wake
                .map_or(Duration::from_secs(1), |w| w.since(self.clock.now()));
            let first = match events.recv_timeout(timeout) {
                Ok(event) => Some(event),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = Batch::new();
            let mut stop = false;
            let mut checkpoints = Vec::new();
            let mut moves = Vec::new();
            let mut handled = 0;
            for event in first.into_iter().chain(events.try_iter().take(BATCH_MAX)) {
                handled += 1;
                match event {
                    Event::Stop => stop = true,
                    Event::Checkpoint { into, reply } => checkpoints.push((into, reply)),
                    Event::Freeze {
                        range,
                        move_id,
                        reply,
                    } => {
                        self.step(ReplicaInput::Freeze { range, move_id }, &mut batch);
                        moves.push(MoveEvent::Frozen {
                            range,
                            move_id,
                            reply,
                        });
                    }
                    Event::Move(event) => moves.push(event),
                    Event::CatchUpVoters {
                        range,
                        changed_at,
                        reply,
                    } => {
                        let joined = self
                            .pass_waiters
                            .iter()
                            .any(|(r, at, _)| (*r, *at) == (range, changed_at));
                        self.pass_waiters.push((range, changed_at, reply));
                        if !joined {
                            let ask = ReplicaInput::CatchUpVoters { range, changed_at };
                            self.step(ask, &mut batch);
                        }
                    }
                    Event::Lag { reply } => {
                        let _ = reply.send(self.core.lag());
                    }
                    Event::ListGroups {
                        range,
                        limit,
                        reply,
                    } => {
                        // It reads the registry: the groups this batch registered too.
                        self.write_held(&mut batch);
                        let groups =
                            match megastore_paxos::registered_in(&*self.store, &range, limit) {
                                Ok(groups) => groups.into_iter().map(|eg| eg.0).collect(),
                                Err(e) => {
                                    tracing::warn!("cannot read the group registry: {e}");
                                    Vec::new()
                                }
                            };
                        let _ = reply.send(groups);
                    }
                    Event::Call { request, reply } => {
                        self.count(&request);
                        let caller = self.next_caller;
                        self.next_caller = (self.next_caller + 1) % DRIVER;
                        self.waiting.insert(caller, reply);
                        let from = NodeId::Client(ClientId(caller));
                        let message = Message::ReplicaRequest(request);
                        self.step(ReplicaInput::Message { from, message }, &mut batch);
                    }
                    Event::Answer { from, message } => {
                        self.step(ReplicaInput::Message { from, message }, &mut batch);
                    }
                    Event::Placement(placement) => {
                        self.step(ReplicaInput::Placement(placement), &mut batch);
                        self.placement_measured();
                    }
                    Event::Ranges { reply } => {
                        let report = self.core.placement().map_or((0, Vec::new()), |p| {
                            let now = std::time::Instant::now();
                            let me = self.core.info().id;
                            let mut ranges = self.activity.report(p.view(), p.server(), me, now);
                            for range in &mut ranges {
                                range.bytes = self.sizes.bytes(range.range);
                            }
                            (p.view().version().0, ranges)
                        });
                        let _ = reply.send(report);
                    }
                }
            }
            if self.wake.is_some_and(|w| w <= self.clock.now()) {
                self.wake = None;
                self.step(ReplicaInput::Tick, &mut batch);
                // A look at every loaded group: at most once a second, not per tick.
                if self.lag_measured.elapsed() >= LAG_EVERY {
                    self.lag_measured = std::time::Instant::now();
                    let lag = self.core.lag();
                    self.metrics.lag(lag.groups, lag.positions);
                    let evicted = self.core.evictions();
                    self.metrics
                        .group_cache(self.core.loaded_groups(), evicted - self.evicted_counted);
                    self.evicted_counted = evicted;
                }
            }
            if handled > 0 {
                self.metrics.batch(handled);
            }
            self.release(batch);
            for (into, reply) in checkpoints {
                let _ = reply.send(self.store.checkpoint(&into).map_err(|e| e.to_string()));
            }
            for event in moves {
                crate::moves_driver::carry_out(&mut self.core, &self.store, event);
            }
            if stop {
                return;
            }
            // Callers that gave up leave nothing behind.
            self.waiting.retain(|_, reply| !reply.is_closed());
        }
    }

    /// Counts the entries a batch applied under their groups' ranges.
    fn count_applied(&mut self, applied: &BTreeMap<EgId, u64>) {
        let Some(placement) = self.core.placement() else {
            return;
        };
        // Summed per range first: the metric's label is made once per range touched.
        let mut by_range: BTreeMap<megastore_placement::RangeId, u64> = BTreeMap::new();
        for (eg, entries) in applied {
            *by_range
                .entry(placement.view().range_of(&eg.0).id)
                .or_default() += entries;
        }
        let now = std::time::Instant::now();
        for (range, entries) in by_range {
            self.activity.record(range, entries, now);
            self.metrics.range_applied(range.0, entries);
        }
    }

    /// The placement gauges, from the placement the core judges by.
    fn placement_measured(&self) {
        if let Some(placement) = self.core.placement() {
            let view = placement.view();
            let held: Vec<_> =
                placement_follower::ranges_held(view, placement.server(), self.core.info().id)
                    .map(|r| {
                        let keys = megastore_rowstore::KeyRange {
                            start: r.start.clone(),
                            end: r.end.clone(),
                        };
                        (r.id, keys)
                    })
                    .collect();
            self.metrics.placement(view.version().0, held.len());
            self.sizes.hold(held, &self.metrics);
        }
    }

    /// Counts a snapshot install that did not happen, and logs it — once a minute per
    /// group at most, for up to [`INSTALL_WARNED_MAX`] groups at once: a group stuck
    /// behind is asked for again at every sweep.
    fn report_failed_install(&mut self, failed: FailedInstall) {
        self.metrics.install_failed();
        let now = std::time::Instant::now();
        self.install_warned
            .retain(|_, at| now.duration_since(*at) < INSTALL_WARN_EVERY);
        if self.install_warned.len() >= INSTALL_WARNED_MAX
            || self.install_warned.contains_key(&failed.eg)
        {
            return;
        }
        tracing::warn!(
            "group {}: the snapshot asked of replica {} was not installed: {}; the group \
             stays behind here (its snapshot and inconsistent reads serve older state) \
             until an install succeeds, asked again at every sweep",
            failed.eg,
            failed.source.0,
            failed.why
        );
        self.install_warned.insert(failed.eg, now);
    }

    fn count(&self, request: &ReplicaRequest) {
        let kind = match request {
            ReplicaRequest::Prepare { .. } => "prepare",
            ReplicaRequest::Accept { ballot, .. } => {
                self.metrics.accept(ballot.is_zero());
                "accept"
            }
            ReplicaRequest::MarkVisible { .. } => "mark_visible",
            ReplicaRequest::LogState { .. } => "log_state",
            ReplicaRequest::ReadLog { .. } => "read_log",
            ReplicaRequest::AwaitVisible { .. } => "await_visible",
            ReplicaRequest::Read { .. } => "read",
            ReplicaRequest::Snapshot { .. } => "snapshot",
            ReplicaRequest::ScanGlobal { .. } => "scan_global",
            ReplicaRequest::ListGroups { .. } => "list_groups",
        };
        self.metrics.request(kind);
    }

    /// Steps the machine on one input through the shared driver loop: writes go to the
    /// store buffered, messages wait in the batch.
    fn step(&mut self, input: ReplicaInput, batch: &mut Batch) {
        let now = self.clock.now();
        if let Err(e) = self.core.step_into(now, input, &*self.store, batch) {
            // A store that cannot write cannot keep the protocol's promises: stop
            // rather than answer from state that is not durable.
            tracing::error!("the row store failed: {e}; stopping the replica");
            std::process::exit(70);
        }
    }

    /// Writes what the batch holds to the store, before the driver (or a task it
    /// tells) reads the store in the middle of a batch.
    fn write_held(&self, batch: &mut Batch) {
        if let Err(e) = batch.write_held(&*self.store) {
            tracing::error!("the row store failed: {e}; stopping the replica");
            std::process::exit(70);
        }
    }

    /// Hands the delivery task every registered group whose outbox holds messages, the
    /// settling task every one with prepared transactions, and the collecting task
    /// every one with decisions (at start: work left
    /// from before a restart is done too) — from a thread of its own, a page of
    /// groups at a time with a pause between pages, so the replica serves meanwhile.
    fn find_outboxes(&self) -> Option<PendingSearch> {
        let store = Arc::clone(&self.store);
        let tasks = [
            (
                self.outboxes.clone(),
                megastore_paxos::queue::outbox_range as fn(&EgId) -> _,
            ),
            (
                self.prepared.clone(),
                megastore_paxos::two_phase::records_range,
            ),
            (
                self.decided.clone(),
                megastore_paxos::two_phase::decisions_range,
            ),
        ];
        if tasks.iter().all(|(task, _)| task.is_none()) {
            return None;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let found = std::thread::Builder::new()
            .name("pending-work".into())
            .spawn(move || find_pending_work(&store, &tasks, &stopped));
        match found {
            Ok(thread) => Some(PendingSearch {
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                tracing::error!("cannot start looking for pending queue and 2PC work: {e}");
                None
            }
        }
    }

    /// One WAL sync for everything the batch persisted (new groups' registry rows
    /// included), then its messages leave.
    fn release(&mut self, mut batch: Batch) {
        // The delivery and settling tasks read what the batch wrote.
        self.write_held(&mut batch);
        for report in batch.take_voter_passes() {
            let key = (report.range, report.changed_at);
            let (answered, waiting) = std::mem::take(&mut self.pass_waiters)
                .into_iter()
                .partition(|(r, at, _)| (*r, *at) == key);
            self.pass_waiters = waiting;
            for (_, _, reply) in answered {
                let _ = reply.send(report.outcome.clone());
            }
        }
        if let Some(outboxes) = &self.outboxes {
            for eg in batch.outbox_groups() {
                let _ = outboxes.send(eg.clone());
            }
        }
        if let Some(prepared) = &self.prepared {
            for eg in batch.prepared_groups() {
                let _ = prepared.send(eg.clone());
            }
        }
        if let Some(decided) = &self.decided {
            for eg in batch.decided_groups() {
                let _ = decided.send(eg.clone());
            }
        }
        for failed in batch.take_failed_installs() {
            self.report_failed_install(failed);
        }
        let counts = batch.counts();
        self.metrics
            .batch_done(counts.applies, counts.installs, counts.catchup_requests);
        self.count_applied(batch.applied_entries());
        let started = std::time::Instant::now();
        let released = match batch.release(&*self.store) {
            Ok(released) => released,
            Err(e) => {
                tracing::error!("syncing the WAL failed: {e}; stopping the replica");
                std::process::exit(70);
            }
        };
        if released.synced {
            self.metrics.wal_synced(started.elapsed().as_secs_f64());
        }
        if let Some(wake) = released.wake {
            self.wake = Some(wake);
        }
        // Requests about groups go to the servers the core's placement names.
        if let Some(placement) = self.core.placement()
            && placement.view().version().0 > self.peers.routing_version()
        {
            self.peers.route_by(placement.view());
        }
        for (to, message) in released.sends {
            match (to, message) {
                (NodeId::Client(ClientId(caller)), Message::ReplicaReply(reply)) => {
                    if let Some(waiting) = self.waiting.remove(&caller) {
                        let _ = waiting.send(reply);
                    }
                }
                (to, message) => {
                    let peers = Arc::clone(&self.peers);
                    let events = self.events.clone();
                    self.runtime.spawn(async move {
                        if let Some(answer) = peers.request(to, message).await {
                            let _ = events.send(Event::Answer {
                                from: to,
                                message: answer,
                            });
                        }
                    });
                }
            }
        }
    }
}
