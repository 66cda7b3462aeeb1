//! `megastore coordinator`: the coordinator of one full replica as its own process.
//!
//! ```text
//!   gRPC Coordinator.Call ──► events ──► Coordinator::step ──► replies (to the waiting call)
//!   lockd responses ───────►                              ──► lock requests (to lockd nodes)
//!   timer ─────────────────►                              ──► next wake-up
//! ```

use std::sync::Arc;
use std::time::Duration;

use megastore_config::{ClusterConfig, resolve_address};
use megastore_coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorConfig, CoordinatorReply, CoordinatorRequest, Input,
    Output, coordinator_lock,
};
use megastore_lock::{LockCommand, LockReply, LockResponse, SessionId};
use megastore_placement::{Placement, ServerId};
use megastore_rpc::LockdClient;
use megastore_rpc::Transport;
use megastore_rpc::pb::coordinator::coordinator_server::CoordinatorServer;
use megastore_types::{ClientId, Epoch, LockNodeId, NodeId, ReplicaId, ReplicaKind, Time};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

use megastore_metrics::{CoordinatorMetrics, MetricsServer, Registry};

use crate::ProcessError;
use crate::clock::Clock;
use crate::coordinator_service::CoordinatorService;
use crate::placement_follower::{self, Fed};

/// The coordinator settings for full replica `replica` of `config`.
pub fn coordinator_config(config: &ClusterConfig, replica: ReplicaId) -> CoordinatorConfig {
    let t = &config.timeouts;
    let lease = t.lock_lease();
    CoordinatorConfig {
        replica,
        lock_nodes: config.lockd_ids(),
        lock_attempt_timeout: t.rpc(),
        keepalive_interval: lease / 4,
        max_clock_drift_ppm: t.max_clock_drift_ppm,
        lease_margin: Duration::from_millis(t.heartbeat_ms),
        retry_delay: Duration::from_millis(t.election_timeout_ms),
        first_request_id: rand::random::<u64>() >> 1,
        valid_max: megastore_coordinator::VALID_TRACKED_MAX,
        invalid_max: megastore_coordinator::INVALID_TRACKED_MAX,
        bugs: CoordinatorBugs::NONE,
    }
}

pub(crate) enum Event {
    Request {
        request: CoordinatorRequest,
        reply: oneshot::Sender<Option<CoordinatorReply>>,
    },
    Lock {
        from: LockNodeId,
        response: LockResponse,
    },
    /// A newer placement read from lockd.
    Placement(Placement),
    /// Whether it has read the placement that began move `move_id`.
    KnowsMove {
        move_id: megastore_placement::Version,
        reply: oneshot::Sender<bool>,
    },
    /// Stop vouching and give the lock back, then end (after at most the grace).
    Stop,
}

/// A running coordinator process.
pub struct CoordinatorProcess {
    epoch: watch::Receiver<Option<Epoch>>,
    events: mpsc::Sender<Event>,
    stop: Option<watch::Sender<bool>>,
    served: Option<tokio::task::JoinHandle<()>>,
    metrics_server: Option<MetricsServer>,
}

