//! The replication messages: [`ReplicaRequest`] and [`ReplicaReply`] on the wire.

use megastore_paxos::cells::SlotRecord;
use megastore_paxos::entry::{JoinedTxn, TwoPhaseRecord};
use megastore_paxos::messages::{
    AcceptResult, ChosenTxn, GrantRefusal, LogState, PrepareResult, ReplicaError,
};
use megastore_paxos::{CellWrite, LogEntry, ReplicaReply, ReplicaRequest, RowWrite};
use megastore_placement::{RangeId, ServerId, Version};
use megastore_types::{Ballot, ClientId, EgId, Position, ProposerId, ReplicaId, TxnId};

use crate::error::{WireError, narrow, required};
use crate::pb::replication as pb;
use crate::rows::{
    query_from_wire, query_to_wire, range_from_wire, range_to_wire, read_at_from_wire,
    read_at_to_wire, row_from_wire, row_to_wire,
};

pub(crate) fn txn_to_wire(txn: TxnId) -> pb::TxnId {
    pb::TxnId {
        client: txn.client.0,
        seq: txn.seq,
    }
}

pub(crate) fn txn_from_wire(txn: pb::TxnId) -> TxnId {
    TxnId {
        client: ClientId(txn.client),
        seq: txn.seq,
    }
}

fn ballot_to_wire(ballot: Ballot) -> pb::Ballot {
    pb::Ballot {
        round: ballot.round,
        proposer: ballot.proposer.0,
    }
}

fn ballot_from_wire(ballot: Option<pb::Ballot>, field: &'static str) -> Result<Ballot, WireError> {
    let ballot = required(ballot, field)?;
    Ok(Ballot {
        round: ballot.round,
        proposer: ProposerId(ballot.proposer),
    })
}

pub(crate) fn replica_from_wire(id: u32, field: &'static str) -> Result<ReplicaId, WireError> {
    Ok(ReplicaId(narrow(u64::from(id), field)?))
}

/// A log entry on the wire.
pub fn entry_to_wire(entry: LogEntry) -> pb::LogEntry {
    pb::LogEntry {
        txn: entry.txn.map(txn_to_wire),
        schema: entry.schema,
        next_leader: entry.next_leader.map(|r| u32::from(r.0)),
        writes: entry.writes.into_iter().map(row_write_to_wire).collect(),
        two_phase: entry.two_phase.into_iter().map(two_phase_to_wire).collect(),
        joined: entry
            .joined
            .into_iter()
            .map(|j| pb::JoinedTxn {
                txn: Some(txn_to_wire(j.txn)),
                first_write: j.first_write,
            })
            .collect(),
    }
}

/// A log entry from the wire.
pub fn entry_from_wire(entry: Option<pb::LogEntry>) -> Result<LogEntry, WireError> {
    let entry = required(entry, "entry")?;
    let writes = entry
        .writes
        .into_iter()
        .map(row_write_from_wire)
        .collect::<Result<_, WireError>>()?;
    Ok(LogEntry {
        txn: entry.txn.map(txn_from_wire),
        schema: entry.schema,
        next_leader: entry
            .next_leader
            .map(|r| replica_from_wire(r, "entry.next_leader"))
            .transpose()?,
        writes,
        joined: entry
            .joined
            .into_iter()
            .map(|j| {
                Ok(JoinedTxn {
                    txn: txn_from_wire(required(j.txn, "entry.joined.txn")?),
                    first_write: j.first_write,
                })
            })
            .collect::<Result<_, WireError>>()?,
        two_phase: entry
            .two_phase
            .into_iter()
            .map(two_phase_from_wire)
            .collect::<Result<_, _>>()?,
    })
}

pub(crate) fn row_write_to_wire(write: RowWrite) -> pb::RowWrite {
    pb::RowWrite {
        row: write.row,
        cells: write.cells.into_iter().map(cell_to_wire).collect(),
    }
}

pub(crate) fn row_write_from_wire(write: pb::RowWrite) -> Result<RowWrite, WireError> {
    let cells = write
        .cells
        .into_iter()
        .map(cell_from_wire)
        .collect::<Result<_, _>>()?;
    Ok(RowWrite {
        row: write.row,
        cells,
    })
}

