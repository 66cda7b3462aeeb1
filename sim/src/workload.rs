//! The simulated clients' workload: read-modify-write transactions, blind writes,
//! reads in all three modes, verified global index scans, queue messages and
//! transactions across groups (`two_phase.rs`), over a few keys per group so that
//! writers contend.

mod two_phase;

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::queue::{self, Delivery};
use megastore_paxos::{
    Basis, CellWrite, CheckedHit, ClientCore, ClientOutput, CommitResult, DataQuery, GlobalHit,
    OpId, OpResult, ReadMode, ReadResult, Resolution, RowWrite, global_mirror_range, mirror_row_of,
};
use megastore_rowstore::KeyRange;
use megastore_types::reserved::GLOBAL_INDEX_TAG;
use megastore_types::{ClientId, EgId, NodeId, Position, ReplicaId, SiteId, Time, TxnId};

use crate::history::{OpKind, OpRecord, Outcome, VerifiedHit};
use crate::rng::Rng;

/// What a client mostly does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Reads and writes.
    Mixed,
    /// Reads only (current, snapshot, inconsistent).
    Reader,
    /// Writes only (read-modify-write and blind).
    Writer,
}

/// The column every simulated row uses.
pub(crate) const COLUMN: &[u8] = b"v";

/// The entity group number `g`.
pub(crate) fn group(g: u16) -> EgId {
    EgId(format!("g{g}").into_bytes())
}

/// Row `k` of a group.
pub(crate) fn row(eg: &EgId, k: u8) -> Vec<u8> {
    [eg.0.as_slice(), &[KEY_ENTRIES, b'k', b'0' + k]].concat()
}

/// The byte after the group in a data row (and in its global index entry,
/// `0xFD ‖ row`).
const KEY_ENTRIES: u8 = 1;

/// The byte after the group in a commit's own global index entry.
const LOG_ENTRIES: u8 = 2;

/// The global index row `0xFD ‖ eg ‖ rest`: every simulated entry names its group
/// (as an entity's entry names its primary key, hence its group), so a verified scan
/// knows which group's mirror to read.
fn global_row(eg: &EgId, rest: &[u8]) -> Vec<u8> {
    [&[GLOBAL_INDEX_TAG], eg.0.as_slice(), rest].concat()
}

/// The group a global index row names (group names are `g` and digits, so the first
/// byte below a digit ends it).
fn group_of_global_row(row: &[u8]) -> Option<EgId> {
    let rest = row.strip_prefix(&[GLOBAL_INDEX_TAG])?;
    let end = rest.iter().position(|b| *b < b'0')?;
    Some(EgId(rest[..end].to_vec()))
}

#[derive(Debug)]
enum Plan {
    /// Write new values to these keys, having read them.
    ReadModifyWrite(Vec<Vec<u8>>),
    /// Write these keys, depending on no read.
    Blind(Vec<Vec<u8>>),
    /// Read the group again at the position the first read found, as a
    /// transaction's later reads do.
    ReadAgain,
    /// Consume the queue messages read (the read was of the group's inbox).
    Consume,
}

#[derive(Debug)]
enum State {
    Idle,
    Reading {
        op: OpId,
        kind: OpKind,
        eg: EgId,
        start: u64,
        plan: Option<Plan>,
        /// For a read at a position: the transaction's position, which the answer
        /// must show whatever position it claims.
        at: Option<Position>,
    },
    Committing {
        op: OpId,
        eg: EgId,
        start: u64,
        read_position: Position,
        read_keys: BTreeSet<Vec<u8>>,
    },
    /// The commit's outcome was unknown: settling its position to find out.
    Resolving {
        op: OpId,
        commit: Unresolved,
    },
    /// A global index scan, whose hits are verified next.
    Scanning {
        op: OpId,
        start: u64,
    },
    /// Checking a scan's hits against their groups' mirrors.
    Verifying {
        op: OpId,
        start: u64,
    },
    /// The whole global index, scanned as applied once the run is over.
    FinalScan {
        op: OpId,
    },
    /// Delivering a group's outbox.
    Delivering {
        op: OpId,
        eg: EgId,
        start: u64,
    },
    /// A transaction across groups: reading them, committing, resolving, settling.
    TwoPhase(two_phase::Multi),
}

/// The queue the workload's messages go to.
pub(crate) const QUEUE: &str = "q";

/// How many groups a verification reads at once (the client library's bound is
/// larger; two is enough to interleave).
const VERIFY_IN_FLIGHT: usize = 2;

/// A commit whose outcome is being resolved.
#[derive(Debug)]
struct Unresolved {
    eg: EgId,
    start: u64,
    txn: TxnId,
    position: Position,
    /// `position` is its first: it may hold any position of its commit span (a
    /// relayed commit whose relay did not answer).
    span: bool,
    read_position: Position,
    read_keys: BTreeSet<Vec<u8>>,
    /// When the commit ended unknown (the client's clock).
    since: Time,
}

