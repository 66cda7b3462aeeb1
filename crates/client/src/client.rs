//! [`Client`]: one connection to a cluster, and the task that drives its state machine.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use megastore_config::ClusterConfig;
use megastore_coordinator::CoordinatorRequest;
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_metrics::{ClientMetrics, ReadPathLabel};
use megastore_paxos::Decision;
use megastore_paxos::watch::{LogRead, log_read};
use megastore_paxos::{
    Basis, BasisStep, CheckedHit, ClientConfig, ClientCore, ClientInput, ClientOutput,
    CollectedDecisions, CommitResult, DataQuery, DecideOutcome, GlobalHit, Message, OpId, OpResult,
    Participant, ProposerConfig, ReadError, ReadMode, ReadPath, ReadResult, ReadSet, RelayRole,
    ReplicaReply, ReplicaRequest, Resolution, RowWrite, SettledGroup, TwoPhaseResult, TxnFacts,
};
use megastore_rowstore::KeyRange;
use megastore_types::{ClientId, EgId, NodeId, Position, ProposerId, ReplicaId, Time, TxnId};
use tokio::sync::{mpsc, oneshot};

use crate::hot_groups::{HotGroups, HotGroupsNow};
use crate::settings::proposer_timeouts;
use megastore_rpc::Peers;

/// Why an operation could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The config does not describe a usable cluster, or names no such site.
    #[error("config: {0}")]
    Config(String),
    /// The lock service could not give this client an id.
    #[error("lock service: {0}")]
    Lock(String),
    /// No replica could serve the read in time.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The transaction kept conflicting and ran out of retries.
    #[error("gave up after {attempts} conflicting attempts (last conflicting rows: {keys:?})")]
    TooManyConflicts {
        /// How many times it ran.
        attempts: u32,
        /// The rows the last conflict named.
        keys: Vec<Vec<u8>>,
    },
    /// The commit may or may not have happened.
    #[error("outcome of transaction {txn:?} unknown (it may hold position {position})")]
    Unknown {
        /// The transaction.
        txn: TxnId,
        /// Where it may be.
        position: Position,
    },
    /// An entity, key or query does not fit the schema.
    #[error("schema: {0}")]
    Schema(String),
    /// A request that cannot be served as asked (a bad group or key, a write over a
    /// size limit), naming the field; nothing was sent.
    #[error("{0}")]
    InvalidArgument(String),
    /// A watch asked for a log position that no replica keeps any more.
    #[error(
        "position {asked} of group {eg} was collected: the replicas kept the log only above \
         {truncated} ([history] log_positions); read the group's current state and watch \
         from the position that read returns, plus one"
    )]
    Collected {
        /// The group.
        eg: EgId,
        /// The position asked for.
        asked: Position,
        /// The highest truncation point a replica reported.
        truncated: Position,
    },
    /// The lock service refused a lease or lock request (the lease ended, the lock is
    /// held by another lease).
    #[error("{0}")]
    Lease(#[from] crate::leases::LeaseError),
    /// Stored data is not what this library writes.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The client was closed.
    #[error("client closed")]
    Closed,
}

impl From<ReadError> for ClientError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Unavailable(why) => ClientError::Unavailable(why),
        }
    }
}

/// A commit's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The transaction's id.
    pub txn: TxnId,
    /// What happened.
    pub result: CommitResult,
}

pub(crate) enum Event {
    Read {
        eg: EgId,
        mode: ReadMode,
        query: DataQuery,
        done: oneshot::Sender<Result<ReadResult, ReadError>>,
    },
    /// A blind write's basis, lent by a commit in flight or read
    /// ([`ClientCore::blind_basis`]).
    BlindBasis {
        eg: EgId,
        done: oneshot::Sender<Result<Basis, ReadError>>,
    },
    Commit {
        txn: TxnId,
        eg: EgId,
        read_position: Position,
        leader: Option<ReplicaId>,
        writes: Vec<RowWrite>,
        reads: ReadSet,
        done: oneshot::Sender<Committed>,
    },
    /// Another client's transaction, relayed to this one (`relay`).
    CommitRelayed {
        commit: megastore_paxos::RelayedCommit,
        done: oneshot::Sender<Committed>,
    },
    /// A blind write's commit on the read of the client's commit to `eg` in flight:
    /// `started` says whether there was one (else it gives the writes back).
    CommitBlind {
        txn: TxnId,
        eg: EgId,
        writes: Vec<RowWrite>,
        started: oneshot::Sender<Result<(), Vec<RowWrite>>>,
        done: oneshot::Sender<Committed>,
    },
    Resolve {
        eg: EgId,
        position: Position,
        /// `position` is the transaction's first: settle its whole commit span.
        span: bool,
        txn: TxnId,
        done: oneshot::Sender<Resolution>,
    },
    ScanGlobal {
        range: KeyRange,
        limit: Option<usize>,
        reverse: bool,
        done: oneshot::Sender<Result<ReadResult, ReadError>>,
    },
    Verify {
        hits: Vec<GlobalHit>,
        in_flight: usize,
        done: oneshot::Sender<Result<Vec<CheckedHit>, ReadError>>,
    },
    HotGroups {
        n: usize,
        done: oneshot::Sender<HotGroupsNow>,
    },
    Deliver {
        sender: EgId,
        done: oneshot::Sender<Result<megastore_paxos::queue::Delivery, ReadError>>,
    },
    TwoPhase {
        txn: TxnId,
        participants: Vec<Participant>,
        done: oneshot::Sender<Result<TwoPhaseResult, ClientError>>,
    },
    Decision {
        coordinator: EgId,
        txn: TxnId,
        facts: Option<TxnFacts>,
        done: oneshot::Sender<DecideOutcome>,
    },
    Collect {
        eg: EgId,
        after: Option<Vec<u8>>,
        retention: std::time::Duration,
        done: oneshot::Sender<Result<CollectedDecisions, ReadError>>,
    },
    Settle {
        eg: EgId,
        done: oneshot::Sender<Result<SettledGroup, ReadError>>,
    },
    ReadLog {
        eg: EgId,
        position: Position,
        prefer: Option<ReplicaId>,
        done: oneshot::Sender<LogRead>,
    },
    AwaitVisible {
        eg: EgId,
        past: Position,
        at: Option<ReplicaId>,
        wait: std::time::Duration,
        done: oneshot::Sender<Option<(ReplicaId, Position)>>,
    },
}