fn cell_to_wire(cell: CellWrite) -> pb::CellWrite {
    match cell {
        CellWrite::Set { column, value } => pb::CellWrite {
            column,
            change: Some(pb::cell_write::Change::Set(value)),
        },
        CellWrite::Delete { column } => pb::CellWrite {
            column,
            change: Some(pb::cell_write::Change::Delete(true)),
        },
    }
}

fn cell_from_wire(cell: pb::CellWrite) -> Result<CellWrite, WireError> {
    Ok(match required(cell.change, "entry.writes.cells.change")? {
        pb::cell_write::Change::Set(value) => CellWrite::Set {
            column: cell.column,
            value,
        },
        pb::cell_write::Change::Delete(_) => CellWrite::Delete {
            column: cell.column,
        },
    })
}

fn two_phase_to_wire(record: TwoPhaseRecord) -> pb::TwoPhaseRecord {
    use pb::two_phase_record::{Decided, Prepared, Record};
    let record = match record {
        TwoPhaseRecord::Prepared {
            txn,
            coordinator,
            participants,
        } => Record::Prepared(Prepared {
            txn: Some(txn_to_wire(txn)),
            coordinator: coordinator.0,
            participants: participants.into_iter().map(|p| p.0).collect(),
        }),
        TwoPhaseRecord::Decided { txn, commit } => Record::Decided(Decided {
            txn: Some(txn_to_wire(txn)),
            commit,
        }),
    };
    pb::TwoPhaseRecord {
        record: Some(record),
    }
}

fn two_phase_from_wire(record: pb::TwoPhaseRecord) -> Result<TwoPhaseRecord, WireError> {
    use pb::two_phase_record::Record;
    Ok(match required(record.record, "entry.two_phase.record")? {
        Record::Prepared(p) => TwoPhaseRecord::Prepared {
            txn: txn_from_wire(required(p.txn, "entry.two_phase.prepared.txn")?),
            coordinator: EgId(p.coordinator),
            participants: p.participants.into_iter().map(EgId).collect(),
        },
        Record::Decided(d) => TwoPhaseRecord::Decided {
            txn: txn_from_wire(required(d.txn, "entry.two_phase.decided.txn")?),
            commit: d.commit,
        },
    })
}

fn slot_to_wire(slot: SlotRecord) -> pb::SlotRecord {
    pb::SlotRecord {
        ballot: Some(ballot_to_wire(slot.ballot)),
        entry: Some(entry_to_wire(slot.entry)),
        visible: slot.visible,
    }
}

fn slot_from_wire(slot: Option<pb::SlotRecord>) -> Result<SlotRecord, WireError> {
    let slot = required(slot, "slot")?;
    Ok(SlotRecord {
        ballot: ballot_from_wire(slot.ballot, "slot.ballot")?,
        entry: entry_from_wire(slot.entry)?,
        visible: slot.visible,
    })
}

fn value_to_wire((ballot, entry): (Ballot, LogEntry)) -> pb::AcceptedValue {
    pb::AcceptedValue {
        ballot: Some(ballot_to_wire(ballot)),
        entry: Some(entry_to_wire(entry)),
    }
}

fn value_from_wire(value: pb::AcceptedValue) -> Result<(Ballot, LogEntry), WireError> {
    Ok((
        ballot_from_wire(value.ballot, "value.ballot")?,
        entry_from_wire(value.entry)?,
    ))
}