/// A transaction committed beside the one in `State::Committing`, from the same read:
/// the core makes it wait for its group's lane and may combine it with others
/// (docs/protocol.md, "Combining commits").
#[derive(Debug)]
struct Companion {
    op: OpId,
    eg: EgId,
    start: u64,
    read_position: Position,
    read_keys: BTreeSet<Vec<u8>>,
    /// A blind write that took the read of the commit in flight instead of reading.
    unread: bool,
}

/// A blind write whose basis a commit in flight lent before its writes were made,
/// committed later (when a companion finishes, or before the next operation): as the
/// public API's blind Begin fixes its position, and its Commit comes after its Writes.
struct Deferred {
    eg: EgId,
    basis: Basis,
    start: u64,
}

/// A resolution racing a companion commit still in flight: as a client whose answer
/// was lost does, knowing only the transaction's first position (a gRPC client's
/// Begin id), while the writer goes on.
struct Racer {
    op: OpId,
    eg: EgId,
    start: u64,
    txn: TxnId,
    first: Position,
}

/// One simulated client: its protocol core and what it is doing.
pub(crate) struct ClientNode {
    /// Its id.
    pub id: ClientId,
    /// Its site.
    pub site: SiteId,
    /// The protocol.
    pub core: ClientCore,
    state: State,
    /// Commits in flight beside the state's.
    companions: Vec<Companion>,
    /// Resolutions racing companions in flight.
    racers: Vec<Racer>,
    rng: Rng,
    groups: u16,
    keys: u8,
    writes: u64,
    /// Only blind writes (for measuring commits).
    pub writes_only: bool,
    /// Whether it runs verified global index scans, one operation in twenty.
    pub verified_scans: bool,
    /// Whether it sends, delivers and consumes queue messages.
    pub queues: bool,
    /// Whether it runs transactions across groups and settles groups' prepared ones.
    pub two_phase: bool,
    /// Whether it runs nothing but transactions across groups, and never dies in one.
    pub two_phase_only: bool,
    /// A crash it plans for itself (real time from now, ns), during a cross-group
    /// commit: the world carries it out ([`ClientNode::take_planned_crash`]).
    planned_crash: Option<u64>,
    /// Its cross-group commits so far (a planned crash names the one it meant).
    two_phase_serial: u64,
    /// The real time (ns) from which it delivers (before it, its deliveries are
    /// skipped, so outboxes grow).
    pub deliver_from: u64,
    /// What it mostly does.
    pub role: Role,
    /// Its blind writes committed without a read of their own.
    pub committed_unread: u64,
    /// Per group, an older position one of its reads found: a transaction open for a
    /// long time reads again there, below where garbage collection may have reached.
    remembered: BTreeMap<EgId, Position>,
    /// A relay, beside the full replica's server at this address (docs/protocol.md,
    /// "Relayed commits"): it commits what clients relay to it.
    pub relay_of: Option<ReplicaId>,
    /// As a relay, whether it also runs a workload of its own, as a replica's gateway
    /// commits the gRPC API's transactions.
    pub gateway: bool,
    /// As a relay: the commits it is making, and whose request each answers.
    relayed: BTreeMap<OpId, (NodeId, u64)>,
    /// A blind write lent its basis, not committed yet.
    deferred: Option<Deferred>,
    /// What its scan of the whole global index after the run found (`Some` once it
    /// finished): each entry's row and value, or why the scan failed.
    pub final_scan: Option<crate::invariants::FinalScan>,
}

impl ClientNode {
    /// A client running `core`, choosing among `groups` groups of `keys` keys.
    pub(crate) fn new(
        id: ClientId,
        site: SiteId,
        core: ClientCore,
        seed: u64,
        groups: u16,
        keys: u8,
    ) -> Self {
        Self {
            id,
            site,
            core,
            state: State::Idle,
            companions: Vec::new(),
            racers: Vec::new(),
            rng: Rng::new(seed),
            groups,
            keys,
            writes: 0,
            writes_only: false,
            verified_scans: false,
            queues: false,
            two_phase: false,
            two_phase_only: false,
            planned_crash: None,
            two_phase_serial: 0,
            deliver_from: 0,
            role: Role::Mixed,
            committed_unread: 0,
            remembered: BTreeMap::new(),
            relay_of: None,
            gateway: false,
            relayed: BTreeMap::new(),
            deferred: None,
            final_scan: None,
        }
    }

    /// Scans the whole global index as applied, when the run is over and everything
    /// has converged (*scan-asks-every-holder*): the result goes to `final_scan`.
    pub(crate) fn start_final_scan(&mut self, now: Time) -> Vec<ClientOutput> {
        let range = megastore_paxos::global_index_range();
        let (op, out) = self.core.scan_global(now, range, None, false);
        self.state = State::FinalScan { op };
        // Replaced by the result when the scan finishes.
        self.final_scan = Some(Err("it did not finish".into()));
        out
    }

    /// Whether it waits for an operation.
    pub(crate) fn busy(&self) -> bool {
        !matches!(self.state, State::Idle) || !self.companions.is_empty() || !self.racers.is_empty()
    }

