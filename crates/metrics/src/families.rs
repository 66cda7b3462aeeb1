//! The metric families of each kind of process.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// One label, as `(name, value)`.
type Label = [(&'static str, &'static str); 1];
/// A label whose value is made at run time (a range's name).
type RangeLabel = [(&'static str, String); 1];

/// Latency buckets in seconds: 100 µs to about 26 s.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

/// How a read was served, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPathLabel {
    /// At the local replica, vouched by its coordinator.
    Local,
    /// After asking a majority.
    Majority,
    /// A snapshot read.
    Snapshot,
    /// An inconsistent read.
    Inconsistent,
    /// A transaction's read at its position (after its first read).
    AtPosition,
}

impl ReadPathLabel {
    fn name(self) -> &'static str {
        match self {
            ReadPathLabel::Local => "local",
            ReadPathLabel::Majority => "majority",
            ReadPathLabel::Snapshot => "snapshot",
            ReadPathLabel::Inconsistent => "inconsistent",
            ReadPathLabel::AtPosition => "at_position",
        }
    }
}

/// The counters of a [`ClientMetrics`] now (what its scrape would say), for views that
/// take differences over time (`megastore top`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientTotals {
    /// Transactions committed (either path).
    pub commits: u64,
    /// Commits that lost their position.
    pub conflicts: u64,
    /// Commits whose outcome was unknown.
    pub unknown_outcomes: u64,
    /// Current reads served locally (vouched).
    pub reads_local: u64,
    /// Current reads that asked a majority.
    pub reads_majority: u64,
    /// Snapshot, inconsistent and at-a-position reads.
    pub reads_other: u64,
    /// Reads that gave up.
    pub read_failures: u64,
}

/// What a client library (a program's, or a replica's public-API gateway) did.
#[derive(Debug, Clone)]
pub struct ClientMetrics {
    commits: Family<Label, Counter>,
    conflicts: Counter,
    unknown: Counter,
    aborted: Counter,
    reads: Family<Label, Counter>,
    read_failures: Counter,
    invalidations: Counter,
    commit_seconds: Family<Label, Histogram, fn() -> Histogram>,
    two_phase: Family<Label, Counter>,
    blind_unread: Counter,
    relayed: Family<Label, Counter>,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        Self {
            commits: Family::default(),
            conflicts: Counter::default(),
            unknown: Counter::default(),
            aborted: Counter::default(),
            reads: Family::default(),
            read_failures: Counter::default(),
            invalidations: Counter::default(),
            commit_seconds: Family::new_with_constructor(latency_buckets),
            two_phase: Family::default(),
            blind_unread: Counter::default(),
            relayed: Family::default(),
        }
    }
}