impl From<ReplicaRequest> for pb::ReplicaRequest {
    fn from(request: ReplicaRequest) -> Self {
        use pb::replica_request as r;
        let (id, eg, body) = match request {
            ReplicaRequest::Prepare {
                id,
                eg,
                position,
                ballot,
                voters_at,
            } => (
                id,
                eg,
                r::Request::Prepare(r::Prepare {
                    position: position.0,
                    ballot: Some(ballot_to_wire(ballot)),
                    voters_at: voters_at.0,
                }),
            ),
            ReplicaRequest::Accept {
                id,
                eg,
                position,
                ballot,
                entry,
                grant,
                previous_visible,
                voters_at,
            } => (
                id,
                eg,
                r::Request::Accept(r::Accept {
                    position: position.0,
                    ballot: Some(ballot_to_wire(ballot)),
                    entry: Some(entry_to_wire(entry)),
                    grant,
                    previous_visible: previous_visible.map(ballot_to_wire),
                    voters_at: voters_at.0,
                }),
            ),
            ReplicaRequest::MarkVisible {
                id,
                eg,
                position,
                ballot,
                entry,
            } => (
                id,
                eg,
                r::Request::MarkVisible(r::MarkVisible {
                    position: position.0,
                    ballot: Some(ballot_to_wire(ballot)),
                    entry: Some(entry_to_wire(entry)),
                }),
            ),
            ReplicaRequest::LogState { id, eg } => (id, eg, r::Request::LogState(r::LogState {})),
            ReplicaRequest::ReadLog { id, eg, position } => (
                id,
                eg,
                r::Request::ReadLog(r::ReadLog {
                    position: position.0,
                }),
            ),
            ReplicaRequest::AwaitVisible { id, eg, past, wait } => (
                id,
                eg,
                r::Request::AwaitVisible(r::AwaitVisible {
                    past: past.0,
                    wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
                }),
            ),
            ReplicaRequest::Read { id, eg, at, query } => (
                id,
                eg,
                r::Request::Read(r::Read {
                    at: Some(read_at_to_wire(at)),
                    query: Some(query_to_wire(query)),
                }),
            ),
            ReplicaRequest::Snapshot { id, eg } => (id, eg, r::Request::Snapshot(r::Snapshot {})),
            ReplicaRequest::ScanGlobal {
                id,
                range,
                limit,
                reverse,
                server,
                routed_by,
            } => (
                id,
                EgId(Vec::new()),
                r::Request::ScanGlobal(r::ScanGlobal {
                    range: Some(range_to_wire(range)),
                    limit: limit.map(|l| l as u64),
                    reverse,
                    server: server.map(|s| u32::from(s.0)),
                    routed_by: routed_by.map(|v| v.0),
                }),
            ),
            ReplicaRequest::ListGroups {
                id,
                after,
                limit,
                server,
            } => (
                id,
                EgId(Vec::new()),
                r::Request::ListGroups(r::ListGroups {
                    after: after.map(|eg| eg.0),
                    limit: limit as u64,
                    server: server.map(|s| u32::from(s.0)),
                }),
            ),
        };
        pb::ReplicaRequest {
            id,
            eg: eg.0,
            request: Some(body),
        }
    }
}

impl TryFrom<pb::ReplicaRequest> for ReplicaRequest {
    type Error = WireError;

    fn try_from(request: pb::ReplicaRequest) -> Result<Self, WireError> {
        use pb::replica_request as r;
        let (id, eg) = (request.id, EgId(request.eg));
        Ok(match required(request.request, "request")? {
            r::Request::Prepare(p) => ReplicaRequest::Prepare {
                id,
                eg,
                position: Position(p.position),
                ballot: ballot_from_wire(p.ballot, "prepare.ballot")?,
                voters_at: Version(p.voters_at),
            },
            r::Request::Accept(a) => ReplicaRequest::Accept {
                id,
                eg,
                position: Position(a.position),
                ballot: ballot_from_wire(a.ballot, "accept.ballot")?,
                entry: entry_from_wire(a.entry)?,
                grant: a.grant,
                previous_visible: a
                    .previous_visible
                    .map(|b| ballot_from_wire(Some(b), "accept.previous_visible"))
                    .transpose()?,
                voters_at: Version(a.voters_at),
            },
            r::Request::MarkVisible(m) => ReplicaRequest::MarkVisible {
                id,
                eg,
                position: Position(m.position),
                ballot: ballot_from_wire(m.ballot, "mark_visible.ballot")?,
                entry: entry_from_wire(m.entry)?,
            },
            r::Request::LogState(_) => ReplicaRequest::LogState { id, eg },
            r::Request::ReadLog(l) => ReplicaRequest::ReadLog {
                id,
                eg,
                position: Position(l.position),
            },
            r::Request::AwaitVisible(a) => ReplicaRequest::AwaitVisible {
                id,
                eg,
                past: Position(a.past),
                wait: std::time::Duration::from_millis(u64::from(a.wait_ms)),
            },
            r::Request::Read(read) => ReplicaRequest::Read {
                id,
                eg,
                at: read_at_from_wire(read.at)?,
                query: query_from_wire(read.query)?,
            },
            r::Request::Snapshot(_) => ReplicaRequest::Snapshot { id, eg },
            r::Request::ScanGlobal(scan) => {
                let range = required(scan.range, "scan_global.range")?;
                ReplicaRequest::ScanGlobal {
                    id,
                    range: range_from_wire(range),
                    limit: scan
                        .limit
                        .map(|l| narrow(l, "scan_global.limit"))
                        .transpose()?,
                    reverse: scan.reverse,
                    server: scan
                        .server
                        .map(|s| narrow(u64::from(s), "scan_global.server").map(ServerId))
                        .transpose()?,
                    routed_by: scan.routed_by.map(Version),
                }
            }
            r::Request::ListGroups(list) => ReplicaRequest::ListGroups {
                id,
                after: list.after.map(EgId),
                limit: narrow(list.limit, "list_groups.limit")?,
                server: list
                    .server
                    .map(|s| narrow(u64::from(s), "list_groups.server").map(ServerId))
                    .transpose()?,
            },
        })
    }
}