    fn all_rows(&self, eg: &EgId) -> Vec<Vec<u8>> {
        (0..self.keys).map(|k| row(eg, k)).collect()
    }

    /// The whole group, by its keys or (now and then) as a scan of its data rows.
    fn group_query(&mut self, eg: &EgId) -> DataQuery {
        if self.rng.chance(0.3) {
            DataQuery::Scan {
                range: megastore_paxos::data_range(eg),
                limit: None,
                reverse: false,
            }
        } else {
            DataQuery::Rows(self.all_rows(eg))
        }
    }

    fn some_rows(&mut self, eg: &EgId) -> Vec<Vec<u8>> {
        let first = self.rng.below(u64::from(self.keys)) as u8;
        let mut rows = vec![row(eg, first)];
        if self.rng.chance(0.4) {
            let second = self.rng.below(u64::from(self.keys)) as u8;
            if second != first {
                rows.push(row(eg, second));
            }
        }
        rows
    }

    /// Starts the next operation.
    pub(crate) fn start_next(&mut self, real: u64, now: Time) -> Vec<ClientOutput> {
        if self.relay_of.is_some() && !self.gateway {
            return Vec::new();
        }
        if self.deferred.is_some() {
            return self.commit_deferred(real, now);
        }
        if self.two_phase_only {
            return self.start_two_phase(real, now);
        }
        if self.two_phase && !self.writes_only {
            if self.rng.chance(0.06) {
                return self.start_two_phase(real, now);
            }
            if self.rng.chance(0.03) {
                return self.start_settle(real, now);
            }
        }
        let eg = group(self.rng.below(u64::from(self.groups)) as u16);
        if self.verified_scans && !self.writes_only && self.rng.chance(0.05) {
            return self.scan_global(real, now, &eg);
        }
        if self.queues && !self.writes_only {
            if self.rng.chance(0.05) && real >= self.deliver_from {
                let (op, out) = self.core.deliver(now, eg.clone());
                self.state = State::Delivering {
                    op,
                    eg,
                    start: real,
                };
                return out;
            }
            if self.rng.chance(0.05) {
                // The whole group, inbox included, as every workload read does (the
                // checkers compare a current read with the whole state).
                let query = DataQuery::Scan {
                    range: megastore_paxos::data_range(&eg),
                    limit: None,
                    reverse: false,
                };
                let (op, out) = self.core.read(now, eg.clone(), ReadMode::Current, query);
                self.state = State::Reading {
                    op,
                    kind: OpKind::CurrentRead,
                    eg,
                    start: real,
                    plan: Some(Plan::Consume),
                    at: None,
                };
                return out;
            }
        }
        let query = self.group_query(&eg);
        let dice = match (self.writes_only, self.role) {
            (true, _) => 50,
            (false, Role::Mixed) => self.rng.below(100),
            (false, Role::Reader) => 60 + self.rng.below(40),
            (false, Role::Writer) => self.rng.below(60),
        };
        let (mode, kind, plan) = match dice {
            0..45 => (
                ReadMode::Current,
                OpKind::CurrentRead,
                Some(Plan::ReadModifyWrite(self.some_rows(&eg))),
            ),
            45..60 => (
                ReadMode::Current,
                OpKind::CurrentRead,
                Some(Plan::Blind(self.some_rows(&eg))),
            ),
            60..70 => (ReadMode::Current, OpKind::CurrentRead, None),
            70..80 => (
                ReadMode::Current,
                OpKind::CurrentRead,
                Some(Plan::ReadAgain),
            ),
            80..92 => (ReadMode::Snapshot, OpKind::SnapshotRead, None),
            _ => (ReadMode::Inconsistent, OpKind::InconsistentRead, None),
        };
        let (op, kind, out) = if matches!(plan, Some(Plan::Blind(_))) {
            // A blind write's basis is the core's to choose (a snapshot read while the
            // group's commits are relayed), as it is for the client library's. (No
            // commit of this client is in flight to lend one: it starts an operation
            // only when its companions are done; `late_blind_companion` borrows.)
            let (op, mode, out) = self.core.read_basis(now, eg.clone(), query);
            let kind = match mode {
                ReadMode::Snapshot => OpKind::SnapshotRead,
                _ => OpKind::CurrentRead,
            };
            (op, kind, out)
        } else {
            let (op, out) = self.core.read(now, eg.clone(), mode, query);
            (op, kind, out)
        };
        self.state = State::Reading {
            op,
            kind,
            eg,
            start: real,
            plan,
            at: None,
        };
        out
    }

    /// As a relay: commits `commit`, relayed by `from` as its request `id`.
    pub(crate) fn serve_relay(
        &mut self,
        now: Time,
        from: NodeId,
        id: u64,
        commit: megastore_paxos::RelayedCommit,
    ) -> Vec<ClientOutput> {
        let (op, out) = self.core.commit_relayed(now, commit);
        self.relayed.insert(op, (from, id));
        out
    }