/// What woke the driver: an answer to one of its requests in flight, its timer, or a
/// handle's event.
enum Woken {
    Answer { from: NodeId, message: Message },
    Tick,
    Event(Event),
}

/// A request on its way to a replica, coordinator or lock node, and its answer (`None`:
/// none came).
type InFlight = std::pin::Pin<Box<dyn Future<Output = Option<(NodeId, Message)>> + Send>>;

enum Waiting {
    Read(oneshot::Sender<Result<ReadResult, ReadError>>),
    /// A blind write's basis, being read.
    Basis(oneshot::Sender<Result<Basis, ReadError>>),
    Verify(oneshot::Sender<Result<Vec<CheckedHit>, ReadError>>),
    Deliver(oneshot::Sender<Result<megastore_paxos::queue::Delivery, ReadError>>),
    TwoPhase(oneshot::Sender<Result<TwoPhaseResult, ClientError>>),
    Decision(oneshot::Sender<DecideOutcome>),
    Settle(oneshot::Sender<Result<SettledGroup, ReadError>>),
    Collect(oneshot::Sender<Result<CollectedDecisions, ReadError>>),
    Commit(oneshot::Sender<Committed>, std::time::Instant, EgId),
    Resolve(oneshot::Sender<Resolution>, EgId),
}

/// A client of one cluster, at one site (its local replica serves its current reads
/// when its coordinator vouches). Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Client {
    events: mpsc::UnboundedSender<Event>,
    id: ClientId,
    /// The sequence number of this client's next transaction (shared by clones).
    next_txn: Arc<std::sync::atomic::AtomicU64>,
    /// The proposer's time limits (also how long an unknown outcome is resolved).
    timeouts: megastore_paxos::Timeouts,
    metrics: ClientMetrics,
    /// For lock-service calls (leases, locks, leased keys), which go straight to
    /// lockd rather than through the driver.
    peers: Arc<Peers>,
    /// The cluster's clock drift bound, by which a lease's `valid_until` is shortened.
    max_clock_drift_ppm: u32,
}

/// The wall clock, in ms since the Unix epoch.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The lockd file whose version hands out client ids.
const CLIENT_IDS: &str = "clients/next-id";

/// A client id no other client of the cluster has had: the version of a lockd file
/// that every client bumps once.
async fn allocate_id(peers: &Peers) -> Result<ClientId, ClientError> {
    for _ in 0..100 {
        let current = match peers
            .lockd()
            .execute(LockCommand::ReadFile {
                name: CLIENT_IDS.into(),
            })
            .await
        {
            Ok(LockReply::File(file)) => file.map_or(0, |f| f.version),
            Ok(other) => return Err(ClientError::Lock(format!("unexpected reply {other:?}"))),
            Err(e) => return Err(ClientError::Lock(e.to_string())),
        };
        let write = LockCommand::WriteFile {
            name: CLIENT_IDS.into(),
            expected: current,
            contents: Vec::new(),
        };
        match peers.lockd().execute(write).await {
            Ok(LockReply::Written { version }) => {
                return u32::try_from(version)
                    .map(ClientId)
                    .map_err(|_| ClientError::Lock("client ids exhausted".into()));
            }
            // Another client took that one: try the next. (Resends are applied at most
            // once, so `Unavailable` means lockd could not be reached at all.)
            Err(LockError::VersionMismatch { .. }) => continue,
            Ok(other) => return Err(ClientError::Lock(format!("unexpected reply {other:?}"))),
            Err(e) => return Err(ClientError::Lock(e.to_string())),
        }
    }
    Err(ClientError::Lock("could not allocate a client id".into()))
}

