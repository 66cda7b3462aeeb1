//! The public API (`megastore.client.v1.Megastore`), served by every replica for
//! clients in any language: it runs the client library on their behalf. This is the
//! edge where the API's messages become library calls; malformed requests are refused
//! here, naming the field.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use megastore_client::{
    Assert, Attempt, Client, ClientError, Entry, Mutation, Outcome, Transaction, TxnResult,
    entity_group,
};
use megastore_paxos::{DataQuery, ReadMode, ReadPath};
use megastore_rowstore::{KeyRange, Row};
use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_server::Megastore;
use megastore_types::EgId;
use tokio::sync::{Mutex, OwnedMutexGuard};
use tonic::{Request, Response, Status};

use crate::gateway_typed::{
    Catalogs, entity_from_wire, entity_to_wire, index_entry_to_wire, values_from_wire,
};

/// Transactions unused this long are dropped.
const SESSION_IDLE_MAX: Duration = Duration::from_secs(60);
/// Open transactions one replica keeps at most.
const SESSIONS_MAX: usize = 10_000;
/// The longest entity group name accepted.
const EG_BYTES_MAX: usize = 1024;
/// The byte after a group's prefix that starts its reserved rows (versioned keys: object
/// ids in the schema's long form).
const RESERVED: u8 = 0xF8;

struct Session {
    txn: Arc<Mutex<Option<Transaction>>>,
    last_used: Instant,
}

/// The API's service on one replica.
pub(crate) struct Gateway {
    client: Client,
    sessions: std::sync::Mutex<HashMap<u64, Session>>,
    catalogs: Catalogs,
}

/// The open transaction behind a locked session (a commit in progress took it).
fn open(guard: &mut Option<Transaction>) -> Result<&mut Transaction, Status> {
    guard
        .as_mut()
        .ok_or_else(|| Status::failed_precondition("txn: already committing"))
}