fn prepare_to_wire(result: PrepareResult) -> pb::PrepareResult {
    use pb::prepare_result::{Promised, Result as R};
    let result = match result {
        PrepareResult::Promised(accepted) => R::Promised(Promised {
            accepted: accepted.map(value_to_wire),
        }),
        PrepareResult::Rejected { promised } => R::Rejected(ballot_to_wire(promised)),
        PrepareResult::Visible(ballot, entry) => R::Visible(value_to_wire((ballot, entry))),
        PrepareResult::Truncated => R::Truncated(true),
    };
    pb::PrepareResult {
        result: Some(result),
    }
}

fn prepare_from_wire(result: pb::PrepareResult) -> Result<PrepareResult, WireError> {
    use pb::prepare_result::Result as R;
    Ok(match required(result.result, "prepare.result")? {
        R::Promised(p) => PrepareResult::Promised(p.accepted.map(value_from_wire).transpose()?),
        R::Rejected(b) => PrepareResult::Rejected {
            promised: ballot_from_wire(Some(b), "prepare.rejected")?,
        },
        R::Visible(v) => {
            let (ballot, entry) = value_from_wire(v)?;
            PrepareResult::Visible(ballot, entry)
        }
        R::Truncated(_) => PrepareResult::Truncated,
    })
}

fn accept_to_wire(result: AcceptResult) -> pb::AcceptResult {
    use pb::accept_result::Result as R;
    let result = match result {
        AcceptResult::Accepted => R::Accepted(true),
        AcceptResult::GrantedContended => R::GrantedContended(true),
        AcceptResult::Rejected { promised } => R::Rejected(ballot_to_wire(promised)),
        AcceptResult::GrantRefused(GrantRefusal::NotLeader) => R::GrantRefusedNotLeader(true),
        AcceptResult::GrantRefused(GrantRefusal::Taken(txn)) => {
            R::GrantRefusedTaken(txn_to_wire(txn))
        }
        AcceptResult::Visible(ballot, entry) => R::Visible(value_to_wire((ballot, entry))),
        AcceptResult::Truncated => R::Truncated(true),
    };
    pb::AcceptResult {
        result: Some(result),
    }
}

fn accept_from_wire(result: pb::AcceptResult) -> Result<AcceptResult, WireError> {
    use pb::accept_result::Result as R;
    Ok(match required(result.result, "accept.result")? {
        R::Accepted(_) => AcceptResult::Accepted,
        R::GrantedContended(_) => AcceptResult::GrantedContended,
        R::Rejected(b) => AcceptResult::Rejected {
            promised: ballot_from_wire(Some(b), "accept.rejected")?,
        },
        R::GrantRefusedNotLeader(_) => AcceptResult::GrantRefused(GrantRefusal::NotLeader),
        R::GrantRefusedTaken(txn) => {
            AcceptResult::GrantRefused(GrantRefusal::Taken(txn_from_wire(txn)))
        }
        R::Visible(v) => {
            let (ballot, entry) = value_from_wire(v)?;
            AcceptResult::Visible(ballot, entry)
        }
        R::Truncated(_) => AcceptResult::Truncated,
    })
}