impl CoordinatorProcess {
    /// Starts the coordinator of the full replica's server called `name` (a replica's
    /// name is its first server): it serves at the server's `coordinator_address` and
    /// takes the server's lock in lockd.
    pub async fn start(config: &ClusterConfig, name: &str) -> Result<Self, ProcessError> {
        let processes = config.server_processes();
        let full = || {
            processes
                .iter()
                .filter(|p| p.process.kind == ReplicaKind::Full)
        };
        let process = full().find(|p| p.process.name == name).ok_or_else(|| {
            ProcessError::UnknownName(format!(
                "no full replica or server of one is called {name:?} in the config (they are: {})",
                ClusterConfig::names(full().map(|p| p.process.name.as_str()))
            ))
        })?;
        let member = placement_follower::Member::of(process);
        let replica = &process.process;
        let address = replica.coordinator_address.clone().ok_or_else(|| {
            ProcessError::Config(format!("replica {name} has no coordinator_address"))
        })?;
        let listener = TcpListener::bind(resolve_address(&address).map_err(ProcessError::Config)?)
            .await
            .map_err(|e| ProcessError::Bind(address.clone(), e.to_string()))?;
        let lockd = Arc::new(LockdClient::new(config).map_err(ProcessError::Config)?);
        let replica_id = ReplicaId(replica.id);
        let core = Coordinator::new(coordinator_config(config, replica_id));
        let topology = config
            .topology()
            .map_err(|e| ProcessError::Config(e.to_string()))?;
        let following_lockd = LockdClient::new(config).map_err(ProcessError::Config)?;
        let service_lockd = LockdClient::new(config).map_err(ProcessError::Config)?;
        let service_topology = topology.clone();

        let metrics = CoordinatorMetrics::default();
        let metrics_server = match &replica.coordinator_metrics_address {
            Some(address) => {
                let mut registry = Registry::default();
                metrics.register(&mut registry);
                Some(
                    MetricsServer::start(address, registry, None, config.tls.as_ref())
                        .await
                        .map_err(|e| ProcessError::Config(e.to_string()))?,
                )
            }
            None => None,
        };
        let (events_tx, events) = mpsc::channel(1024);
        let events_tx_driver = events_tx.clone();
        let (epoch_tx, epoch) = watch::channel(None);
        let (stop, stopped) = watch::channel(false);
        let stop_grace = config.timeouts.rpc() * 2;
        let placement_events = events_tx.clone();
        // The coordinator vouches by the placement, so it reads one before it answers
        // anything (calls wait in the channel meanwhile), then follows lockd.
        let driver = async move {
            let server = member.server;
            let view = placement_follower::first_placement(&lockd, &topology).await;
            let following = placement_follower::follow(
                following_lockd,
                topology,
                view.version(),
                None,
                move |placement| match placement_events.try_send(Event::Placement(placement)) {
                    Ok(()) => Fed::Taken,
                    Err(mpsc::error::TrySendError::Full(_)) => Fed::Busy,
                    Err(mpsc::error::TrySendError::Closed(_)) => Fed::Gone,
                },
            );
            let driver = Driver {
                metrics,
                core: core.placed(server, view),
                server,
                replica: replica_id,
                clock: Clock::start(),
                lockd,
                events_tx: events_tx_driver,
                epoch: epoch_tx,
                wake: None,
                stop_grace,
            };
            driver.run(events).await;
            following.abort();
        };
        let service = tonic::service::interceptor::InterceptedService::new(
            CoordinatorServer::new(CoordinatorService {
                events: events_tx.clone(),
                lockd: service_lockd,
                topology: service_topology,
                stopped: stopped.clone(),
            }),
            megastore_rpc::members_only,
        );
        let mut server = Transport::from_config(config)
            .and_then(|t| t.server())
            .map_err(|e| ProcessError::Config(e.to_string()))?;
        let served = tokio::spawn(async move {
            let server = server.add_service(service).serve_with_incoming_shutdown(
                Transport::incoming(listener),
                async move {
                    let mut stopped = stopped;
                    let _ = stopped.wait_for(|stop| *stop).await;
                },
            );
            tokio::select! {
                result = server => {
                    if let Err(e) = result {
                        tracing::error!("coordinator server failed: {e}");
                    }
                }
                () = driver => {}
            }
        });
        Ok(Self {
            epoch,
            events: events_tx,
            stop: Some(stop),
            served: Some(served),
            metrics_server,
        })
    }

    /// The epoch it serves in now (`None`: it does not hold its lock).
    pub fn epoch(&self) -> Option<Epoch> {
        *self.epoch.borrow()
    }

    /// Waits until it holds its lock, up to `limit`.
    pub async fn serving(&mut self, limit: Duration) -> Option<Epoch> {
        let _ = tokio::time::timeout(limit, self.epoch.wait_for(Option::is_some)).await;
        self.epoch()
    }