impl Client {
    /// Connects to the cluster of `config` as a client at site `site` (call inside a
    /// tokio runtime).
    pub async fn connect(config: &ClusterConfig, site: &str) -> Result<Self, ClientError> {
        Self::connect_with(config, site, RelayRole::Writer).await
    }

    /// Connects like [`connect`](Self::connect) as a replica's own shared client, the
    /// relay of its site's clients' hot groups (docs/protocol.md, "Relayed commits"):
    /// it commits what is relayed to it itself, and its own commits too, except while
    /// relays duel for a group (then its own go to the position leader's relay).
    pub async fn connect_as_relay(config: &ClusterConfig, site: &str) -> Result<Self, ClientError> {
        Self::connect_with(config, site, RelayRole::Relay).await
    }

    async fn connect_with(
        config: &ClusterConfig,
        site: &str,
        relay_role: RelayRole,
    ) -> Result<Self, ClientError> {
        let site_id = config.site_id(site).ok_or_else(|| {
            ClientError::Config(format!(
                "unknown site {site:?} (cluster.sites has {})",
                ClusterConfig::names(config.cluster.sites.iter().map(String::as_str))
            ))
        })?;
        let topology = config
            .topology()
            .map_err(|e| ClientError::Config(e.to_string()))?;
        let peers = Peers::at_site(config, site).map_err(ClientError::Config)?;
        let id = allocate_id(&peers).await?;
        // The placement its writes' invalidations route by (docs/protocol.md,
        // "Placement"); the core reads it again itself whenever a coordinator cannot
        // vouch (*lapse-of-the-holder*).
        let placement = crate::placement_store::load_placement(peers.lockd(), &topology)
            .await?
            .placement;
        let timeouts = proposer_timeouts(config);
        let core = ClientCore::new(ClientConfig {
            id,
            site: site_id,
            proposer: ProposerConfig {
                topology,
                proposer: ProposerId::client(id),
                lock_nodes: config.lockd_ids(),
                timeouts: timeouts.clone(),
                bugs: megastore_paxos::ProtocolBugs::NONE,
            },
            seed: rand::random(),
            delivery_batch: megastore_paxos::queue::DELIVERY_BATCH,
            // The driver's clock starts now (just below).
            wall_clock_offset_ms: wall_clock_ms(),
            relay_role,
        })
        .placed(placement);
        let (events_tx, events) = mpsc::unbounded_channel();
        let metrics = ClientMetrics::default();
        let driver = Driver {
            core,
            clock: std::time::Instant::now(),
            peers: Arc::clone(&peers),
            in_flight: FuturesUnordered::new(),
            waiting: BTreeMap::new(),
            wake: None,
            metrics: metrics.clone(),
            hot: HotGroups::new(),
        };
        tokio::spawn(driver.run(events));
        Ok(Self {
            events: events_tx,
            id,
            next_txn: Arc::new(std::sync::atomic::AtomicU64::new(1)),
            timeouts,
            metrics,
            peers,
            max_clock_drift_ppm: config.timeouts.max_clock_drift_ppm,
        })
    }

    /// The cluster's processes, for lock-service calls.
    pub(crate) fn peers(&self) -> &Peers {
        &self.peers
    }

    /// The cluster's clock drift bound (`[timeouts] max_clock_drift_ppm`).
    pub(crate) fn max_clock_drift_ppm(&self) -> u32 {
        self.max_clock_drift_ppm
    }

    /// What this client (and its clones) did: commits by path, conflicts, reads by how
    /// they were served, invalidations (register them to serve them).
    pub fn metrics(&self) -> &ClientMetrics {
        &self.metrics
    }

    /// The proposer's time limits this client runs by (also how long an unknown commit
    /// outcome is looked for before it is reported).
    pub(crate) fn timeouts(&self) -> &megastore_paxos::Timeouts {
        &self.timeouts
    }

    /// This client's id (also its proposer id's low half).
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// A transaction id this client (and its clones) never used before.
    pub(crate) fn new_txn_id(&self) -> TxnId {
        let seq = self
            .next_txn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        TxnId {
            client: self.id,
            seq,
        }
    }

    /// Reads keys of one untyped entity group ([`crate::group`]) in `mode`: `query`
    /// names keys within the group (a scan's empty start is its first key, no end its
    /// last), and so do the rows returned.
    pub async fn read(
        &self,
        eg: &EgId,
        mode: ReadMode,
        query: DataQuery,
    ) -> Result<ReadResult, ClientError> {
        crate::groups::require_untyped(eg)?;
        let query = crate::groups::rows_of_query(eg, query)?;
        let mut read = self.read_rows(eg, mode, query).await?;
        read.rows = std::mem::take(&mut read.rows)
            .into_iter()
            .map(|row| crate::groups::relative_row(eg, row))
            .collect();
        Ok(read)
    }