fn error_to_wire(error: ReplicaError) -> pb::ReplicaError {
    use pb::replica_error::Error as E;
    let error = match error {
        ReplicaError::NotVoter => E::NotVoter(true),
        ReplicaError::NotServing => E::NotServing(true),
        ReplicaError::NotApplied { applied } => E::NotApplied(applied.0),
        ReplicaError::Truncated {
            truncated,
            chosen: None,
        } => E::Truncated(truncated.0),
        ReplicaError::Truncated {
            truncated,
            chosen: Some(chosen),
        } => E::TruncatedChosen(pb::TruncatedChosen {
            truncated: truncated.0,
            txn: chosen.txns().first().copied().map(txn_to_wire),
            joined: chosen
                .txns()
                .iter()
                .skip(1)
                .copied()
                .map(txn_to_wire)
                .collect(),
        }),
        ReplicaError::BadEntry(e) => E::BadEntry(e),
        ReplicaError::BadQuery(e) => E::BadQuery(e),
        ReplicaError::Storage(e) => E::Storage(e),
        ReplicaError::Conflict(p) => E::Conflict(p.0),
        ReplicaError::Rejoining => E::Rejoining(true),
        ReplicaError::HistoryFrom { installed } => E::HistoryFrom(installed.0),
        ReplicaError::NoSnapshot => E::NoSnapshot(true),
        ReplicaError::WrongServer { range, epoch } => E::WrongServer(pb::RangeRefusal {
            range: range.0,
            version: epoch.0,
        }),
        ReplicaError::Frozen { range, move_id } => E::Frozen(pb::RangeRefusal {
            range: range.0,
            version: move_id.0,
        }),
        ReplicaError::PlacementNewer { version } => E::PlacementNewer(version.0),
    };
    pb::ReplicaError { error: Some(error) }
}

fn error_from_wire(error: pb::ReplicaError) -> Result<ReplicaError, WireError> {
    use pb::replica_error::Error as E;
    Ok(match required(error.error, "error")? {
        E::NotVoter(_) => ReplicaError::NotVoter,
        E::NotServing(_) => ReplicaError::NotServing,
        E::NotApplied(p) => ReplicaError::NotApplied {
            applied: Position(p),
        },
        E::Truncated(p) => ReplicaError::Truncated {
            truncated: Position(p),
            chosen: None,
        },
        E::TruncatedChosen(t) => ReplicaError::Truncated {
            truncated: Position(t.truncated),
            chosen: Some(match t.txn {
                // Joined transactions follow a first one.
                None if !t.joined.is_empty() => {
                    return Err(WireError::Missing("truncated_chosen.txn"));
                }
                first => ChosenTxn::of(first.into_iter().chain(t.joined).map(txn_from_wire)),
            }),
        },
        E::BadEntry(e) => ReplicaError::BadEntry(e),
        E::BadQuery(e) => ReplicaError::BadQuery(e),
        E::Storage(e) => ReplicaError::Storage(e),
        E::Conflict(p) => ReplicaError::Conflict(Position(p)),
        E::Rejoining(_) => ReplicaError::Rejoining,
        E::HistoryFrom(p) => ReplicaError::HistoryFrom {
            installed: Position(p),
        },
        E::NoSnapshot(_) => ReplicaError::NoSnapshot,
        E::WrongServer(r) => ReplicaError::WrongServer {
            range: RangeId(r.range),
            epoch: Version(r.version),
        },
        E::Frozen(r) => ReplicaError::Frozen {
            range: RangeId(r.range),
            move_id: Version(r.version),
        },
        E::PlacementNewer(v) => ReplicaError::PlacementNewer {
            version: Version(v),
        },
    })
}

fn log_state_to_wire(state: LogState) -> pb::LogState {
    pb::LogState {
        highest: state.highest.0,
        visible: state.visible.0,
        applied: state.applied.0,
        truncated: state.truncated.0,
        next_leader: state.next_leader.map(|r| u32::from(r.0)),
    }
}