    /// As a relay whose replica crashed: a new process, under `new_id`, with nothing in
    /// flight (its answers are lost; the writers resolve their commits themselves). Of
    /// its own operations, the commits it was making (or resolving) end unknown, as a
    /// crashed client's do: their records.
    pub(crate) fn restart_relay(
        &mut self,
        real: u64,
        new_id: ClientId,
        seed: u64,
    ) -> Vec<OpRecord> {
        let mut config = self.core.config().clone();
        config.id = new_id;
        config.proposer.proposer = megastore_types::ProposerId::client(new_id);
        config.seed = seed;
        self.core = restarted(&self.core, config);
        self.relayed.clear();
        let unknown = |eg: EgId, start: u64| OpRecord {
            client: self.id,
            eg,
            kind: OpKind::Commit,
            start,
            end: real,
            outcome: Outcome::Unknown,
        };
        let mut records: Vec<OpRecord> = self
            .companions
            .drain(..)
            .map(|c| unknown(c.eg, c.start))
            .collect();
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Committing { eg, start, .. } => records.push(unknown(eg, start)),
            State::Resolving { commit, .. } => records.push(unknown(commit.eg, commit.start)),
            // A read changes nothing; a relay runs nothing else of its own.
            _ => {}
        }
        self.racers.clear();
        self.deferred = None;
        records
    }

    /// An operation finished: the record of what it did, and the next step's outputs.
    pub(crate) fn on_done(
        &mut self,
        real: u64,
        now: Time,
        op: OpId,
        result: OpResult,
    ) -> (Vec<OpRecord>, Vec<ClientOutput>) {
        let mut records = Vec::new();
        let mut out = Vec::new();
        if let Some((to, id)) = self.relayed.remove(&op) {
            // A relay answers the writer; the writer records the outcome.
            if let OpResult::Commit { txn, result } = result {
                out.push(ClientOutput::Send {
                    to,
                    message: megastore_paxos::Message::RelayOutcome { id, txn, result },
                });
            }
            return (records, out);
        }
        if let Some(i) = self.racers.iter().position(|r| r.op == op) {
            let racer = self.racers.swap_remove(i);
            // Only "not committed" says something to check: it must be so for good,
            // although the writer was still going. (Its own result records the rest.)
            if result == OpResult::Resolve(Resolution::NotCommitted) {
                records.push(OpRecord {
                    client: self.id,
                    eg: racer.eg,
                    kind: OpKind::Commit,
                    start: racer.start,
                    end: real,
                    outcome: Outcome::ResolvedNotCommitted {
                        txn: racer.txn,
                        position: racer.first,
                    },
                });
            }
            return (records, out);
        }
        if let Some(i) = self.companions.iter().position(|c| c.op == op) {
            let companion = self.companions.swap_remove(i);
            if companion.unread
                && matches!(
                    result,
                    OpResult::Commit {
                        result: CommitResult::Committed { .. },
                        ..
                    }
                )
            {
                self.committed_unread += 1;
            }
            records.push(companion_record(self.id, companion, real, result));
            out = self.commit_deferred(real, now);
            out.extend(self.late_blind_companion(real, now));
            return (records, out);
        }
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Reading {
                op: expected,
                kind,
                eg,
                start,
                plan,
                at,
            } if expected == op => {
                let OpResult::Read(result) = result else {
                    unreachable!("a read op returns a read result")
                };
                let outcome = match &result {
                    Ok(read) => read_outcome(&eg, read, at),
                    Err(_) => Outcome::Failed,
                };
                records.push(OpRecord {
                    client: self.id,
                    eg: eg.clone(),
                    kind,
                    start,
                    end: real,
                    outcome,
                });
                match (result, plan) {
                    (Ok(read), Some(Plan::ReadAgain)) => {
                        out = self.read_again(real, now, eg, &read);
                    }
                    (Ok(read), Some(plan)) => out = self.commit(real, now, eg, &read, plan),
                    _ => {}
                }
            }
            State::Committing {
                op: expected,
                eg,
                start,
                read_position,
                read_keys,
            } if expected == op => {
                let OpResult::Commit { txn, result } = result else {
                    unreachable!("a commit op returns a commit result")
                };
                let outcome = match result {
                    CommitResult::Committed { position, .. } => Outcome::Committed {
                        txn,
                        position,
                        read_position,
                        read_keys,
                    },
                    CommitResult::Conflict { .. } | CommitResult::Aborted => {
                        Outcome::NotCommitted { txn }
                    }
                    // As the client library does: resolve it by its transaction id
                    // before reporting anything.
                    CommitResult::Unknown { position } => {
                        let commit = Unresolved {
                            eg,
                            start,
                            txn,
                            position,
                            span: false,
                            read_position,
                            read_keys,
                            since: now,
                        };
                        return (records, self.resolve(now, commit));
                    }
                    CommitResult::UnknownInSpan { first } => {
                        let commit = Unresolved {
                            eg,
                            start,
                            txn,
                            position: first,
                            span: true,
                            read_position,
                            read_keys,
                            since: now,
                        };
                        return (records, self.resolve(now, commit));
                    }
                };
                records.push(OpRecord {
                    client: self.id,
                    eg,
                    kind: OpKind::Commit,
                    start,
                    end: real,
                    outcome,
                });
                out = self.late_blind_companion(real, now);
            }
            State::Resolving {
                op: expected,
                commit,
            } if expected == op => {
                let OpResult::Resolve(resolution) = result else {
                    unreachable!("a resolve op returns a resolution")
                };
                // As the client library does: until its resolve patience runs out.
                if resolution == Resolution::Undecided
                    && self
                        .core
                        .timeouts()
                        .keeps_resolving(now.since(commit.since))
                {
                    return (records, self.resolve(now, commit));
                }
                let Unresolved {
                    eg,
                    start,
                    txn,
                    position,
                    read_position,
                    read_keys,
                    ..
                } = commit;
                let outcome = match resolution {
                    Resolution::Committed(at) => Outcome::Committed {
                        txn,
                        position: at,
                        read_position,
                        read_keys,
                    },
                    Resolution::NotCommitted => Outcome::ResolvedNotCommitted { txn, position },
                    Resolution::Undecided => Outcome::Unknown,
                };
                records.push(OpRecord {
                    client: self.id,
                    eg,
                    kind: OpKind::Commit,
                    start,
                    end: real,
                    outcome,
                });
            }
            State::Scanning {
                op: expected,
                start,
            } if expected == op => {
                let OpResult::Read(result) = result else {
                    unreachable!("a scan returns a read result")
                };
                // A failed scan constrains nothing; only its hits are checked.
                if let Ok(read) = result {
                    let hits: Vec<GlobalHit> = read
                        .rows
                        .into_iter()
                        .filter_map(|row| {
                            Some(GlobalHit {
                                eg: group_of_global_row(&row.key)?,
                                row,
                            })
                        })
                        .collect();
                    if !hits.is_empty() {
                        let (op, more) = self.core.verify_global(now, hits, VERIFY_IN_FLIGHT);
                        self.state = State::Verifying { op, start };
                        out = more;
                    }
                }
            }
            State::FinalScan { op: expected } if expected == op => {
                let OpResult::Read(result) = result else {
                    unreachable!("a scan returns a read result")
                };
                self.final_scan = Some(
                    result
                        .map(|read| {
                            read.rows
                                .into_iter()
                                .map(|row| {
                                    let value = row.value(COLUMN).map(<[u8]>::to_vec);
                                    (row.key, value)
                                })
                                .collect()
                        })
                        .map_err(|e| format!("{e:?}")),
                );
            }
            State::Delivering {
                op: expected,
                eg,
                start,
            } if expected == op => {
                let OpResult::Deliver(result) = result else {
                    unreachable!("a delivery returns what it delivered")
                };
                records.push(OpRecord {
                    client: self.id,
                    eg,
                    kind: OpKind::Deliver,
                    start,
                    end: real,
                    outcome: match result {
                        Ok(delivery) => delivered_outcome(&delivery),
                        Err(_) => Outcome::Failed,
                    },
                });
            }
            State::Verifying {
                op: expected,
                start,
            } if expected == op => {
                let OpResult::Verify(result) = result else {
                    unreachable!("a verification returns its verdicts")
                };
                records = verified_records(self.id, start, real, result);
            }
            State::TwoPhase(multi) if multi.op() == op => {
                return self.on_two_phase_done(real, now, multi, result);
            }
            other => self.state = other,
        }
        (records, out)
    }

    /// Scans the global index (one group's key entries, or the start of the whole
    /// index), then verifies the hits.
    fn scan_global(&mut self, real: u64, now: Time, eg: &EgId) -> Vec<ClientOutput> {
        let (range, limit) = if self.rng.chance(0.5) {
            let start = global_row(eg, &[KEY_ENTRIES]);
            let end = global_row(eg, &[KEY_ENTRIES + 1]);
            (
                KeyRange {
                    start,
                    end: Some(end),
                },
                None,
            )
        } else {
            (megastore_paxos::global_index_range(), Some(8))
        };
        let reverse = self.rng.chance(0.3);
        let (op, out) = self.core.scan_global(now, range, limit, reverse);
        self.state = State::Scanning { op, start: real };
        out
    }

    /// Reads the group again at `read`'s position.
    fn read_again(
        &mut self,
        real: u64,
        now: Time,
        eg: EgId,
        read: &ReadResult,
    ) -> Vec<ClientOutput> {
        let Some(fresh) = read.position else {
            return Vec::new();
        };
        // Usually the position just read; now and then one remembered from an earlier
        // read (which then ages further, or is replaced).
        let position = match self.remembered.get(&eg).copied() {
            Some(old) if self.rng.chance(0.5) => {
                if self.rng.chance(0.3) {
                    self.remembered.insert(eg.clone(), fresh);
                }
                old
            }
            Some(_) => fresh,
            None => {
                self.remembered.insert(eg.clone(), fresh);
                fresh
            }
        };
        let query = self.group_query(&eg);
        let (op, out) = self
            .core
            .read(now, eg.clone(), ReadMode::AtPosition(position), query);
        self.state = State::Reading {
            op,
            kind: OpKind::AtPositionRead,
            eg,
            start: real,
            plan: None,
            at: Some(position),
        };
        out
    }

    /// Consumes the messages `read` found in `eg`'s inbox, as the library's
    /// `Transaction::receive` does: deletes them, having declared them read.
    fn consume(&mut self, real: u64, now: Time, eg: EgId, read: &ReadResult) -> Vec<ClientOutput> {
        let messages: Vec<_> = read
            .rows
            .iter()
            .filter_map(|r| queue::incoming(&eg, r))
            .filter(|m| m.queue == QUEUE)
            .take(2)
            .collect();
        if messages.is_empty() {
            return Vec::new();
        }
        let (writes, reads) = queue::consume(&messages, self.core.bugs());
        let txn = self.next_txn();
        let read_keys: BTreeSet<Vec<u8>> = reads.into_iter().collect();
        self.start_commit(real, now, eg, &Basis::of_read(read), txn, writes, read_keys)
    }

    /// This client's next transaction id.
    fn next_txn(&mut self) -> TxnId {
        self.writes += 1;
        TxnId {
            // The core's: after a crash it runs under a new id.
            client: self.core.config().id,
            seq: self.writes,
        }
    }

    /// Commits `writes` as `txn` after `basis` (of `eg`: a read's, or one lent by a
    /// commit in flight), and waits for it.
    #[allow(clippy::too_many_arguments)]
    fn start_commit(
        &mut self,
        real: u64,
        now: Time,
        eg: EgId,
        basis: &Basis,
        txn: TxnId,
        writes: Vec<RowWrite>,
        read_keys: BTreeSet<Vec<u8>>,
    ) -> Vec<ClientOutput> {
        let position = basis.read_position;
        let (op, out) = self.commit_after(now, &eg, basis, txn, writes, &read_keys);
        self.state = State::Committing {
            op,
            eg,
            start: real,
            read_position: position,
            read_keys,
        };
        out
    }

    /// Asks the core to commit `txn` after `basis` (of `eg`), having read `read_keys`.
    /// As the client library's transactions do: the prepared transactions pending at
    /// its basis come with its read set, and their locks hold against its commit.
    fn commit_after(
        &mut self,
        now: Time,
        eg: &EgId,
        basis: &Basis,
        txn: TxnId,
        writes: Vec<RowWrite>,
        read_keys: &BTreeSet<Vec<u8>>,
    ) -> (OpId, Vec<ClientOutput>) {
        let mut reads = megastore_paxos::ReadSet::from(read_keys.clone());
        reads.saw_prepared(&basis.prepared);
        self.core.commit(
            now,
            txn,
            eg.clone(),
            basis.read_position,
            basis.leader,
            writes,
            reads,
        )
    }

    /// Asks the protocol to resolve `commit` (once more).
    fn resolve(&mut self, now: Time, commit: Unresolved) -> Vec<ClientOutput> {
        let (op, out) = if commit.span {
            self.core
                .resolve_from_first(now, commit.eg.clone(), commit.position, commit.txn)
        } else {
            self.core
                .resolve(now, commit.eg.clone(), commit.position, commit.txn)
        };
        self.state = State::Resolving { op, commit };
        out
    }

    fn commit(
        &mut self,
        real: u64,
        now: Time,
        eg: EgId,
        read: &ReadResult,
        plan: Plan,
    ) -> Vec<ClientOutput> {
        if read.position.is_none() {
            return Vec::new();
        }
        let (rows, read_keys) = match plan {
            Plan::ReadModifyWrite(rows) => {
                let read_keys: BTreeSet<Vec<u8>> = rows.iter().cloned().collect();
                (rows, read_keys)
            }
            Plan::Blind(rows) => (rows, BTreeSet::new()),
            Plan::ReadAgain => unreachable!("a read-again plan reads, it does not commit"),
            Plan::Consume => return self.consume(real, now, eg, read),
        };
        let txn = self.next_txn();
        let writes = self.writes_of(now, &eg, &rows, txn);
        let basis = Basis::of_read(read);
        let mut out = self.start_commit(real, now, eg.clone(), &basis, txn, writes, read_keys);
        // Now and then more transactions from the same read, at once: they wait behind
        // this one in the core and may share an entry. (Not when measuring commits,
        // which counts one writer's transactions one at a time.)
        if !self.writes_only && self.rng.chance(0.3) {
            for _ in 0..1 + self.rng.below(3) {
                out.extend(self.start_companion(real, now, &eg, read));
            }
        }
        out
    }

    /// Commits one more transaction of `eg` from `read`, beside the one in flight.
    fn start_companion(
        &mut self,
        real: u64,
        now: Time,
        eg: &EgId,
        read: &ReadResult,
    ) -> Vec<ClientOutput> {
        let Some(read_position) = read.position else {
            return Vec::new();
        };
        let rows = self.some_rows(eg);
        let read_keys: BTreeSet<Vec<u8>> = if self.rng.chance(0.6) {
            rows.iter().cloned().collect()
        } else {
            BTreeSet::new()
        };
        let txn = self.next_txn();
        let writes = self.writes_of(now, eg, &rows, txn);
        let (op, mut out) =
            self.commit_after(now, eg, &Basis::of_read(read), txn, writes, &read_keys);
        self.companions.push(Companion {
            op,
            eg: eg.clone(),
            start: real,
            read_position,
            read_keys,
            unread: false,
        });
        out.extend(self.race_resolver(real, now, eg, txn, read_position.next()));
        out
    }

    /// Now and then, a resolution of `txn` from its first position started at once,
    /// while its commit is in flight: it settles the transaction's commit span, racing
    /// the writer for those positions.
    fn race_resolver(
        &mut self,
        real: u64,
        now: Time,
        eg: &EgId,
        txn: TxnId,
        first: Position,
    ) -> Vec<ClientOutput> {
        if !self.rng.chance(0.1) {
            return Vec::new();
        }
        let (op, out) = self.core.resolve_from_first(now, eg.clone(), first, txn);
        self.racers.push(Racer {
            op,
            eg: eg.clone(),
            start: real,
            txn,
            first,
        });
        out
    }

    /// Now and then, while companions of an earlier read are still in flight, one more
    /// blind write of their group that does not read: the core takes the read of its
    /// commit in flight as the write's own (a basis older than what it has learned
    /// since, prepared transactions' locks included), as the client library's blind
    /// writes do.
    fn late_blind_companion(&mut self, real: u64, now: Time) -> Vec<ClientOutput> {
        let Some(eg) = self.companions.first().map(|c| c.eg.clone()) else {
            return Vec::new();
        };
        if self.companions.len() >= 4 || !self.rng.chance(0.25) {
            return Vec::new();
        }
        // Now and then its basis is lent now and its commit made later, on that basis
        // grown older meanwhile (`ClientCore::blind_basis`, as a blind Begin takes it).
        if self.deferred.is_none()
            && self.rng.chance(0.3)
            && let Some(basis) = self.core.lend_basis(now, &eg)
        {
            self.deferred = Some(Deferred {
                eg,
                basis,
                start: real,
            });
            return Vec::new();
        }
        let rows = self.some_rows(&eg);
        let txn = self.next_txn();
        let writes = self.writes_of(now, &eg, &rows, txn);
        // Nothing in flight for the group (the companions wait behind nothing yet, or
        // have settled): no basis, and the write is not made.
        let Ok((op, read_position, mut out)) = self.core.commit_blind(now, txn, eg.clone(), writes)
        else {
            return Vec::new();
        };
        self.companions.push(Companion {
            op,
            eg: eg.clone(),
            start: real,
            read_position,
            read_keys: BTreeSet::new(),
            unread: true,
        });
        out.extend(self.race_resolver(real, now, &eg, txn, read_position.next()));
        out
    }

    /// Commits the blind write lent its basis earlier, if there is one.
    fn commit_deferred(&mut self, real: u64, now: Time) -> Vec<ClientOutput> {
        let Some(Deferred { eg, basis, start }) = self.deferred.take() else {
            return Vec::new();
        };
        let rows = self.some_rows(&eg);
        let txn = self.next_txn();
        let writes = self.writes_of(now, &eg, &rows, txn);
        let (op, mut out) = self.commit_after(now, &eg, &basis, txn, writes, &BTreeSet::new());
        self.companions.push(Companion {
            op,
            eg: eg.clone(),
            start,
            read_position: basis.read_position,
            read_keys: BTreeSet::new(),
            unread: true,
        });
        out.extend(self.race_resolver(real, now, &eg, txn, basis.read_position.next()));
        out
    }

    /// What transaction `txn` writes to `rows` of `eg`: a value or a delete per row, its
    /// global index mirror, one global entry of its own, and now and then a message or
    /// two.
    fn writes_of(&mut self, now: Time, eg: &EgId, rows: &[Vec<u8>], txn: TxnId) -> Vec<RowWrite> {
        let tag = format!("c{}.{}", txn.client.0, txn.seq).into_bytes();
        // Now and then a key is deleted rather than set. Each key also has an entry in
        // a global index (the key's value by key, `0xFD ‖ key`), kept in the group's
        // mirror and copied to the global index at apply, as an entity's global index
        // entries are; and each commit one of its own (`0xFD ‖ group ‖ 2 ‖ tag`).
        let mut writes = rows
            .iter()
            .flat_map(|row| {
                let cell = if self.rng.chance(0.15) {
                    CellWrite::Delete {
                        column: COLUMN.to_vec(),
                    }
                } else {
                    CellWrite::Set {
                        column: COLUMN.to_vec(),
                        value: tag.clone(),
                    }
                };
                let mirror = RowWrite {
                    row: global_mirror_row(eg, row),
                    cells: vec![cell.clone()],
                };
                [
                    RowWrite {
                        row: row.clone(),
                        cells: vec![cell],
                    },
                    mirror,
                ]
            })
            .chain(std::iter::once(RowWrite {
                // And one entry per commit, never rewritten: a replica that installs a
                // snapshot has only the snapshot to bring it.
                row: mirror_row_of(eg, &global_row(eg, &[&[LOG_ENTRIES], &tag[..]].concat())),
                cells: vec![CellWrite::Set {
                    column: COLUMN.to_vec(),
                    value: tag.clone(),
                }],
            }))
            .collect::<Vec<_>>();
        // Now and then the transaction also sends a message or two (to any group, its
        // own included).
        if self.queues && self.rng.chance(0.2) {
            for index in 0..1 + self.rng.below(2) as u32 {
                let to = group(self.rng.below(u64::from(self.groups)) as u16);
                let body = [&tag[..], format!("/{index}").as_bytes()].concat();
                let sent_ms = now.as_nanos() / 1_000_000;
                writes.push(queue::send_write(
                    eg, txn, index, &to, QUEUE, &body, sent_ms,
                ));
            }
        }
        writes
    }
}