    /// Global index rows in `range` (within `megastore_paxos::global_index_range`),
    /// newest versions, from the nearest full or read-only replica that answers: every
    /// group as of the position that replica has applied of it (docs/protocol.md,
    /// "Global indexes"). In descending key order if `reverse`.
    pub(crate) async fn scan_global_rows(
        &self,
        range: KeyRange,
        limit: Option<usize>,
        reverse: bool,
    ) -> Result<ReadResult, ClientError> {
        Ok(self
            .ask(|done| Event::ScanGlobal {
                range,
                limit,
                reverse,
                done,
            })
            .await??)
    }

    /// The `n` hottest entity groups this client committed in, and those it lost
    /// positions in most (estimated counts since it started, bounded memory:
    /// [`crate::HOT_GROUPS_TRACKED`] per kind): `megastore top`'s hot groups.
    pub async fn hot_groups(&self, n: usize) -> Result<HotGroupsNow, ClientError> {
        self.ask(|done| Event::HotGroups { n, done }).await
    }

    /// Runs the protocol core's delivery of `sender`'s outbox.
    pub(crate) async fn deliver_outbox(
        &self,
        sender: EgId,
    ) -> Result<megastore_paxos::queue::Delivery, ClientError> {
        if sender.0.is_empty() {
            return Err(ClientError::InvalidArgument("sender: name a group".into()));
        }
        Ok(self.ask(|done| Event::Deliver { sender, done }).await??)
    }

    /// Runs the protocol core's two-phase commit of `txn` over `participants` (the
    /// first is the coordinator group).
    pub(crate) async fn commit_two_phase(
        &self,
        txn: TxnId,
        participants: Vec<Participant>,
    ) -> Result<TwoPhaseResult, ClientError> {
        self.ask(|done| Event::TwoPhase {
            txn,
            participants,
            done,
        })
        .await?
    }

    /// The decision of cross-group transaction `txn`, read in its coordinator group
    /// (docs/protocol.md, "Two-phase commit"): `Some` once decided, `None` while it is
    /// not (or when, finished everywhere, its decision was collected). With its
    /// `facts` (when it began preparing, and its participants), one still undecided
    /// after the prepared timeout is aborted, the abort recorded first — so it is
    /// decided.
    pub(crate) async fn two_phase_decision(
        &self,
        coordinator: &EgId,
        txn: TxnId,
        facts: Option<TxnFacts>,
    ) -> Result<Option<Decision>, ClientError> {
        match self
            .ask(|done| Event::Decision {
                coordinator: coordinator.clone(),
                txn,
                facts,
                done,
            })
            .await?
        {
            DecideOutcome::Decided(decision) => Ok(Some(decision)),
            DecideOutcome::Undecided | DecideOutcome::Gone => Ok(None),
            DecideOutcome::Failed(why) => Err(ClientError::Unavailable(why)),
        }
    }

    /// Collects a page of coordinator group `eg`'s decision rows, starting after
    /// `after` (the last page's `next`): each decision of a transaction that began
    /// preparing more than `retention` ago and has no record left in any participant
    /// is deleted (docs/protocol.md, "Two-phase commit", collection). Replicas do this
    /// by themselves for the groups they apply decisions in.
    pub async fn collect_decisions(
        &self,
        eg: &EgId,
        after: Option<Vec<u8>>,
        retention: std::time::Duration,
    ) -> Result<CollectedDecisions, ClientError> {
        if eg.0.is_empty() {
            return Err(ClientError::InvalidArgument("eg: name a group".into()));
        }
        Ok(self
            .ask(|done| Event::Collect {
                eg: eg.clone(),
                after,
                retention,
                done,
            })
            .await??)
    }

    /// Settles the cross-group transactions prepared in group `eg` (any group, typed
    /// or not): each is finished as its coordinator group decided, and one undecided
    /// after the prepared timeout is aborted, recorded first. Replicas' sweeps do this
    /// by themselves; readers and writers that meet a prepared transaction do too.
    pub async fn settle_prepared(&self, eg: &EgId) -> Result<SettledGroup, ClientError> {
        if eg.0.is_empty() {
            return Err(ClientError::InvalidArgument("eg: name a group".into()));
        }
        Ok(self
            .ask(|done| Event::Settle {
                eg: eg.clone(),
                done,
            })
            .await??)
    }