impl Gateway {
    pub(crate) fn new(client: Client, lockd: megastore_lockd::LockdClient) -> Self {
        Self {
            client,
            sessions: std::sync::Mutex::new(HashMap::new()),
            catalogs: Catalogs::new(lockd),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open transaction `txn`, locked for one call.
    async fn locked(&self, txn: u64) -> Result<OwnedMutexGuard<Option<Transaction>>, Status> {
        Ok(self.session(txn)?.lock_owned().await)
    }

    fn session(&self, txn: u64) -> Result<Arc<Mutex<Option<Transaction>>>, Status> {
        let mut sessions = self.sessions();
        let session = sessions.get_mut(&txn).ok_or_else(|| {
            Status::not_found(format!("txn: no open transaction {txn} on this replica (it ended, expired after {SESSION_IDLE_MAX:?} unused, or began elsewhere)"))
        })?;
        session.last_used = Instant::now();
        Ok(Arc::clone(&session.txn))
    }
}

fn invalid(field: &str, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {message}"))
}

fn status(e: ClientError) -> Status {
    match e {
        ClientError::Unavailable(why) => Status::unavailable(why),
        ClientError::Closed => Status::unavailable("replica stopping"),
        ClientError::Unknown { .. } => Status::unknown(e.to_string()),
        ClientError::TooManyConflicts { .. } => Status::aborted(e.to_string()),
        ClientError::Schema(_) => Status::invalid_argument(e.to_string()),
        ClientError::Config(_) | ClientError::Lock(_) | ClientError::Corrupt(_) => {
            Status::internal(e.to_string())
        }
    }
}

fn group(eg: Vec<u8>) -> Result<EgId, Status> {
    if eg.is_empty() {
        return Err(invalid("eg", "name an entity group (its key prefix)"));
    }
    if eg[0] == crate::registry::SYSTEM_BYTE {
        return Err(invalid(
            "eg",
            "group names starting with byte 0xFF are reserved",
        ));
    }
    if eg.len() > EG_BYTES_MAX {
        return Err(invalid(
            "eg",
            format!("{} bytes; at most {EG_BYTES_MAX}", eg.len()),
        ));
    }
    Ok(EgId(eg))
}

/// Checks that `key` is a data row of `eg` that clients may use.
fn data_key(eg: &EgId, field: &str, key: &[u8]) -> Result<(), Status> {
    match key
        .strip_prefix(eg.0.as_slice())
        .and_then(|rest| rest.first())
    {
        Some(&b) if (1..RESERVED).contains(&b) => Ok(()),
        _ => Err(invalid(
            field,
            format!(
                "{} is not a data row of group {eg}: keys are the group's prefix followed by a byte 0x01..0xF7",
                megastore_rowstore::display_key(key)
            ),
        )),
    }
}

fn mode(mode: i32) -> Result<ReadMode, Status> {
    match pb::ReadMode::try_from(mode) {
        Ok(pb::ReadMode::Current) => Ok(ReadMode::Current),
        Ok(pb::ReadMode::Snapshot) => Ok(ReadMode::Snapshot),
        Ok(pb::ReadMode::Inconsistent) => Ok(ReadMode::Inconsistent),
        _ => Err(invalid(
            "mode",
            "choose READ_MODE_CURRENT, READ_MODE_SNAPSHOT or READ_MODE_INCONSISTENT",
        )),
    }
}

fn query(eg: &EgId, query: Option<pb::RowQuery>) -> Result<DataQuery, Status> {
    use pb::row_query::Query;
    match query.and_then(|q| q.query) {
        None => Err(invalid("query", "give keys or a range")),
        Some(Query::Keys(keys)) => {
            for (i, key) in keys.keys.iter().enumerate() {
                data_key(eg, &format!("query.keys[{i}]"), key)?;
            }
            Ok(DataQuery::Rows(keys.keys))
        }
        Some(Query::Range(range)) => {
            let (range, limit) = key_range(eg, "query.range", range)?;
            Ok(DataQuery::Scan { range, limit })
        }
    }
}

/// A client's key range inside group `eg` (empty bounds: the group's first and last
/// data rows), and its limit.
fn key_range(
    eg: &EgId,
    field: &str,
    range: pb::row_query::Range,
) -> Result<(KeyRange, Option<usize>), Status> {
    let mut start = range.start;
    if start.is_empty() {
        start = eg.0.clone();
        start.push(1);
    }
    data_key(eg, &format!("{field}.start"), &start)?;
    let mut last = eg.0.clone();
    last.push(RESERVED);
    let end = if range.end.is_empty() {
        last
    } else {
        if range.end != last {
            data_key(eg, &format!("{field}.end"), &range.end)?;
        }
        range.end
    };
    if end < start {
        return Err(invalid(field, "end is before start"));
    }
    let limit = (range.limit > 0).then_some(range.limit as usize);
    Ok((
        KeyRange {
            start,
            end: Some(end),
        },
        limit,
    ))
}

fn row_to_wire(row: Row) -> pb::Row {
    pb::Row {
        key: row.key,
        cells: row
            .cells
            .into_iter()
            .map(|(column, cell)| pb::Cell {
                column,
                value: cell.value,
                position: cell.timestamp,
            })
            .collect(),
    }
}

fn entry_to_wire(entry: Entry) -> pb::Entry {
    pb::Entry {
        key: entry.key,
        version: entry.version,
        value: entry.value,
    }
}

#[tonic::async_trait]
impl Megastore for Gateway {
    async fn read(
        &self,
        request: Request<pb::ReadRequest>,
    ) -> Result<Response<pb::ReadResponse>, Status> {
        let request = request.into_inner();
        let eg = group(request.eg)?;
        let mode = mode(request.mode)?;
        let query = query(&eg, request.query)?;
        let read = self.client.read(&eg, mode, query).await.map_err(status)?;
        let path = match read.path {
            ReadPath::LocalVouched => "local",
            ReadPath::Majority => "majority",
            ReadPath::Snapshot => "snapshot",
            ReadPath::Inconsistent => "inconsistent",
        };
        Ok(Response::new(pb::ReadResponse {
            rows: read.rows.into_iter().map(row_to_wire).collect(),
            position: read.position.map_or(0, |p| p.0),
            replica: u32::from(read.replica.0),
            path: path.to_string(),
        }))
    }

    async fn begin(
        &self,
        request: Request<pb::BeginRequest>,
    ) -> Result<Response<pb::BeginResponse>, Status> {
        let request = request.into_inner();
        let eg = match (request.eg.is_empty(), request.root) {
            (false, None) => group(request.eg)?,
            (true, Some(root)) => {
                let key = values_from_wire("root.key", root.key)?;
                let catalog = self.catalogs.current().await?;
                entity_group(&catalog, &root.table, &key).map_err(|e| invalid("root", e))?
            }
            (false, Some(_)) => return Err(invalid("eg", "give eg or root, not both")),
            (true, None) => {
                return Err(invalid(
                    "eg",
                    "name an entity group: its key prefix (eg) or its root entity (root)",
                ));
            }
        };
        let mut sessions = self.sessions();
        sessions.retain(|_, s| s.last_used.elapsed() < SESSION_IDLE_MAX);
        if sessions.len() >= SESSIONS_MAX {
            return Err(Status::resource_exhausted(format!(
                "{SESSIONS_MAX} transactions are open on this replica; commit or abort some"
            )));
        }
        let txn = loop {
            let id: u64 = rand::random();
            if id != 0 && !sessions.contains_key(&id) {
                break id;
            }
        };
        let session = Session {
            txn: Arc::new(Mutex::new(Some(self.client.begin(&eg)))),
            last_used: Instant::now(),
        };
        sessions.insert(txn, session);
        Ok(Response::new(pb::BeginResponse { txn }))
    }

    async fn txn_read(
        &self,
        request: Request<pb::TxnReadRequest>,
    ) -> Result<Response<pb::TxnReadResponse>, Status> {
        let request = request.into_inner();
        let mut guard = self.locked(request.txn).await?;
        let txn = guard
            .as_mut()
            .ok_or_else(|| Status::failed_precondition("txn: already committing"))?;
        let eg = txn.eg().clone();
        for (i, key) in request.keys.iter().enumerate() {
            data_key(&eg, &format!("keys[{i}]"), key)?;
        }
        let mut rows = Vec::new();
        for key in &request.keys {
            if let Some(row) = txn.get(key).await.map_err(status)? {
                rows.push(row_to_wire(row));
            }
        }
        Ok(Response::new(pb::TxnReadResponse { rows }))
    }

    async fn txn_scan(
        &self,
        request: Request<pb::TxnScanRequest>,
    ) -> Result<Response<pb::TxnReadResponse>, Status> {
        let request = request.into_inner();
        let mut guard = self.locked(request.txn).await?;
        let txn = open(&mut guard)?;
        let eg = txn.eg().clone();
        let range = request
            .range
            .ok_or_else(|| invalid("range", "give the range (empty bounds: the whole group)"))?;
        let (range, limit) = key_range(&eg, "range", range)?;
        let rows = txn.scan(range, limit).await.map_err(status)?;
        Ok(Response::new(pb::TxnReadResponse {
            rows: rows.into_iter().map(row_to_wire).collect(),
        }))
    }

    async fn write(
        &self,
        request: Request<pb::WriteRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        use pb::cell_write::Change;
        let request = request.into_inner();
        let mut guard = self.locked(request.txn).await?;
        let txn = guard
            .as_mut()
            .ok_or_else(|| Status::failed_precondition("txn: already committing"))?;
        let eg = txn.eg().clone();
        // All checked before any is staged: a refused request stages nothing.
        for (i, row) in request.rows.iter().enumerate() {
            data_key(&eg, &format!("rows[{i}].key"), &row.key)?;
            if row.cells.is_empty() {
                return Err(invalid(
                    &format!("rows[{i}].cells"),
                    "write at least one cell",
                ));
            }
            for (j, cell) in row.cells.iter().enumerate() {
                if cell.column.is_empty() {
                    return Err(invalid(
                        &format!("rows[{i}].cells[{j}].column"),
                        "must not be empty",
                    ));
                }
                if cell.change.is_none() {
                    return Err(invalid(
                        &format!("rows[{i}].cells[{j}].change"),
                        "set a value or delete",
                    ));
                }
            }
        }
        for row in request.rows {
            for cell in row.cells {
                match cell.change {
                    Some(Change::Set(value)) => txn.set(&row.key, &cell.column, &value),
                    Some(Change::Delete(_)) => txn.delete(&row.key, &cell.column),
                    None => {}
                }
            }
        }
        Ok(Response::new(pb::WriteResponse {}))
    }

    async fn commit(
        &self,
        request: Request<pb::CommitRequest>,
    ) -> Result<Response<pb::CommitResponse>, Status> {
        use pb::commit_response::{Committed, Conflict, Outcome as Wire};
        let txn_id = request.into_inner().txn;
        let session = self.session(txn_id)?;
        let txn = session
            .lock()
            .await
            .take()
            .ok_or_else(|| Status::failed_precondition("txn: already committing"))?;
        self.sessions().remove(&txn_id);
        let outcome = match txn.commit().await.map_err(status)? {
            Attempt::Done(Outcome::Committed { position, .. }) => Wire::Committed(Committed {
                position: position.0,
            }),
            Attempt::Done(Outcome::ReadOnly) => Wire::Committed(Committed { position: 0 }),
            Attempt::Retry { keys, .. } => Wire::Conflict(Conflict { keys }),
        };
        Ok(Response::new(pb::CommitResponse {
            outcome: Some(outcome),
        }))
    }

    async fn abort(
        &self,
        request: Request<pb::AbortRequest>,
    ) -> Result<Response<pb::AbortResponse>, Status> {
        let txn = request.into_inner().txn;
        self.sessions().remove(&txn);
        Ok(Response::new(pb::AbortResponse {}))
    }

    async fn snapshot(
        &self,
        request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        let request = request.into_inner();
        let eg = group(request.eg)?;
        let entries = self
            .client
            .snapshot(&eg, &request.keys)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SnapshotResponse {
            entries: entries.into_iter().map(entry_to_wire).collect(),
        }))
    }