impl ClientMetrics {
    /// Registers every family in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("megastore_client");
        r.register(
            "commits",
            "Transactions committed, by path: fast (ballot 0 at the leader, one round trip) or slow",
            self.commits.clone(),
        );
        r.register(
            "conflicts",
            "Commits that lost their position to another writer",
            self.conflicts.clone(),
        );
        r.register(
            "unknown_outcomes",
            "Commits whose outcome the proposer could not learn",
            self.unknown.clone(),
        );
        r.register(
            "aborted",
            "Commits that sent nothing that could be chosen",
            self.aborted.clone(),
        );
        r.register(
            "reads",
            "Reads, by how they were served (local, majority, snapshot, inconsistent)",
            self.reads.clone(),
        );
        r.register(
            "read_failures",
            "Reads that gave up",
            self.read_failures.clone(),
        );
        r.register(
            "invalidations",
            "Invalidations sent to coordinators of replicas that missed a write",
            self.invalidations.clone(),
        );
        r.register(
            "commit_seconds",
            "Time from commit request to outcome, by path",
            self.commit_seconds.clone(),
        );
        r.register(
            "two_phase_commits",
            "Transactions across groups, by outcome (committed, aborted, unknown)",
            self.two_phase.clone(),
        );
        r.register(
            "blind_writes_unread",
            "Blind writes sent on the read of the client's commit in flight to their group, without a read of their own",
            self.blind_unread.clone(),
        );
        r.register(
            "commits_relayed",
            "Commits relayed through a replica's shared client because their group was hot (docs/protocol.md, \"Relayed commits\"), sent (by this client) or served (by this client, as a replica's relay)",
            self.relayed.clone(),
        );
    }

    /// A relayed commit was sent, or served (`sent`, `served`).
    pub fn relayed(&self, what: &'static str) {
        self.relayed.get_or_create(&[("what", what)]).inc();
    }

    /// Relayed commits so far that were `what` (see [`relayed`](Self::relayed)).
    pub fn relayed_count(&self, what: &'static str) -> u64 {
        self.relayed.get_or_create(&[("what", what)]).get()
    }

    /// Reads so far served by `path`.
    pub fn read_count(&self, path: ReadPathLabel) -> u64 {
        // `get`, not `get_or_create`: reading adds no series to the scrape.
        let label = [("path", path.name())];
        self.reads.get(&label).map_or(0, |c| c.get())
    }

    /// A blind write went on the read of a commit in flight.
    pub fn blind_write_unread(&self) {
        self.blind_unread.inc();
    }

    /// Blind writes sent so far on the read of a commit in flight.
    pub fn blind_writes_unread(&self) -> u64 {
        self.blind_unread.get()
    }

    /// A transaction across groups ended so (`committed`, `aborted`, `unknown`).
    pub fn two_phase(&self, outcome: &'static str) {
        self.two_phase.get_or_create(&[("outcome", outcome)]).inc();
    }

    /// A transaction committed (on the fast path or not) after `seconds`.
    pub fn committed(&self, fast: bool, seconds: f64) {
        let path = [("path", if fast { "fast" } else { "slow" })];
        self.commits.get_or_create(&path).inc();
        self.commit_seconds.get_or_create(&path).observe(seconds);
    }

    /// A commit lost its position.
    pub fn conflicted(&self) {
        self.conflicts.inc();
    }

    /// A commit's outcome was unknown.
    pub fn outcome_unknown(&self) {
        self.unknown.inc();
    }

    /// A commit sent nothing that could be chosen.
    pub fn aborted(&self) {
        self.aborted.inc();
    }

    /// A read was served.
    pub fn read(&self, path: ReadPathLabel) {
        self.reads.get_or_create(&[("path", path.name())]).inc();
    }

    /// A read gave up.
    pub fn read_failed(&self) {
        self.read_failures.inc();
    }

    /// An invalidation was sent.
    pub fn invalidation_sent(&self) {
        self.invalidations.inc();
    }

    /// Every counter's value now.
    pub fn totals(&self) -> ClientTotals {
        // `get`, not `get_or_create`: reading adds no series to the scrape.
        let commits = |path| self.commits.get(&[("path", path)]).map_or(0, |c| c.get());
        let reads = |path: ReadPathLabel| self.read_count(path);
        ClientTotals {
            commits: commits("fast") + commits("slow"),
            conflicts: self.conflicts.get(),
            unknown_outcomes: self.unknown.get(),
            reads_local: reads(ReadPathLabel::Local),
            reads_majority: reads(ReadPathLabel::Majority),
            reads_other: reads(ReadPathLabel::Snapshot)
                + reads(ReadPathLabel::Inconsistent)
                + reads(ReadPathLabel::AtPosition),
            read_failures: self.read_failures.get(),
        }
    }
}

/// What a replica server did.
#[derive(Debug, Clone)]
pub struct ReplicaMetrics {
    requests: Family<Label, Counter>,
    accepts: Family<Label, Counter>,
    wal_syncs: Histogram,
    batch_events: Histogram,
    call_requests: Histogram,
    applied: Counter,
    snapshot_installs: Counter,
    snapshot_installs_failed: Counter,
    catchup_requests: Counter,
    groups_behind: Gauge,
    positions_behind: Gauge,
    outboxes_waiting: Gauge,
    messages_delivered: Counter,
    prepared_waiting: Gauge,
    prepared_settled: Family<Label, Counter>,
    decisions_waiting: Gauge,
    decisions_collected: Counter,
    groups_loaded: Gauge,
    groups_evicted: Counter,
    placement_version: Gauge,
    ranges_held: Gauge,
    range_applied: Family<RangeLabel, Counter>,
    range_bytes: Family<RangeLabel, Gauge>,
}

