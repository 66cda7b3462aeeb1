//! The replica as a pure state machine: acceptor, visibility marks, apply, log state
//! and data reads for every entity group it holds.
//!
//! ```text
//!   Input::Message ──► Replica::step ──► Output::Persist (root row, synced)
//!   Input::Loaded  ──►               ──► Output::Apply   (data rows + applied marker)
//!   Input::Tick    ──►               ──► Output::Send / ReadData / Load / WakeAt
//! ```
//!
//! Outputs run in order, and a `Send` may leave only once every `Persist` before it
//! is durable: that is how "reply only after the state it depends on is durable" is
//! kept. A driver may batch the persists of several steps into one sync, as long as it
//! holds back their sends until then.

mod group;
mod sweep;

use std::collections::BTreeMap;

use megastore_rowstore::{KeyRange, Row, RowMutation, RowRead, ScanOptions};
use megastore_types::{
    EgId, NodeId, Position, ReplicaId, ReplicaInfo, ReplicaKind, Time, Topology,
};

pub use group::{GroupLog, Proposal};
pub use sweep::SweepConfig;

use sweep::{SweepAction, Sweeper};

use crate::bugs::ProtocolBugs;
use crate::cells::StoredGroup;
use crate::entry::{data_range, root_row};
use crate::messages::{DataQuery, Message, ReadAt, ReplicaError, ReplicaReply, ReplicaRequest};

/// How a replica runs.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// Which replica this is.
    pub id: ReplicaId,
    /// The deployment.
    pub topology: Topology,
    /// Simulator-only mistakes.
    pub bugs: ProtocolBugs,
    /// Finishing abandoned positions and catching up from peers (`None`: off).
    pub sweep: Option<SweepConfig>,
}

/// An event for the replica.
#[derive(Debug, Clone)]
pub enum Input {
    /// A message arrived.
    Message {
        /// Its sender.
        from: NodeId,
        /// The message.
        message: Message,
    },
    /// The root row the replica asked for with [`Output::Load`] (`None`: no such row).
    Loaded {
        /// The group.
        eg: EgId,
        /// Its root row, read at the latest state.
        row: Option<Row>,
    },
    /// Time passed.
    Tick,
}

/// What the replica asks its driver to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Read the group's root row and feed it back as [`Input::Loaded`].
    Load {
        /// The group.
        eg: EgId,
        /// Its root row key.
        root_row: Vec<u8>,
    },
    /// Write this root-row mutation, synced. Sends after it wait until it is durable.
    Persist {
        /// The mutation.
        mutation: RowMutation,
    },
    /// Apply entries: one atomic batch within the group's range (data rows and the
    /// `applied` marker); need not be synced — a lost apply is redone from the log.
    Apply {
        /// The group.
        eg: EgId,
        /// The rows.
        rows: Vec<RowMutation>,
    },
    /// Send a message.
    Send {
        /// To whom.
        to: NodeId,
        /// What.
        message: Message,
    },
    /// Read data and reply with [`answer_read`].
    ReadData {
        /// Who asked.
        to: NodeId,
        /// Their request id.
        id: u64,
        /// The group.
        eg: EgId,
        /// The timestamp (`None`: latest).
        at: Option<Position>,
        /// What to read.
        query: DataQuery,
    },
    /// Feed [`Input::Tick`] at this time.
    WakeAt(Time),
}

enum GroupSlot {
    /// Waiting for the root row; these requests wait with it.
    Loading(Vec<(NodeId, ReplicaRequest)>),
    Ready(GroupLog),
    /// The root row could not be read back: the group is not served until repaired.
    Failed(String),
}

/// One replica: full, witness or read-only.
pub struct Replica {
    config: ReplicaConfig,
    me: ReplicaInfo,
    groups: BTreeMap<EgId, GroupSlot>,
    sweeper: Option<Sweeper>,
}

impl Replica {
    /// A replica with nothing loaded (at start, or after a restart).
    pub fn new(config: ReplicaConfig) -> Self {
        let me = config
            .topology
            .replica(config.id)
            .cloned()
            .expect("the replica is in its topology");
        let sweeper = config.sweep.clone().map(|sweep| Sweeper::new(sweep, me.id));
        Self {
            config,
            me,
            groups: BTreeMap::new(),
            sweeper,
        }
    }

    /// This replica.
    pub fn info(&self) -> &ReplicaInfo {
        &self.me
    }

    /// A loaded group's state.
    pub fn group(&self, eg: &EgId) -> Option<&GroupLog> {
        match self.groups.get(eg) {
            Some(GroupSlot::Ready(g)) => Some(g),
            _ => None,
        }
    }