/// The record of a companion commit: its outcome as reported (one whose outcome is
/// unknown is recorded so, without resolving it).
fn companion_record(
    client: ClientId,
    companion: Companion,
    end: u64,
    result: OpResult,
) -> OpRecord {
    let OpResult::Commit { txn, result } = result else {
        unreachable!("a commit op returns a commit result")
    };
    let outcome = match result {
        CommitResult::Committed { position, .. } => Outcome::Committed {
            txn,
            position,
            read_position: companion.read_position,
            read_keys: companion.read_keys,
        },
        CommitResult::Conflict { .. } | CommitResult::Aborted => Outcome::NotCommitted { txn },
        CommitResult::Unknown { .. } | CommitResult::UnknownInSpan { .. } => Outcome::Unknown,
    };
    OpRecord {
        client,
        eg: companion.eg,
        kind: OpKind::Commit,
        start: companion.start,
        end,
        outcome,
    }
}

/// A delivery's record.
fn delivered_outcome(delivery: &Delivery) -> Outcome {
    Outcome::Delivered {
        read_at: delivery.read_at,
        delivered: delivery.delivered,
        complete: delivery.skipped.is_empty() && !delivery.more,
    }
}

/// The row of `eg`'s global index mirror that names the global index entry of `key`
/// (`0xFD ‖ key`).
pub(crate) fn global_mirror_row(eg: &EgId, key: &[u8]) -> Vec<u8> {
    mirror_row_of(eg, &[&[GLOBAL_INDEX_TAG], key].concat())
}