fn log_state_from_wire(state: pb::LogState) -> Result<LogState, WireError> {
    Ok(LogState {
        highest: Position(state.highest),
        visible: Position(state.visible),
        applied: Position(state.applied),
        truncated: Position(state.truncated),
        next_leader: state
            .next_leader
            .map(|r| replica_from_wire(r, "log_state.next_leader"))
            .transpose()?,
    })
}

impl From<ReplicaReply> for pb::ReplicaReply {
    fn from(reply: ReplicaReply) -> Self {
        use pb::replica_reply as r;
        let (id, body) = match reply {
            ReplicaReply::Prepare { id, result } => {
                (id, r::Reply::Prepare(prepare_to_wire(result)))
            }
            ReplicaReply::Accept { id, result } => (id, r::Reply::Accept(accept_to_wire(result))),
            ReplicaReply::MarkedVisible { id, applied } => (
                id,
                r::Reply::MarkedVisible(r::MarkedVisible { applied: applied.0 }),
            ),
            ReplicaReply::LogState { id, state } => {
                (id, r::Reply::LogState(log_state_to_wire(state)))
            }
            ReplicaReply::Log { id, slot } => (
                id,
                r::Reply::Log(r::Log {
                    slot: slot.map(slot_to_wire),
                }),
            ),
            ReplicaReply::Data {
                id,
                at,
                rows,
                pending,
                next_leader,
            } => (
                id,
                r::Reply::Data(r::Data {
                    at: at.map(|p| p.0),
                    rows: rows.into_iter().map(row_to_wire).collect(),
                    pending: pending.into_iter().map(row_to_wire).collect(),
                    next_leader: next_leader.map(|r| u32::from(r.0)),
                }),
            ),
            ReplicaReply::Snapshot { id, at, slot, rows } => (
                id,
                r::Reply::Snapshot(r::Snapshot {
                    at: at.0,
                    slot: Some(slot_to_wire(slot)),
                    rows: rows.into_iter().map(row_to_wire).collect(),
                }),
            ),
            ReplicaReply::Groups { id, groups } => (
                id,
                r::Reply::Groups(r::Groups {
                    groups: groups.into_iter().map(|eg| eg.0).collect(),
                }),
            ),
            ReplicaReply::Error { id, error } => (id, r::Reply::Error(error_to_wire(error))),
        };
        pb::ReplicaReply {
            id,
            reply: Some(body),
        }
    }
}

impl TryFrom<pb::ReplicaReply> for ReplicaReply {
    type Error = WireError;

    fn try_from(reply: pb::ReplicaReply) -> Result<Self, WireError> {
        use pb::replica_reply as r;
        let id = reply.id;
        Ok(match required(reply.reply, "reply")? {
            r::Reply::Prepare(p) => ReplicaReply::Prepare {
                id,
                result: prepare_from_wire(p)?,
            },
            r::Reply::Accept(a) => ReplicaReply::Accept {
                id,
                result: accept_from_wire(a)?,
            },
            r::Reply::MarkedVisible(m) => ReplicaReply::MarkedVisible {
                id,
                applied: Position(m.applied),
            },
            r::Reply::LogState(s) => ReplicaReply::LogState {
                id,
                state: log_state_from_wire(s)?,
            },
            r::Reply::Log(l) => ReplicaReply::Log {
                id,
                slot: l.slot.map(|s| slot_from_wire(Some(s))).transpose()?,
            },
            r::Reply::Data(d) => ReplicaReply::Data {
                id,
                at: d.at.map(Position),
                rows: d.rows.into_iter().map(row_from_wire).collect(),
                pending: d.pending.into_iter().map(row_from_wire).collect(),
                next_leader: d
                    .next_leader
                    .map(|r| replica_from_wire(r, "data.next_leader"))
                    .transpose()?,
            },
            r::Reply::Snapshot(s) => ReplicaReply::Snapshot {
                id,
                at: Position(s.at),
                slot: slot_from_wire(s.slot)?,
                rows: s.rows.into_iter().map(row_from_wire).collect(),
            },
            r::Reply::Groups(g) => ReplicaReply::Groups {
                id,
                groups: g.groups.into_iter().map(EgId).collect(),
            },
            r::Reply::Error(e) => ReplicaReply::Error {
                id,
                error: error_from_wire(e)?,
            },
        })
    }
}