    /// Checks global index hits against their groups' mirrors by current reads, at
    /// most `in_flight` groups at once (the protocol core's verification,
    /// docs/protocol.md "Global indexes"): each hit with whether it is still current.
    pub(crate) async fn verify_hits(
        &self,
        hits: Vec<GlobalHit>,
        in_flight: usize,
    ) -> Result<Vec<CheckedHit>, ClientError> {
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .ask(|done| Event::Verify {
                hits,
                in_flight,
                done,
            })
            .await??)
    }

    /// Reads rows (keys of the row store) of one entity group in `mode`.
    #[tracing::instrument(level = "debug", name = "read", skip(self, query), fields(client = self.id.0, eg = %eg))]
    pub(crate) async fn read_rows(
        &self,
        eg: &EgId,
        mode: ReadMode,
        query: DataQuery,
    ) -> Result<ReadResult, ClientError> {
        Ok(self
            .ask(|done| Event::Read {
                eg: eg.clone(),
                mode,
                query,
                done,
            })
            .await??)
    }

    /// The basis of a blind write of `eg`: a position, that position's next leader
    /// and the prepared transactions pending there, lent by this client's commit to the
    /// group in flight or read ([`ClientCore::blind_basis`] chooses how).
    pub(crate) async fn blind_basis(&self, eg: &EgId) -> Result<Basis, ClientError> {
        Ok(self
            .ask(|done| Event::BlindBasis {
                eg: eg.clone(),
                done,
            })
            .await??)
    }

    /// The entry committed at `position` of `eg`, asking `prefer` first and then every
    /// other replica until one has it ([`megastore_paxos::watch`]).
    pub(crate) async fn read_log(
        &self,
        eg: &EgId,
        position: Position,
        prefer: Option<ReplicaId>,
    ) -> Result<LogRead, ClientError> {
        self.ask(|done| Event::ReadLog {
            eg: eg.clone(),
            position,
            prefer,
            done,
        })
        .await
    }

    /// Waits, up to `wait`, for `eg`'s visible position at replica `at` (default: this
    /// client's own site's) to pass `past`: that replica and its visible position then,
    /// or `None` if the wait ended with nothing new or the replica did not answer.
    pub(crate) async fn await_visible(
        &self,
        eg: &EgId,
        past: Position,
        at: Option<ReplicaId>,
        wait: std::time::Duration,
    ) -> Result<Option<(ReplicaId, Position)>, ClientError> {
        let moved = self
            .ask(|done| Event::AwaitVisible {
                eg: eg.clone(),
                past,
                at,
                wait,
                done,
            })
            .await?;
        Ok(moved.filter(|(_, visible)| *visible > past))
    }

    /// Settles `position` of `eg`, which transaction `txn` may hold after a commit that
    /// ended [`CommitResult::Unknown`], and says whether `txn` is what was chosen there.
    /// [`Resolution::NotCommitted`] is final: running the transaction again cannot
    /// apply it twice. ([`Transaction::commit`](crate::Transaction::commit) does this
    /// itself.)
    pub async fn resolve_commit(
        &self,
        eg: &EgId,
        position: Position,
        txn: TxnId,
    ) -> Result<Resolution, ClientError> {
        self.resolve_at(eg, position, false, txn).await
    }

    /// Like [`resolve_commit`](Self::resolve_commit), knowing only the transaction's
    /// first position (the one after its read): settles each position of its commit
    /// span ([`megastore_paxos::commit_span`]) until one holds it. For a commit whose
    /// writer cannot say where it ended — its answer was lost, or it died — since a
    /// commit that lost its first position goes on to the next ones.
    pub async fn resolve_commit_from_first(
        &self,
        eg: &EgId,
        first: Position,
        txn: TxnId,
    ) -> Result<Resolution, ClientError> {
        self.resolve_at(eg, first, true, txn).await
    }

    pub(crate) async fn resolve_at(
        &self,
        eg: &EgId,
        position: Position,
        span: bool,
        txn: TxnId,
    ) -> Result<Resolution, ClientError> {
        self.ask(|done| Event::Resolve {
            eg: eg.clone(),
            position,
            span,
            txn,
            done,
        })
        .await
    }

    /// Commits `writes` as transaction `txn`'s log entry after a current read at
    /// `read_position` (whose entry named `leader` as the next position's leader).
    /// `reads` are the rows and ranges the transaction read: a conflict names the rows
    /// written in between that they cover.
    #[tracing::instrument(
        level = "debug",
        name = "commit",
        skip(self, writes, reads),
        fields(client = self.id.0, eg = %eg, read_position = read_position.0)
    )]
    pub(crate) async fn commit(
        &self,
        txn: TxnId,
        eg: &EgId,
        read_position: Position,
        leader: Option<ReplicaId>,
        writes: Vec<RowWrite>,
        reads: ReadSet,
    ) -> Result<Committed, ClientError> {
        self.ask(|done| Event::Commit {
            txn,
            eg: eg.clone(),
            read_position,
            leader,
            writes,
            reads,
            done,
        })
        .await
    }

    /// Hands the driver `event`.
    pub(crate) fn send(&self, event: Event) -> Result<(), ClientError> {
        self.events.send(event).map_err(|_| ClientError::Closed)
    }

    /// Hands the driver the event `event` builds around a reply channel, and waits for
    /// the reply.
    pub(crate) async fn ask<T>(
        &self,
        event: impl FnOnce(oneshot::Sender<T>) -> Event,
    ) -> Result<T, ClientError> {
        let (done, reply) = oneshot::channel();
        self.send(event(done))?;
        reply.await.map_err(|_| ClientError::Closed)
    }

    /// Commits a blind write (transaction `txn`, which read nothing) of `eg` on the read
    /// of this client's commit to the group in flight, without reading the group
    /// itself ([`ClientCore::commit_blind`]). `Ok(Err(writes))`: nothing is in flight —
    /// read the group's position and [`commit`](Self::commit).
    pub(crate) async fn commit_blind(
        &self,
        txn: TxnId,
        eg: &EgId,
        writes: Vec<RowWrite>,
    ) -> Result<Result<Committed, Vec<RowWrite>>, ClientError> {
        // Two replies (whether it started, then its outcome): sent at once, not
        // through `ask`, which would send only once its reply is awaited.
        let (started, was_started) = oneshot::channel();
        let (done, result) = oneshot::channel();
        self.send(Event::CommitBlind {
            txn,
            eg: eg.clone(),
            writes,
            started,
            done,
        })?;
        if let Err(writes) = was_started.await.map_err(|_| ClientError::Closed)? {
            return Ok(Err(writes));
        }
        Ok(Ok(result.await.map_err(|_| ClientError::Closed)?))
    }
}