    async fn versioned_txn(
        &self,
        request: Request<pb::VersionedTxnRequest>,
    ) -> Result<Response<pb::VersionedTxnResponse>, Status> {
        use pb::versioned_txn_response::{Applied, AssertFailed, Outcome as Wire};
        let request = request.into_inner();
        let eg = group(request.eg)?;
        let asserts = request
            .asserts
            .into_iter()
            .enumerate()
            .map(|(i, a)| match a.condition {
                Some(pb::assert::Condition::Version(version)) => Ok(Assert::Version {
                    key: a.key,
                    version,
                }),
                Some(pb::assert::Condition::Absent(_)) => Ok(Assert::Absent { key: a.key }),
                None => Err(invalid(
                    &format!("asserts[{i}].condition"),
                    "give a version or absent",
                )),
            })
            .collect::<Result<Vec<_>, Status>>()?;
        let mutations = request
            .mutations
            .into_iter()
            .enumerate()
            .map(|(i, m)| match m.change {
                Some(pb::mutation::Change::Put(value)) => Ok(Mutation::Put { key: m.key, value }),
                Some(pb::mutation::Change::Delete(_)) => Ok(Mutation::Delete { key: m.key }),
                None => Err(invalid(
                    &format!("mutations[{i}].change"),
                    "give put or delete",
                )),
            })
            .collect::<Result<Vec<_>, Status>>()?;
        let outcome = match self
            .client
            .versioned_txn(&eg, &asserts, &mutations)
            .await
            .map_err(status)?
        {
            TxnResult::Applied { versions } => Wire::Applied(Applied {
                written: versions
                    .into_iter()
                    .map(|(key, version)| pb::Entry {
                        key,
                        version,
                        value: None,
                    })
                    .collect(),
            }),
            TxnResult::AssertFailed { keys } => Wire::AssertFailed(AssertFailed { keys }),
        };
        Ok(Response::new(pb::VersionedTxnResponse {
            outcome: Some(outcome),
        }))
    }