    /// Stops serving: it stops vouching, then gives its lock back (waiting for lockd
    /// up to two RPC timeouts), so writers that find it gone need not wait for its
    /// lease to end. (A process that stops uncleanly cannot give the lock back; nothing
    /// depends on it — the lock then lapses with the lease.)
    pub async fn shutdown(mut self) {
        let stopping = self.events.send(Event::Stop).await.is_ok();
        if let Some(mut served) = self.served.take() {
            // The driver ends by itself once the lock is given back (or the grace is
            // over), and the server with it; the signal is the fallback.
            let ended = stopping
                && tokio::time::timeout(Duration::from_secs(30), &mut served)
                    .await
                    .is_ok();
            if !ended {
                let _ = self.stop.take().map(|stop| stop.send(true));
                let _ = served.await;
            }
        }
        if let Some(metrics) = self.metrics_server.take() {
            metrics.shutdown().await;
        }
    }
}

/// Owns the state machine; the only place it is stepped.
struct Driver {
    metrics: CoordinatorMetrics,
    core: Coordinator,
    /// The server it runs on.
    server: ServerId,
    /// The replica it coordinates for.
    replica: ReplicaId,
    clock: Clock,
    lockd: Arc<LockdClient>,
    events_tx: mpsc::Sender<Event>,
    epoch: watch::Sender<Option<Epoch>>,
    wake: Option<Time>,
    /// How long a stop waits for lockd to confirm the lock is given back.
    stop_grace: Duration,
}

impl Driver {
    /// The placement gauges, from the placement the core vouches by.
    fn placement_measured(&self) {
        if let Some(view) = self.core.placement() {
            let held = placement_follower::ranges_held(view, self.server, self.replica).count();
            self.metrics.placement(view.version().0, held);
        }
    }

    async fn run(mut self, mut events: mpsc::Receiver<Event>) {
        self.placement_measured();
        let start = self.core.step(self.clock.now(), Input::Start);
        self.carry_out(start, None);
        let mut stop_by = None;
        loop {
            if let Some(stop_by) = stop_by
                && (self.core.released() || tokio::time::Instant::now() >= stop_by)
            {
                tracing::info!(released = self.core.released(), "coordinator stopped");
                return;
            }
            let wake = [self.wake.map(|t| self.clock.instant(t)), stop_by]
                .into_iter()
                .flatten()
                .min();
            let event = tokio::select! {
                event = events.recv() => match event {
                    Some(event) => Some(event),
                    None => return,
                },
                () = sleep_until(wake) => None,
            };
            let now = self.clock.now();
            match event {
                None => {
                    self.wake = None;
                    let out = self.core.step(now, Input::Tick);
                    self.carry_out(out, None);
                }
                Some(Event::Lock { from, response }) => {
                    let out = self.core.step(now, Input::Lock { from, response });
                    self.carry_out(out, None);
                }
                Some(Event::Placement(placement)) => {
                    let out = self.core.step(now, Input::Placement(placement));
                    self.carry_out(out, None);
                    self.placement_measured();
                }
                Some(Event::KnowsMove { move_id, reply }) => {
                    let _ = reply.send(self.core.knows_placement(move_id));
                }
                Some(Event::Stop) => {
                    stop_by = Some(tokio::time::Instant::now() + self.stop_grace);
                    let out = self.core.step(now, Input::Stop);
                    self.carry_out(out, None);
                }
                Some(Event::Request { request, reply }) => {
                    self.metrics.request(match request {
                        CoordinatorRequest::Query { .. } => "query",
                        CoordinatorRequest::Validate { .. } => "validate",
                        CoordinatorRequest::Invalidate { .. } => "invalidate",
                    });
                    // The caller is known by its call, not by an address: a request is
                    // answered within its own step, and the answer goes back on the
                    // call's channel, so the sender id is not needed to route it.
                    let caller = NodeId::Client(ClientId(0));
                    let out = self.core.step(
                        now,
                        Input::Request {
                            from: caller,
                            request,
                        },
                    );
                    self.carry_out(out, Some(reply));
                }
            }
            self.metrics.lock(self.core.epoch().map(|e| e.0));
            let _ = self.epoch.send_if_modified(|e| {
                let now_epoch = self.core.epoch();
                let changed = *e != now_epoch;
                *e = now_epoch;
                changed
            });
        }
    }