impl Default for ReplicaMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            accepts: Family::default(),
            wal_syncs: latency_buckets(),
            batch_events: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            call_requests: Histogram::new(exponential_buckets(1.0, 2.0, 9)),
            applied: Counter::default(),
            snapshot_installs: Counter::default(),
            snapshot_installs_failed: Counter::default(),
            catchup_requests: Counter::default(),
            groups_behind: Gauge::default(),
            placement_version: Gauge::default(),
            ranges_held: Gauge::default(),
            range_applied: Family::default(),
            range_bytes: Family::default(),
            positions_behind: Gauge::default(),
            outboxes_waiting: Gauge::default(),
            messages_delivered: Counter::default(),
            prepared_waiting: Gauge::default(),
            prepared_settled: Family::default(),
            decisions_waiting: Gauge::default(),
            decisions_collected: Counter::default(),
            groups_loaded: Gauge::default(),
            groups_evicted: Counter::default(),
        }
    }
}

impl ReplicaMetrics {
    /// Registers every family in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("megastore_replica");
        r.register(
            "requests",
            "Replication requests received, by kind",
            self.requests.clone(),
        );
        r.register(
            "accepts",
            "Accept requests received, by ballot: zero (the fast path) or higher",
            self.accepts.clone(),
        );
        r.register(
            "wal_sync_seconds",
            "RocksDB WAL syncs (one per batch of requests) and their latency",
            self.wal_syncs.clone(),
        );
        r.register(
            "batch_events",
            "Events handled per batch (that share one WAL sync)",
            self.batch_events.clone(),
        );
        r.register(
            "call_requests",
            "Replication gRPC calls and session messages received and the requests each carried (Call: one; CallMany: a sender's batch; Session: what the sender had queued)",
            self.call_requests.clone(),
        );
        r.register("applied", "Log entries applied", self.applied.clone());
        r.register(
            "snapshot_installs",
            "Snapshots installed (catching up past a peer's truncation)",
            self.snapshot_installs.clone(),
        );
        r.register(
            "snapshot_installs_failed",
            "Snapshots asked for and not installed (no answer, or refused): the group stays behind until one is",
            self.snapshot_installs_failed.clone(),
        );
        r.register(
            "catchup_requests",
            "Log reads and snapshot requests this replica sent to catch up",
            self.catchup_requests.clone(),
        );
        r.register(
            "groups_behind",
            "Loaded groups with positions this replica has seen but not applied (a global index scan here may miss them)",
            self.groups_behind.clone(),
        );
        r.register(
            "positions_behind",
            "Positions this replica has seen (accepted, promised, marked visible) but not applied, over its loaded groups; writes it has not heard of are not counted",
            self.positions_behind.clone(),
        );
        r.register(
            "outboxes_waiting",
            "Groups whose queue messages this full replica has yet to deliver (or see delivered)",
            self.outboxes_waiting.clone(),
        );
        r.register(
            "messages_delivered",
            "Queue messages this replica's deliveries committed into receivers' inboxes",
            self.messages_delivered.clone(),
        );
        r.register(
            "prepared_waiting",
            "Groups with cross-group transactions prepared that this full replica has yet to see finished",
            self.prepared_waiting.clone(),
        );
        r.register(
            "prepared_settled",
            "Prepared cross-group transactions this replica's sweep finished, by decision (committed, aborted)",
            self.prepared_settled.clone(),
        );
        r.register(
            "decisions_waiting",
            "Coordinator groups whose two-phase decision rows this full replica will look at for collection",
            self.decisions_waiting.clone(),
        );
        r.register(
            "decisions_collected",
            "Two-phase decision rows this replica's collection deleted (older than the retention, finished everywhere)",
            self.decisions_collected.clone(),
        );
        r.register(
            "groups_loaded",
            "Entity groups whose state this replica holds in memory (its group cache, [[replicas]] cache_groups)",
            self.groups_loaded.clone(),
        );
        r.register(
            "groups_evicted",
            "Quiescent groups dropped from memory to keep the group cache within its bound (loaded again when next used)",
            self.groups_evicted.clone(),
        );
        r.register(
            "placement_version",
            "The version of the placement this replica judges requests by (read from lockd)",
            self.placement_version.clone(),
        );
        r.register(
            "ranges_held",
            "Ranges whose slot of this replica the placement puts on this server (frozen ones included)",
            self.ranges_held.clone(),
        );
        r.register(
            "range_applied",
            "Log entries applied, by the range their group is in (range-<id>): each range's commits",
            self.range_applied.clone(),
        );
        r.register(
            "range_bytes",
            "Bytes a range's groups take in this replica server's store, every version, as last measured (every 30 s); a range moved away is set to 0",
            self.range_bytes.clone(),
        );
    }

    /// Range `range` was measured at `bytes` here.
    pub fn range_bytes(&self, range: u64, bytes: u64) {
        self.range_bytes
            .get_or_create(&[("range", format!("range-{range}"))])
            .set(gauge_value(bytes));
    }

    /// `entries` were applied in range `range`.
    pub fn range_applied(&self, range: u64, entries: u64) {
        self.range_applied
            .get_or_create(&[("range", format!("range-{range}"))])
            .inc_by(entries);
    }

    /// The replica judges by placement `version`, which puts `ranges` on its server.
    pub fn placement(&self, version: u64, ranges: usize) {
        self.placement_version.set(gauge_value(version));
        self.ranges_held
            .set(i64::try_from(ranges).unwrap_or(i64::MAX));
    }

    /// The group cache: `loaded` groups in memory, `evicted` more dropped since the
    /// last call.
    pub fn group_cache(&self, loaded: usize, evicted: u64) {
        self.groups_loaded
            .set(i64::try_from(loaded).unwrap_or(i64::MAX));
        self.groups_evicted.inc_by(evicted);
    }

    /// How many groups' prepared transactions wait for this replica's sweep.
    pub fn prepared_waiting(&self, groups: usize) {
        self.prepared_waiting
            .set(i64::try_from(groups).unwrap_or(i64::MAX));
    }

    /// The sweep finished prepared transactions: `committed` and `aborted` of them.
    pub fn prepared_settled(&self, committed: u64, aborted: u64) {
        self.prepared_settled
            .get_or_create(&[("decision", "committed")])
            .inc_by(committed);
        self.prepared_settled
            .get_or_create(&[("decision", "aborted")])
            .inc_by(aborted);
    }

    /// How many coordinator groups wait for this replica's collection of decisions.
    pub fn decisions_waiting(&self, groups: usize) {
        self.decisions_waiting
            .set(i64::try_from(groups).unwrap_or(i64::MAX));
    }

    /// The collection deleted `rows` decision rows.
    pub fn decisions_collected(&self, rows: u64) {
        self.decisions_collected.inc_by(rows);
    }

    /// How many groups' outboxes wait for this replica's delivery.
    pub fn outboxes_waiting(&self, groups: usize) {
        self.outboxes_waiting
            .set(i64::try_from(groups).unwrap_or(i64::MAX));
    }

    /// A delivery committed `messages` into inboxes.
    pub fn delivered(&self, messages: u64) {
        self.messages_delivered.inc_by(messages);
    }

    /// How far behind what it has heard of the replica is (updated every sweep tick).
    pub fn lag(&self, groups: u64, positions: u64) {
        self.groups_behind
            .set(i64::try_from(groups).unwrap_or(i64::MAX));
        self.positions_behind
            .set(i64::try_from(positions).unwrap_or(i64::MAX));
    }

    /// A request of `kind` arrived.
    pub fn request(&self, kind: &'static str) {
        self.requests.get_or_create(&[("kind", kind)]).inc();
    }

    /// An accept arrived, at ballot zero or not.
    pub fn accept(&self, ballot_zero: bool) {
        let ballot = if ballot_zero { "zero" } else { "higher" };
        self.accepts.get_or_create(&[("ballot", ballot)]).inc();
    }

    /// The WAL was synced in `seconds`.
    pub fn wal_synced(&self, seconds: f64) {
        self.wal_syncs.observe(seconds);
    }

    /// A gRPC call, or a session message, carrying `requests` requests arrived.
    pub fn call(&self, requests: usize) {
        self.call_requests.observe(requests as f64);
    }

    /// A batch of `events` was handled.
    pub fn batch(&self, events: usize) {
        self.batch_events.observe(events as f64);
    }

    /// A batch of the driver loop applied `applied` entries, installed `installs`
    /// snapshots and sent `catchup_requests` catch-up requests.
    pub fn batch_done(&self, applied: u64, installs: u64, catchup_requests: u64) {
        self.applied.inc_by(applied);
        self.snapshot_installs.inc_by(installs);
        self.catchup_requests.inc_by(catchup_requests);
    }

    /// A snapshot asked for was not installed.
    pub fn install_failed(&self) {
        self.snapshot_installs_failed.inc();
    }
}