    /// Every loaded group.
    pub fn groups(&self) -> impl Iterator<Item = &GroupLog> + '_ {
        self.groups.values().filter_map(|g| match g {
            GroupSlot::Ready(g) => Some(g),
            _ => None,
        })
    }

    /// Handles one event.
    pub fn step(&mut self, now: Time, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        let mut sends = Vec::new();
        let mut actions = Vec::new();
        match input {
            Input::Message {
                from,
                message: Message::ReplicaRequest(request),
            } => self.handle(from, request, &mut out),
            Input::Message {
                from: NodeId::Replica(r),
                message: Message::ReplicaReply(reply),
            } => {
                let Self {
                    sweeper, groups, ..
                } = self;
                if let Some(sweeper) = sweeper {
                    let here = |eg: &EgId| match groups.get(eg) {
                        Some(GroupSlot::Ready(g)) => Some(g.log_state()),
                        _ => None,
                    };
                    actions.extend(sweeper.on_replica_reply(now, r, reply, here, &mut sends));
                }
            }
            Input::Message {
                from: NodeId::Coordinator(r),
                message: Message::CoordinatorReply(reply),
            } => {
                if let Some(sweeper) = &mut self.sweeper {
                    sweeper.on_coordinator_reply(now, r, reply, &mut sends);
                }
            }
            Input::Message {
                from: NodeId::LockNode(n),
                message: Message::LockResponse(response),
            } => {
                if let Some(sweeper) = &mut self.sweeper {
                    sweeper.on_lock_response(now, n, response, &mut sends);
                }
            }
            Input::Message { .. } => {}
            Input::Loaded { eg, row } => self.loaded(eg, row.as_ref(), &mut out),
            Input::Tick => {
                let Self {
                    sweeper, groups, ..
                } = self;
                if let Some(sweeper) = sweeper {
                    let loaded = groups.values().filter_map(|g| match g {
                        GroupSlot::Ready(g) => Some(g),
                        _ => None,
                    });
                    actions.extend(sweeper.on_tick(now, loaded, &mut sends));
                }
            }
        }
        for action in actions {
            match action {
                SweepAction::Truncate(eg, through) => {
                    if let Some(GroupSlot::Ready(group)) = self.groups.get_mut(&eg) {
                        group.truncate(self.me.kind, through, &mut out);
                    }
                }
            }
        }
        out.extend(
            sends
                .into_iter()
                .map(|(to, message)| Output::Send { to, message }),
        );
        if let Some(sweeper) = &self.sweeper {
            out.push(Output::WakeAt(sweeper.next_wake()));
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
        out
    }

    fn loaded(&mut self, eg: EgId, row: Option<&Row>, out: &mut Vec<Output>) {
        let Some(GroupSlot::Loading(waiting)) = self.groups.remove(&eg) else {
            return;
        };
        match StoredGroup::from_row(row) {
            Ok(stored) => {
                let mut group = GroupLog::load(
                    eg.clone(),
                    stored,
                    self.config.bugs.forget_promise_on_restart,
                );
                // Visible positions whose apply was lost in a crash are applied again.
                if self.me.kind != ReplicaKind::Witness {
                    group.apply_ready(&self.config.bugs, None, out);
                }
                self.groups.insert(eg, GroupSlot::Ready(group));
                for (from, request) in waiting {
                    self.handle(from, request, out);
                }
            }
            Err(e) => {
                let error = ReplicaError::Storage(e.to_string());
                for (from, request) in waiting {
                    reply(
                        out,
                        from,
                        ReplicaReply::Error {
                            id: request.id(),
                            error: error.clone(),
                        },
                    );
                }
                self.groups.insert(eg, GroupSlot::Failed(e.to_string()));
            }
        }
    }

    fn handle(&mut self, from: NodeId, request: ReplicaRequest, out: &mut Vec<Output>) {
        let eg = request.eg().clone();
        let group = match self.groups.get_mut(&eg) {
            None => {
                out.push(Output::Load {
                    eg: eg.clone(),
                    root_row: root_row(&eg),
                });
                self.groups
                    .insert(eg, GroupSlot::Loading(vec![(from, request)]));
                return;
            }
            Some(GroupSlot::Loading(waiting)) => {
                waiting.push((from, request));
                return;
            }
            Some(GroupSlot::Failed(e)) => {
                let error = ReplicaError::Storage(e.clone());
                reply(
                    out,
                    from,
                    ReplicaReply::Error {
                        id: request.id(),
                        error,
                    },
                );
                return;
            }
            Some(GroupSlot::Ready(group)) => group,
        };
        let (me, kind, bugs) = (self.me.id, self.me.kind, self.config.bugs);
        let voter = kind != ReplicaKind::ReadOnly;
        let answer = match request {
            ReplicaRequest::Prepare { id, .. } | ReplicaRequest::Accept { id, .. } if !voter => {
                ReplicaReply::Error {
                    id,
                    error: ReplicaError::NotVoter,
                }
            }
            ReplicaRequest::Prepare {
                id,
                position,
                ballot,
                ..
            } => {
                let result = group.prepare(position, ballot, out);
                ReplicaReply::Prepare { id, result }
            }
            ReplicaRequest::Accept {
                id,
                position,
                ballot,
                entry,
                grant,
                ..
            } => match entry.check_for(&eg) {
                Err(e) => ReplicaReply::Error {
                    id,
                    error: ReplicaError::BadEntry(e.to_string()),
                },
                Ok(()) => ReplicaReply::Accept {
                    id,
                    result: group.accept(
                        me,
                        &bugs,
                        Proposal {
                            position,
                            ballot,
                            entry,
                            grant,
                        },
                        out,
                    ),
                },
            },
            ReplicaRequest::MarkVisible {
                id,
                position,
                ballot,
                entry,
                ..
            } => match entry.check_for(&eg) {
                Err(e) => ReplicaReply::Error {
                    id,
                    error: ReplicaError::BadEntry(e.to_string()),
                },
                Ok(()) => match group.mark_visible(kind, &bugs, position, ballot, entry, out) {
                    Ok(()) => ReplicaReply::MarkedVisible {
                        id,
                        applied: group.applied(),
                    },
                    Err(p) => ReplicaReply::Error {
                        id,
                        error: ReplicaError::Conflict(p),
                    },
                },
            },
            ReplicaRequest::LogState { id, .. } => ReplicaReply::LogState {
                id,
                state: group.log_state(),
            },
            ReplicaRequest::ReadLog { id, position, .. } => {
                if position <= group.truncated() {
                    ReplicaReply::Error {
                        id,
                        error: ReplicaError::Truncated {
                            truncated: group.truncated(),
                        },
                    }
                } else {
                    ReplicaReply::Log {
                        id,
                        slot: group.slot(position).cloned(),
                    }
                }
            }
            ReplicaRequest::Read { id, at, query, .. } => {
                if kind == ReplicaKind::Witness {
                    ReplicaReply::Error {
                        id,
                        error: ReplicaError::NotServing,
                    }
                } else if let Err(e) = check_query(&eg, &query) {
                    ReplicaReply::Error {
                        id,
                        error: ReplicaError::BadQuery(e),
                    }
                } else {
                    let at = match at {
                        ReadAt::Position(p) if p > group.applied() => {
                            let error = ReplicaError::NotApplied {
                                applied: group.applied(),
                            };
                            reply(out, from, ReplicaReply::Error { id, error });
                            return;
                        }
                        ReadAt::Position(p) => Some(p),
                        ReadAt::Applied => Some(group.applied()),
                        ReadAt::Latest => None,
                    };
                    out.push(Output::ReadData {
                        to: from,
                        id,
                        eg,
                        at,
                        query,
                    });
                    return;
                }
            }
        };
        reply(out, from, answer);
    }

    /// Checks every loaded group's invariants (panics on a broken one).
    pub fn check_invariants(&self) {
        for group in self.groups() {
            group.check_invariants(self.me.kind, &self.config.bugs);
        }
    }
}