/// Owns the state machine.
struct Driver {
    core: ClientCore,
    clock: std::time::Instant,
    peers: Arc<Peers>,
    /// The requests sent and not yet answered, polled by the driver's own task: an
    /// answer wakes the driver directly, with no task spawned per request and no hop
    /// through the event channel.
    in_flight: FuturesUnordered<InFlight>,
    waiting: BTreeMap<OpId, Waiting>,
    wake: Option<Time>,
    metrics: ClientMetrics,
    hot: HotGroups,
}

/// `position` of `eg` from the first of `replicas` that has it committed; else what
/// their answers say together ([`LogRead::or`]).
async fn read_log(
    peers: &Peers,
    replicas: Vec<ReplicaId>,
    eg: EgId,
    position: Position,
) -> LogRead {
    let mut outcome = LogRead::NotHere;
    for replica in replicas {
        let request = ReplicaRequest::ReadLog {
            id: 0,
            eg: eg.clone(),
            position,
        };
        let answer = peers
            .request(NodeId::Replica(replica), Message::ReplicaRequest(request))
            .await
            .and_then(|m| match m {
                Message::ReplicaReply(reply) => Some(reply),
                _ => None,
            });
        outcome = outcome.or(log_read(answer));
        if matches!(outcome, LogRead::Committed(_)) {
            break;
        }
    }
    outcome
}