/// What a coordinator did.
#[derive(Debug, Clone, Default)]
pub struct CoordinatorMetrics {
    requests: Family<Label, Counter>,
    queries: Family<Label, Counter>,
    lock_held: Gauge,
    epoch: Gauge,
    placement_version: Gauge,
    ranges_held: Gauge,
}

impl CoordinatorMetrics {
    /// Registers every family in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("megastore_coordinator");
        r.register(
            "requests",
            "Requests received, by kind (query, validate, invalidate)",
            self.requests.clone(),
        );
        r.register(
            "queries",
            "Queries answered, by whether the coordinator vouched",
            self.queries.clone(),
        );
        r.register(
            "lock_held",
            "1 while the coordinator holds its lock (and so serves), else 0",
            self.lock_held.clone(),
        );
        r.register(
            "epoch",
            "The epoch (lock sequencer) it serves in; 0 when it holds no lock",
            self.epoch.clone(),
        );
        r.register(
            "placement_version",
            "The version of the placement it vouches by (read from lockd); 0 until it has read one",
            self.placement_version.clone(),
        );
        r.register(
            "ranges_held",
            "Ranges whose slot of its replica the placement puts on its server",
            self.ranges_held.clone(),
        );
    }

    /// It vouches by placement `version`, which puts `ranges` on its server.
    pub fn placement(&self, version: u64, ranges: usize) {
        self.placement_version.set(gauge_value(version));
        self.ranges_held
            .set(i64::try_from(ranges).unwrap_or(i64::MAX));
    }

    /// A request of `kind` arrived.
    pub fn request(&self, kind: &'static str) {
        self.requests.get_or_create(&[("kind", kind)]).inc();
    }

    /// A query was answered.
    pub fn query(&self, vouched: bool) {
        let vouched = if vouched { "true" } else { "false" };
        self.queries.get_or_create(&[("vouched", vouched)]).inc();
    }

    /// The lock is held in `epoch` (or not, `None`).
    pub fn lock(&self, epoch: Option<u64>) {
        self.lock_held.set(i64::from(epoch.is_some()));
        self.epoch
            .set(epoch.map_or(0, |e| i64::try_from(e).unwrap_or(i64::MAX)));
    }
}