/// The records of a verified scan: one per group it read, with each hit's verdict;
/// one failed record if a group read failed.
fn verified_records(
    client: megastore_types::ClientId,
    start: u64,
    end: u64,
    result: Result<Vec<CheckedHit>, megastore_paxos::ReadError>,
) -> Vec<OpRecord> {
    let record = |eg: EgId, outcome| OpRecord {
        client,
        eg,
        kind: OpKind::VerifiedScan,
        start,
        end,
        outcome,
    };
    let Ok(checked) = result else {
        return vec![record(EgId(b"(global)".to_vec()), Outcome::Failed)];
    };
    let mut by_group: BTreeMap<EgId, (Position, Vec<VerifiedHit>)> = BTreeMap::new();
    for c in checked {
        let position = c.position.expect("a current read names its position");
        let hit = VerifiedHit {
            row: c.hit.row.key.clone(),
            value: c.hit.row.value(COLUMN).map(<[u8]>::to_vec),
            kept: c.current,
        };
        by_group
            .entry(c.hit.eg)
            .or_insert((position, Vec::new()))
            .1
            .push(hit);
    }
    by_group
        .into_iter()
        .map(|(eg, (position, hits))| record(eg, Outcome::Verified { position, hits }))
        .collect()
}

/// A read's record; `at`, for a read at a position, is the position it asked for.
fn read_outcome(eg: &EgId, read: &ReadResult, at: Option<Position>) -> Outcome {
    let mirror = global_mirror_range(eg);
    // A key without a value (never written, or deleted) is absent, whether or not the
    // store still returns its row. A whole-group scan also returns the group's global
    // index mirror: not data the checkers of reads look at (the global-index checker
    // does).
    let values: BTreeMap<Vec<u8>, Option<Vec<u8>>> = read
        .rows
        .iter()
        .filter(|r| !mirror.contains(&r.key))
        .filter_map(|r| Some((r.key.clone(), Some(r.value(COLUMN)?.to_vec()))))
        .collect();
    Outcome::Read {
        position: at.or(read.position),
        values,
        path: read.path,
        replica: read.replica,
    }
}

/// A new client process in place of `old`, run by `config`: it routes by the placement
/// `old` knew (a process reads the placement before it starts; the newest one reaches
/// it within the read delay, as every process).
pub(crate) fn restarted(
    old: &megastore_paxos::ClientCore,
    config: megastore_paxos::ClientConfig,
) -> megastore_paxos::ClientCore {
    let core = megastore_paxos::ClientCore::new(config);
    match old.placement() {
        Some(placement) => core.placed(placement.clone()),
        None => core,
    }
}