    async fn keys(
        &self,
        request: Request<pb::KeysRequest>,
    ) -> Result<Response<pb::KeysResponse>, Status> {
        let request = request.into_inner();
        let eg = group(request.eg)?;
        let keys = self
            .client
            .keys(&eg, &request.prefix)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::KeysResponse { keys }))
    }
    async fn get_entity(
        &self,
        request: Request<pb::GetEntityRequest>,
    ) -> Result<Response<pb::GetEntityResponse>, Status> {
        let request = request.into_inner();
        let key = values_from_wire("key", request.key)?;
        let catalog = self.catalogs.current().await?;
        let mut guard = self.locked(request.txn).await?;
        let entity = open(&mut guard)?
            .get_entity(&catalog, &request.table, &key)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::GetEntityResponse {
            entity: entity.map(entity_to_wire),
        }))
    }

    async fn put_entity(
        &self,
        request: Request<pb::PutEntityRequest>,
    ) -> Result<Response<pb::PutEntityResponse>, Status> {
        let request = request.into_inner();
        let entity = entity_from_wire("entity", request.entity)?;
        let catalog = self.catalogs.current().await?;
        let mut guard = self.locked(request.txn).await?;
        open(&mut guard)?
            .put_entity(&catalog, &entity)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::PutEntityResponse {}))
    }

    async fn delete_entity(
        &self,
        request: Request<pb::DeleteEntityRequest>,
    ) -> Result<Response<pb::DeleteEntityResponse>, Status> {
        let request = request.into_inner();
        let key = values_from_wire("key", request.key)?;
        let catalog = self.catalogs.current().await?;
        let mut guard = self.locked(request.txn).await?;
        let existed = open(&mut guard)?
            .delete_entity(&catalog, &request.table, &key)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeleteEntityResponse { existed }))
    }

    async fn scan_table(
        &self,
        request: Request<pb::ScanTableRequest>,
    ) -> Result<Response<pb::ScanTableResponse>, Status> {
        let request = request.into_inner();
        let root_key = values_from_wire("root_key", request.root_key)?;
        let limit = (request.limit > 0).then_some(request.limit as usize);
        let catalog = self.catalogs.current().await?;
        let mut guard = self.locked(request.txn).await?;
        let entities = open(&mut guard)?
            .scan_table(&catalog, &request.table, &root_key, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ScanTableResponse {
            entities: entities.into_iter().map(entity_to_wire).collect(),
        }))
    }

    async fn scan_index(
        &self,
        request: Request<pb::ScanIndexRequest>,
    ) -> Result<Response<pb::ScanIndexResponse>, Status> {
        let request = request.into_inner();
        let leading = values_from_wire("leading", request.leading)?;
        let limit = (request.limit > 0).then_some(request.limit as usize);
        let catalog = self.catalogs.current().await?;
        let mut guard = self.locked(request.txn).await?;
        let entries = open(&mut guard)?
            .scan_index(&catalog, &request.index, &leading, limit)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ScanIndexResponse {
            entries: entries.into_iter().map(index_entry_to_wire).collect(),
        }))
    }
}