/// What a lockd node did, and how it sees Raft.
#[derive(Debug, Clone, Default)]
pub struct LockdMetrics {
    commands: Family<Label, Counter>,
    is_leader: Gauge,
    term: Gauge,
    last_log_index: Gauge,
    applied_index: Gauge,
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl LockdMetrics {
    /// Registers every family in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("megastore_lockd");
        r.register(
            "commands",
            "Lock commands answered, by result (ok, refused, not_leader, unavailable)",
            self.commands.clone(),
        );
        r.register(
            "is_leader",
            "1 while this node leads",
            self.is_leader.clone(),
        );
        r.register("term", "The Raft term", self.term.clone());
        r.register(
            "last_log_index",
            "The last Raft log index",
            self.last_log_index.clone(),
        );
        r.register(
            "applied_index",
            "The last Raft log index applied to the lock service",
            self.applied_index.clone(),
        );
    }

    /// A command was answered with `result`.
    pub fn command(&self, result: &'static str) {
        self.commands.get_or_create(&[("result", result)]).inc();
    }

    /// How this node sees Raft now.
    pub fn raft(&self, leader: bool, term: u64, last_log_index: u64, applied_index: u64) {
        self.is_leader.set(i64::from(leader));
        self.term.set(gauge_value(term));
        self.last_log_index.set(gauge_value(last_log_index));
        self.applied_index.set(gauge_value(applied_index));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode;

    #[test]
    fn recorded_values_appear_in_the_text() {
        let mut registry = Registry::default();
        let client = ClientMetrics::default();
        let replica = ReplicaMetrics::default();
        client.register(&mut registry);
        replica.register(&mut registry);
        client.committed(true, 0.002);
        client.committed(true, 0.003);
        client.committed(false, 0.2);
        client.read(ReadPathLabel::Local);
        replica.wal_synced(0.001);
        replica.accept(true);
        let text = encode(&registry);
        assert!(
            text.contains("megastore_client_commits_total{path=\"fast\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("megastore_client_commits_total{path=\"slow\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("megastore_client_reads_total{path=\"local\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("megastore_replica_wal_sync_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("megastore_replica_accepts_total{ballot=\"zero\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# HELP megastore_client_conflicts_total"),
            "{text}"
        );
    }
}