impl Driver {
    /// Every replica, `first` (if any) then this client's own site's, then the rest.
    fn replicas_from(&self, first: Option<ReplicaId>) -> Vec<ReplicaId> {
        let local = self.core.local_replica();
        let mut order: Vec<ReplicaId> = first.into_iter().chain(local).collect();
        for info in self.core.config().proposer.topology.replicas() {
            if !order.contains(&info.id) {
                order.push(info.id);
            }
        }
        order.dedup();
        order
    }

    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.clock.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>) {
        loop {
            let wake = self.wake.map(|w| {
                tokio::time::Instant::from_std(
                    self.clock + std::time::Duration::from_nanos(w.as_nanos()),
                )
            });
            // Biased, in this order: the requests in flight first (a request pushed in
            // the last step is sent when first polled, and an answer finishes work
            // already started), then the core's timer, then new work from the handles.
            let woken = tokio::select! {
                biased;
                Some(answer) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    match answer {
                        Some((from, message)) => Woken::Answer { from, message },
                        // No answer: the core's timers decide what that means.
                        None => continue,
                    }
                }
                () = sleep_until(wake) => Woken::Tick,
                event = events.recv() => match event {
                    Some(event) => Woken::Event(event),
                    // Every handle is gone: nobody waits for anything. What was sent
                    // still goes out (a commit's visible marks, say): the requests in
                    // flight finish in a task of their own, each within its RPC timeout,
                    // as a replica should not need its sweep to learn what a dropped
                    // client committed.
                    None => {
                        let in_flight = std::mem::take(&mut self.in_flight);
                        tokio::spawn(in_flight.for_each(|_| async {}));
                        return;
                    }
                },
            };
            let now = self.now();
            let outputs = match woken {
                Woken::Tick => {
                    self.wake = None;
                    self.core.step(now, ClientInput::Tick)
                }
                Woken::Answer { from, message } => {
                    self.core.step(now, ClientInput::Message { from, message })
                }
                Woken::Event(event) => self.on_event(now, event),
            };
            self.carry_out(outputs);
        }
    }

    /// What a handle asked for: the core's outputs for it (the handle's answer waits
    /// in `waiting` until the core reports the operation done).
    fn on_event(&mut self, now: Time, event: Event) -> Vec<ClientOutput> {
        match event {
            Event::Read {
                eg,
                mode,
                query,
                done,
            } => {
                let (op, out) = self.core.read(now, eg, mode, query);
                self.waiting.insert(op, Waiting::Read(done));
                out
            }
            Event::BlindBasis { eg, done } => {
                match self.core.blind_basis(now, eg, DataQuery::Rows(Vec::new())) {
                    BasisStep::Lent(basis) => {
                        self.metrics.blind_write_unread();
                        let _ = done.send(Ok(basis));
                        Vec::new()
                    }
                    BasisStep::Reading { op, outputs, .. } => {
                        self.waiting.insert(op, Waiting::Basis(done));
                        outputs
                    }
                }
            }
            Event::Commit {
                txn,
                eg,
                read_position,
                leader,
                writes,
                reads,
                done,
            } => {
                let (op, out) =
                    self.core
                        .commit(now, txn, eg.clone(), read_position, leader, writes, reads);
                let started = std::time::Instant::now();
                self.waiting.insert(op, Waiting::Commit(done, started, eg));
                out
            }
            Event::CommitRelayed { commit, done } => {
                let eg = commit.eg.clone();
                let (op, out) = self.core.commit_relayed(now, commit);
                let started = std::time::Instant::now();
                self.waiting.insert(op, Waiting::Commit(done, started, eg));
                out
            }
            Event::CommitBlind {
                txn,
                eg,
                writes,
                started,
                done,
            } => match self.core.commit_blind(now, txn, eg.clone(), writes) {
                Ok((op, _, out)) => {
                    self.metrics.blind_write_unread();
                    let _ = started.send(Ok(()));
                    let started = std::time::Instant::now();
                    self.waiting.insert(op, Waiting::Commit(done, started, eg));
                    out
                }
                Err(writes) => {
                    let _ = started.send(Err(writes));
                    Vec::new()
                }
            },
            Event::Resolve {
                eg,
                position,
                span,
                txn,
                done,
            } => {
                let (op, out) = if span {
                    self.core.resolve_from_first(now, eg.clone(), position, txn)
                } else {
                    self.core.resolve(now, eg.clone(), position, txn)
                };
                self.waiting.insert(op, Waiting::Resolve(done, eg));
                out
            }
            Event::ScanGlobal {
                range,
                limit,
                reverse,
                done,
            } => {
                let (op, out) = self.core.scan_global(now, range, limit, reverse);
                self.waiting.insert(op, Waiting::Read(done));
                out
            }
            Event::Verify {
                hits,
                in_flight,
                done,
            } => {
                let (op, out) = self.core.verify_global(now, hits, in_flight);
                self.waiting.insert(op, Waiting::Verify(done));
                out
            }
            Event::Deliver { sender, done } => {
                let (op, out) = self.core.deliver(now, sender);
                self.waiting.insert(op, Waiting::Deliver(done));
                out
            }
            Event::TwoPhase {
                txn,
                participants,
                done,
            } => match self.core.commit_two_phase(now, txn, participants) {
                Ok((op, out)) => {
                    self.waiting.insert(op, Waiting::TwoPhase(done));
                    out
                }
                Err(e) => {
                    let _ = done.send(Err(ClientError::InvalidArgument(e.to_string())));
                    Vec::new()
                }
            },
            Event::Decision {
                coordinator,
                txn,
                facts,
                done,
            } => {
                let (op, out) = self.core.two_phase_decision(now, coordinator, txn, facts);
                self.waiting.insert(op, Waiting::Decision(done));
                out
            }
            Event::Settle { eg, done } => {
                let (op, out) = self.core.settle_prepared(now, eg);
                self.waiting.insert(op, Waiting::Settle(done));
                out
            }
            Event::Collect {
                eg,
                after,
                retention,
                done,
            } => {
                let (op, out) = self.core.collect_decisions(now, eg, after, retention);
                self.waiting.insert(op, Waiting::Collect(done));
                out
            }
            Event::HotGroups { n, done } => {
                let _ = done.send(self.hot.top(n));
                Vec::new()
            }
            Event::AwaitVisible {
                eg,
                past,
                at,
                wait,
                done,
            } => {
                let replica = self.replicas_from(at).first().copied();
                let peers = Arc::clone(&self.peers);
                tokio::spawn(async move {
                    let moved = match replica {
                        Some(replica) => {
                            let request = ReplicaRequest::AwaitVisible {
                                id: 0,
                                eg,
                                past,
                                wait,
                            };
                            match peers.request_held(replica, request, wait).await {
                                Some(ReplicaReply::LogState { state, .. }) => {
                                    Some((replica, state.visible))
                                }
                                _ => None,
                            }
                        }
                        None => None,
                    };
                    let _ = done.send(moved);
                });
                Vec::new()
            }
            Event::ReadLog {
                eg,
                position,
                prefer,
                done,
            } => {
                let order = self.replicas_from(prefer);
                let peers = Arc::clone(&self.peers);
                tokio::spawn(async move {
                    let _ = done.send(read_log(&peers, order, eg, position).await);
                });
                Vec::new()
            }
        }
    }

    /// Counts a read's outcome in the metrics, by the path that served it.
    fn count_read(&self, result: &Result<ReadResult, ReadError>) {
        match result {
            Ok(read) => self.metrics.read(match read.path {
                ReadPath::LocalVouched => ReadPathLabel::Local,
                ReadPath::Majority => ReadPathLabel::Majority,
                ReadPath::Snapshot => ReadPathLabel::Snapshot,
                ReadPath::Inconsistent => ReadPathLabel::Inconsistent,
                ReadPath::AtPosition => ReadPathLabel::AtPosition,
            }),
            Err(_) => self.metrics.read_failed(),
        }
    }

    /// Counts a commit's outcome in the metrics and the hot groups.
    fn count_commit(&mut self, eg: &EgId, result: &CommitResult, started: std::time::Instant) {
        match result {
            CommitResult::Committed { fast, .. } => {
                self.metrics
                    .committed(*fast, started.elapsed().as_secs_f64());
                self.hot.committed(eg);
            }
            CommitResult::Conflict { .. } => {
                self.metrics.conflicted();
                self.hot.conflicted(eg);
            }
            CommitResult::Unknown { .. } | CommitResult::UnknownInSpan { .. } => {
                self.metrics.outcome_unknown();
            }
            CommitResult::Aborted => self.metrics.aborted(),
        }
    }

    fn carry_out(&mut self, outputs: Vec<ClientOutput>) {
        // Requests about groups go to the servers the core's placement names (it reads
        // a newer one when a server's refusal says it is behind).
        if let Some(placement) = self.core.placement()
            && placement.version().0 > self.peers.routing_version()
        {
            self.peers.route_by(placement);
        }
        for output in outputs {
            match output {
                ClientOutput::Send { to, message } => {
                    match &message {
                        Message::CoordinatorRequest(CoordinatorRequest::Invalidate { .. }) => {
                            self.metrics.invalidation_sent();
                        }
                        Message::Relay { .. } => self.metrics.relayed("sent"),
                        _ => {}
                    }
                    let peers = Arc::clone(&self.peers);
                    self.in_flight.push(Box::pin(async move {
                        peers.request(to, message).await.map(|answer| (to, answer))
                    }));
                }
                ClientOutput::Done { op, result } => match (self.waiting.remove(&op), result) {
                    (Some(Waiting::Read(done)), OpResult::Read(result)) => {
                        self.count_read(&result);
                        let _ = done.send(result);
                    }
                    (Some(Waiting::Basis(done)), OpResult::Read(result)) => {
                        self.count_read(&result);
                        let _ = done.send(result.map(|read| Basis::of_read(&read)));
                    }
                    (
                        Some(Waiting::Commit(done, started, eg)),
                        OpResult::Commit { txn, result },
                    ) => {
                        self.count_commit(&eg, &result, started);
                        let _ = done.send(Committed { txn, result });
                    }
                    (Some(Waiting::Resolve(done, eg)), OpResult::Resolve(resolution)) => {
                        // A commit whose outcome was unknown, found committed: the
                        // group's count includes it (the metrics counted it unknown).
                        if matches!(resolution, Resolution::Committed(_)) {
                            self.hot.committed(&eg);
                        }
                        let _ = done.send(resolution);
                    }
                    (Some(Waiting::Verify(done)), OpResult::Verify(checked)) => {
                        let _ = done.send(checked);
                    }
                    (Some(Waiting::Deliver(done)), OpResult::Deliver(delivery)) => {
                        let _ = done.send(delivery);
                    }
                    (Some(Waiting::TwoPhase(done)), OpResult::TwoPhase { result, .. }) => {
                        match &result {
                            TwoPhaseResult::Committed { .. } => self.metrics.two_phase("committed"),
                            TwoPhaseResult::Aborted { .. } => self.metrics.two_phase("aborted"),
                            TwoPhaseResult::Unknown { .. } => self.metrics.two_phase("unknown"),
                        }
                        let _ = done.send(Ok(result));
                    }
                    (Some(Waiting::Decision(done)), OpResult::Decision(outcome)) => {
                        let _ = done.send(outcome);
                    }
                    (Some(Waiting::Settle(done)), OpResult::Settled(settled)) => {
                        let _ = done.send(settled);
                    }
                    (Some(Waiting::Collect(done)), OpResult::Collected(collected)) => {
                        let _ = done.send(collected);
                    }
                    _ => {}
                },
                ClientOutput::WakeAt(at) => self.wake = Some(at),
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