fn reply(out: &mut Vec<Output>, to: NodeId, reply: ReplicaReply) {
    out.push(Output::Send {
        to,
        message: Message::ReplicaReply(reply),
    });
}

fn check_query(eg: &EgId, query: &DataQuery) -> Result<(), String> {
    let data = data_range(eg);
    match query {
        DataQuery::Rows(rows) => match rows.iter().find(|r| !data.contains(r)) {
            Some(r) => Err(format!(
                "row {} is not a data row of {eg}",
                r.escape_ascii()
            )),
            None => Ok(()),
        },
        DataQuery::Scan { range, .. } => {
            let inside = data.contains(&range.start) || range.is_empty();
            let end_inside = match (&range.end, &data.end) {
                (Some(end), Some(data_end)) => end <= data_end,
                (None, None) => true,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if inside && end_inside {
                Ok(())
            } else {
                Err(format!("scan leaves the data rows of {eg}"))
            }
        }
    }
}

/// Answers a [`Output::ReadData`]: reads the store at the position's timestamp and
/// builds the reply. Drivers call this; it is here so what a read returns is decided
/// once.
pub fn answer_read<S: RowRead>(
    store: &S,
    id: u64,
    at: Option<Position>,
    query: &DataQuery,
) -> ReplicaReply {
    let ts = at.map_or(megastore_rowstore::LATEST, |p| p.0);
    let result = match query {
        DataQuery::Rows(rows) => rows
            .iter()
            .filter_map(|row| store.read_row(row, &KeyRange::all(), ts).transpose())
            .collect::<Result<Vec<Row>, _>>(),
        DataQuery::Scan { range, limit } => store.scan(
            range,
            ts,
            &ScanOptions {
                limit: *limit,
                ..ScanOptions::default()
            },
        ),
    };
    match result {
        Ok(rows) => ReplicaReply::Data { id, at, rows },
        Err(e) => ReplicaReply::Error {
            id,
            error: ReplicaError::Storage(e.to_string()),
        },
    }
}