    fn carry_out(
        &mut self,
        outputs: Vec<Output>,
        mut reply: Option<oneshot::Sender<Option<CoordinatorReply>>>,
    ) {
        for output in outputs {
            match output {
                Output::Reply { reply: answer, .. } => {
                    if let CoordinatorReply::Query { vouched, .. } = answer {
                        self.metrics.query(vouched);
                    }
                    if let Some(reply) = reply.take() {
                        let _ = reply.send(Some(answer));
                    }
                }
                Output::Lock(send) => {
                    let lockd = Arc::clone(&self.lockd);
                    let events = self.events_tx.clone();
                    tokio::spawn(async move {
                        // A lost request is retried by the state machine's own timer.
                        if let Some(response) = lockd.send(send.to, send.request).await {
                            let _ = events
                                .send(Event::Lock {
                                    from: send.to,
                                    response,
                                })
                                .await;
                        }
                    });
                }
                Output::WakeAt(at) => {
                    self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
                }
            }
        }
        // A validate has no answer: the call ends with nothing to say.
        if let Some(reply) = reply {
            let _ = reply.send(None);
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn lock_holder(lockd: &LockdClient, lock: &str) -> Result<Option<SessionId>, ProcessError> {
    let lock = lock.to_string();
    match lockd.execute(LockCommand::Holder { lock }).await {
        Ok(LockReply::Holder(holder)) => Ok(holder.map(|h| h.session)),
        Ok(other) => Err(ProcessError::Lock(format!("unexpected reply {other:?}"))),
        Err(e) => Err(ProcessError::Lock(e.to_string())),
    }
}

/// What `megastore coordinator disable` achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisableOutcome {
    /// Nobody held the coordinator's lock: nothing to revoke.
    NotHeld,
    /// The coordinator's lock was free `waited` after the revocation — given back by
    /// the coordinator, which stopped vouching (it still reaches lockd: the wait is
    /// about a quarter lease), or lapsed with its lease (it does not). Writers that
    /// cannot reach it go on from then.
    Free {
        /// From the revocation to the lock's release.
        waited: Duration,
    },
    /// Still held when the wait ended (a lockd leader change restarts every lease, so
    /// this can outlast one lease); writers go on once it lapses.
    StillHeld {
        /// How long it waited.
        waited: Duration,
    },
}

/// `megastore coordinator disable NAME`: revokes the lock session of the coordinator
/// of full replica `name` (for an asymmetric partition: writers that cannot reach it
/// stall until it is out of the way), then waits, up to `wait`, until its lock is free.
pub async fn disable_coordinator(
    config: &ClusterConfig,
    name: &str,
    wait: Duration,
) -> Result<DisableOutcome, ProcessError> {
    let server = config
        .server_process(name)
        .filter(|p| p.process.kind == ReplicaKind::Full)
        .ok_or_else(|| {
            ProcessError::UnknownName(format!(
                "no full replica or server of one is called {name:?}"
            ))
        })?;
    let lockd = LockdClient::new(config).map_err(ProcessError::Config)?;
    let lock = coordinator_lock(ServerId(server.server));
    let before = lock_holder(&lockd, &lock).await?;
    let revoked_at = tokio::time::Instant::now();
    match lockd
        .execute(LockCommand::RevokeHolder { lock: lock.clone() })
        .await
    {
        Ok(LockReply::Revoked(true)) => {}
        Ok(LockReply::Revoked(false)) => return Ok(DisableOutcome::NotHeld),
        Ok(other) => return Err(ProcessError::Lock(format!("unexpected reply {other:?}"))),
        Err(e) => return Err(ProcessError::Lock(e.to_string())),
    }
    // The revoked session is the one that held the lock just before (or, if it was
    // free then, whichever took it in between).
    let mut revoked = before;
    loop {
        let now = lock_holder(&lockd, &lock).await?;
        let revoked_session = *revoked.get_or_insert(now.unwrap_or(SessionId(0)));
        let waited = revoked_at.elapsed();
        if now.is_none_or(|session| session != revoked_session) {
            return Ok(DisableOutcome::Free { waited });
        }
        if waited >= wait {
            return Ok(DisableOutcome::StillHeld { waited });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
