//! The public API (`megastore.client.v1.Megastore`), served by every replica for
//! clients in any language: it runs the client library on their behalf. This is the
//! edge where the API's messages become library calls; malformed requests are refused
//! here, naming the field.

use megastore_client::{
    Assert, Attempt, Client, ClientError, Entry, LeaseError, Mutation, Outcome, TxnResult,
    entity_group,
};
use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_server::Megastore;
use megastore_rpc::public::{
    check_key, entity_from_wire, entity_to_wire, invalid_argument as invalid, key_range_from_wire,
    query_from_wire, read_mode_from_wire, read_path_to_wire, resolution_to_wire, row_to_wire,
    txn_id_from_wire, txn_id_to_wire, typed_row_to_wire, value_to_wire, values_from_wire,
};
use megastore_types::{EgId, TxnId};
use tonic::{Request, Response, Status};

use crate::gateway_access::{AccessControl, Caller, Tables, Written};
use crate::gateway_indexes::entity_read_to_wire;
use crate::gateway_sessions::{SessionState, Sessions, open, open_to_write};
use megastore_access::{Access, Target};
use tokio_stream::wrappers::ReceiverStream;

use crate::gateway_catalog::Catalogs;

/// The API's service on one replica.
pub(crate) struct Gateway {
    pub(crate) client: Client,
    pub(crate) sessions: Sessions,
    pub(crate) catalogs: Catalogs,
    pub(crate) access: std::sync::Arc<AccessControl>,
}

impl Gateway {
    pub(crate) fn new(
        client: Client,
        lockd: megastore_rpc::LockdClient,
        limits: &megastore_config::GatewayLimits,
        access: std::sync::Arc<AccessControl>,
    ) -> Self {
        Self {
            client,
            sessions: Sessions::new(limits),
            catalogs: Catalogs::new(lockd),
            access,
        }
    }

    /// The schema, when checking `caller` on group `eg` needs it (a user, on a typed
    /// group).
    pub(crate) async fn catalog_for(
        &self,
        caller: &Caller,
        eg: &EgId,
    ) -> Result<Option<std::sync::Arc<megastore_schema::Catalog>>, Status> {
        if caller.user().is_none() || megastore_client::group_name(eg).is_some() {
            return Ok(None);
        }
        self.catalogs.current().await.map(Some)
    }

    /// Passes if `caller` may `access` `span` of group `eg`.
    pub(crate) async fn require_group(
        &self,
        caller: &Caller,
        access: Access,
        eg: &EgId,
        span: Tables,
    ) -> Result<(), Status> {
        let catalog = self.catalog_for(caller, eg).await?;
        caller.require_group(access, eg, span, catalog.as_deref())
    }

    /// What a write staged on `span` of group `eg` touches.
    pub(crate) async fn written_group(
        &self,
        caller: &Caller,
        eg: &EgId,
    ) -> Result<Written, Status> {
        let catalog = self.catalog_for(caller, eg).await?;
        Ok(crate::gateway_access::written_group(eg, catalog.as_deref()))
    }

    /// The group a request names: untyped by `eg`, or typed by its root entity.
    async fn named_group(&self, eg: Vec<u8>, root: Option<pb::GroupRoot>) -> Result<EgId, Status> {
        self.group_named(("eg", "root"), eg, root).await
    }

    /// [`Gateway::named_group`], for the gateway's other modules.
    pub(crate) async fn named_group_pub(
        &self,
        eg: Vec<u8>,
        root: Option<pb::GroupRoot>,
    ) -> Result<EgId, Status> {
        self.named_group(eg, root).await
    }

    /// The group a request names in its fields `fields` (`(name, root)`): by an
    /// untyped group's name, or by its root entity.
    pub(crate) async fn group_named(
        &self,
        (name_field, root_field): (&str, &str),
        eg: Vec<u8>,
        root: Option<pb::GroupRoot>,
    ) -> Result<EgId, Status> {
        match (eg.is_empty(), root) {
            (false, None) => megastore_client::group(&eg).map_err(|e| invalid(name_field, e)),
            (true, Some(root)) => {
                let key = values_from_wire(&format!("{root_field}.key"), root.key)?;
                let catalog = self.catalogs.current().await?;
                entity_group(&catalog, &root.table, &key).map_err(|e| invalid(root_field, e))
            }
            (false, Some(_)) => Err(invalid(
                name_field,
                format!("give {name_field} or {root_field}, not both"),
            )),
            (true, None) => Err(invalid(
                name_field,
                format!(
                    "name an entity group: by its name ({name_field}) or by its root entity ({root_field})"
                ),
            )),
        }
    }
}

pub(crate) fn status(e: ClientError) -> Status {
    match e {
        ClientError::Unavailable(why) => Status::unavailable(why),
        ClientError::Closed => Status::unavailable("replica stopping"),
        ClientError::Unknown { .. } => Status::unknown(e.to_string()),
        ClientError::TooManyConflicts { .. } => Status::aborted(e.to_string()),
        ClientError::Collected { .. } => Status::out_of_range(e.to_string()),
        ClientError::Lease(LeaseError::Ended(_)) => Status::not_found(e.to_string()),
        ClientError::Lease(LeaseError::Held { .. } | LeaseError::NotHolder { .. }) => {
            Status::failed_precondition(e.to_string())
        }
        ClientError::Schema(_) | ClientError::InvalidArgument(_) => {
            Status::invalid_argument(e.to_string())
        }
        ClientError::Config(_) | ClientError::Lock(_) | ClientError::Corrupt(_) => {
            Status::internal(e.to_string())
        }
    }
}

pub(crate) fn group(eg: &[u8]) -> Result<EgId, Status> {
    megastore_client::group(eg).map_err(status)
}

/// A commit's answer. Every error but one that says nothing was sent is indefinite:
/// UNKNOWN with the transaction's id, to resolve.
pub(crate) fn commit_answer(
    result: Result<Attempt, ClientError>,
    id: TxnId,
    eg: &EgId,
    catalog: Option<&megastore_schema::Catalog>,
) -> Result<pb::CommitResponse, Status> {
    use pb::commit_response::{Committed, Conflict, Outcome as Wire};
    let outcome = match result {
        Ok(Attempt::Done(Outcome::Committed { position, .. })) => Wire::Committed(Committed {
            position: position.0,
        }),
        Ok(Attempt::Done(Outcome::ReadOnly)) => Wire::Committed(Committed { position: 0 }),
        Ok(Attempt::Retry { keys, .. }) => {
            let rows = catalog.map_or_else(Vec::new, |catalog| {
                keys.iter()
                    .filter_map(|row| typed_row_to_wire(catalog, row))
                    .collect()
            });
            Wire::Conflict(Conflict { keys, rows })
        }
        Err(ClientError::Unknown { txn, position }) => {
            return Err(Status::unknown(format!(
                "outcome unknown: transaction {txn} may hold position {} of group {eg}; Resolve it by its id (client {}, seq {}, position {})",
                position.0, txn.client.0, txn.seq, position.0
            )));
        }
        Err(ClientError::Closed) => {
            return Err(Status::unknown(format!(
                "outcome unknown: the replica stopped while committing transaction {id}; Resolve it by its id at another replica"
            )));
        }
        Err(e) => return Err(status(e)),
    };
    Ok(pb::CommitResponse {
        outcome: Some(outcome),
    })
}

pub(crate) fn entry_to_wire(entry: Entry) -> pb::Entry {
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
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let eg = group(&request.eg)?;
        caller.require(Access::Read, Target::Group(&request.eg))?;
        let mode = read_mode_from_wire(request.mode)?;
        let query = query_from_wire(request.query)?;
        let read = self.client.read(&eg, mode, query).await.map_err(status)?;
        Ok(Response::new(pb::ReadResponse {
            rows: read.rows.into_iter().map(row_to_wire).collect(),
            position: read.position.map_or(0, |p| p.0),
            replica: u32::from(read.replica.0),
            path: read_path_to_wire(read.path).to_string(),
        }))
    }

    async fn begin(
        &self,
        request: Request<pb::BeginRequest>,
    ) -> Result<Response<pb::BeginResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let connection = request.remote_addr();
        let request = request.into_inner();
        if request.blind && request.root.is_some() {
            return Err(invalid(
                "blind",
                "a typed group's transaction cannot be blind: its entity writes read what they replace (name an untyped group by `eg`)",
            ));
        }
        let eg = self.named_group(request.eg, request.root).await?;
        self.require_group(&caller, Access::Read, &eg, Tables::Any)
            .await?;
        // Begin fixes the position every read of the transaction sees (a blind one's:
        // the position it commits after).
        let mut transaction = if request.blind {
            self.client.begin_blind(&eg)
        } else {
            self.client.begin(&eg)
        };
        let position = transaction.position().await.map_err(status)?;
        let id = txn_id_to_wire(transaction.id(), position.next());
        let txn = self.sessions.insert(transaction, connection, &caller)?;
        Ok(Response::new(pb::BeginResponse {
            txn,
            position: position.0,
            id: Some(id),
        }))
    }

    async fn txn_read(
        &self,
        request: Request<pb::TxnReadRequest>,
    ) -> Result<Response<pb::TxnReadResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        let txn = open(&mut guard)?;
        self.require_group(&caller, Access::Read, txn.eg(), Tables::Every)
            .await?;
        for (i, k) in request.keys.iter().enumerate() {
            check_key(&format!("keys[{i}]"), k)?;
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
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        let txn = open(&mut guard)?;
        self.require_group(&caller, Access::Read, txn.eg(), Tables::Every)
            .await?;
        let range = request
            .range
            .ok_or_else(|| invalid("range", "give the range (empty bounds: the whole group)"))?;
        let (range, limit) = key_range_from_wire("range", range)?;
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
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        let Some(name) = megastore_client::group_name(open(&mut guard)?.eg()) else {
            return Err(invalid(
                "txn",
                "began on a typed entity group: write its entities (PutEntity, DeleteEntity)",
            ));
        };
        caller.require(Access::Write, Target::Group(&name))?;
        // All checked before any is staged: a refused request stages nothing.
        for (i, row) in request.rows.iter().enumerate() {
            check_key(&format!("rows[{i}].key"), &row.key)?;
            if row.cells.is_empty() {
                return Err(invalid(
                    &format!("rows[{i}].cells"),
                    "write at least one cell",
                ));
            }
            for (j, cell) in row.cells.iter().enumerate() {
                let value = match &cell.change {
                    Some(Change::Set(value)) => Some(value.as_slice()),
                    Some(Change::Delete(_)) => None,
                    None => {
                        return Err(invalid(
                            &format!("rows[{i}].cells[{j}].change"),
                            "set a value or delete",
                        ));
                    }
                };
                megastore_client::check_cell_write(&row.key, &cell.column, value)
                    .map_err(|e| invalid(&format!("rows[{i}].cells[{j}]"), e))?;
            }
        }
        let txn = open_to_write(&mut guard, Written::Group(name))?;
        for row in request.rows {
            for cell in row.cells {
                match cell.change {
                    Some(Change::Set(value)) => txn.set(&row.key, &cell.column, &value),
                    Some(Change::Delete(_)) => txn.delete(&row.key, &cell.column),
                    None => Ok(()),
                }
                .map_err(status)?;
            }
        }
        Ok(Response::new(pb::WriteResponse {}))
    }

    async fn commit(
        &self,
        request: Request<pb::CommitRequest>,
    ) -> Result<Response<pb::CommitResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let handle = request.into_inner().txn;
        let mut guard = self.sessions.locked(handle, &caller).await?;
        let typed = match &*guard {
            SessionState::Committed(answer) => return answer.clone().map(Response::new),
            SessionState::Open(txn, written) => {
                // A grant revoked since the write was staged stops the commit.
                caller.require_all(Access::Write, written)?;
                megastore_client::group_name(txn.eg()).is_none()
            }
        };
        // A typed group's conflicting rows are decoded with the schema (left undecoded
        // if it cannot be read now).
        let catalog = if typed {
            self.catalogs.current().await.ok()
        } else {
            None
        };
        // The commit runs to its end in a task of its own, with the handle locked:
        // a client that gives up waiting does not cut it short, and its Commit sent
        // again waits for the same answer.
        let committing = tokio::spawn(async move {
            // Until the commit ends, the answer is the indefinite one: a commit task
            // that died mid-way leaves that behind for a Commit sent again.
            let unfinished = Status::unknown(
                "outcome unknown: the commit did not finish on this replica; Resolve it by its id",
            );
            let SessionState::Open(txn, _) =
                std::mem::replace(&mut *guard, SessionState::Committed(Err(unfinished)))
            else {
                unreachable!("the handle is locked and was open");
            };
            let (id, eg) = (txn.id(), txn.eg().clone());
            let answer = commit_answer(txn.commit().await, id, &eg, catalog.as_deref());
            *guard = SessionState::Committed(answer.clone());
            answer
        });
        // Committing from here on: no longer an open transaction.
        self.sessions.committed(handle);
        committing
            .await
            .map_err(|e| {
                Status::unknown(format!(
                    "outcome unknown: the commit failed ({e}); Resolve it by its id"
                ))
            })?
            .map(Response::new)
    }

    async fn resolve(
        &self,
        request: Request<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let eg = self.named_group(request.eg, request.root).await?;
        self.require_group(&caller, Access::Read, &eg, Tables::Any)
            .await?;
        let (txn, position) = txn_id_from_wire("id", request.id)?;
        // Begin's id names the transaction's first position; a commit that lost it
        // went on to the next ones, so the whole commit span is settled.
        let resolution = self
            .client
            .resolve_patiently_from_first(&eg, position, txn)
            .await;
        Ok(Response::new(resolution_to_wire(resolution, position)))
    }

    async fn commit_multi(
        &self,
        request: Request<pb::CommitMultiRequest>,
    ) -> Result<Response<pb::CommitResponse>, Status> {
        let caller = self.access.caller(&request)?;
        Gateway::commit_multi(self, &caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn resolve_multi(
        &self,
        request: Request<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, Status> {
        let caller = self.access.caller(&request)?;
        Gateway::resolve_multi(self, &caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn settle_prepared(
        &self,
        request: Request<pb::SettlePreparedRequest>,
    ) -> Result<Response<pb::SettlePreparedResponse>, Status> {
        let caller = self.access.caller(&request)?;
        Gateway::settle_prepared(self, &caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn abort(
        &self,
        request: Request<pb::AbortRequest>,
    ) -> Result<Response<pb::AbortResponse>, Status> {
        let caller = self.access.caller(&request)?;
        self.sessions.remove(request.into_inner().txn, &caller);
        Ok(Response::new(pb::AbortResponse {}))
    }

    async fn snapshot(
        &self,
        request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let eg = group(&request.eg)?;
        caller.require(Access::Read, Target::Group(&request.eg))?;
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
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let eg = group(&request.eg)?;
        // A fence assertion raises the fence when it holds: a write too.
        let fences = request
            .asserts
            .iter()
            .any(|a| matches!(a.condition, Some(pb::assert::Condition::FenceToken(_))));
        let access = if request.mutations.is_empty() && !fences {
            Access::Read
        } else {
            Access::Write
        };
        caller.require(access, Target::Group(&request.eg))?;
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
                Some(pb::assert::Condition::FenceToken(token)) => {
                    Ok(Assert::Fence { key: a.key, token })
                }
                None => Err(invalid(
                    &format!("asserts[{i}].condition"),
                    "give a version, absent or a fence_token",
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
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let eg = group(&request.eg)?;
        caller.require(Access::Read, Target::Group(&request.eg))?;
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
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Read, Target::Table(&request.table))?;
        let key = values_from_wire("key", request.key)?;
        let catalog = self.catalogs.current().await?;
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
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
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let entity = entity_from_wire("entity", request.entity)?;
        caller.require(Access::Write, Target::Table(&entity.table))?;
        let catalog = self.catalogs.current().await?;
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        open_to_write(&mut guard, Written::Table(entity.table.clone()))?
            .put_entity(&catalog, &entity)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::PutEntityResponse {}))
    }

    async fn delete_entity(
        &self,
        request: Request<pb::DeleteEntityRequest>,
    ) -> Result<Response<pb::DeleteEntityResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let key = values_from_wire("key", request.key)?;
        caller.require(Access::Write, Target::Table(&request.table))?;
        let catalog = self.catalogs.current().await?;
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        let existed = open_to_write(&mut guard, Written::Table(request.table.clone()))?
            .delete_entity(&catalog, &request.table, &key)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeleteEntityResponse { existed }))
    }

    async fn scan_table(
        &self,
        request: Request<pb::ScanTableRequest>,
    ) -> Result<Response<pb::ScanTableResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Read, Target::Table(&request.table))?;
        let root_key = values_from_wire("root_key", request.root_key)?;
        let limit = (request.limit > 0).then_some(request.limit as usize);
        let catalog = self.catalogs.current().await?;
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
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
        self.serve_scan_index(request).await
    }

    async fn read_entity(
        &self,
        request: Request<pb::ReadEntityRequest>,
    ) -> Result<Response<pb::ReadEntityResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Read, Target::Table(&request.table))?;
        let key = values_from_wire("key", request.key)?;
        let mode = read_mode_from_wire(request.mode)?;
        let catalog = self.catalogs.current().await?;
        let read = self
            .client
            .read_entity(&catalog, mode, &request.table, &key)
            .await
            .map_err(status)?;
        Ok(Response::new(entity_read_to_wire(read)))
    }

    async fn scan_global_index(
        &self,
        request: Request<pb::ScanGlobalIndexRequest>,
    ) -> Result<Response<pb::ScanGlobalIndexResponse>, Status> {
        self.serve_scan_global_index(request).await
    }

    type StreamGlobalIndexStream = ReceiverStream<Result<pb::ScanGlobalIndexResponse, Status>>;

    type WatchStream = ReceiverStream<Result<pb::WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.serve_watch(request).await
    }

    async fn stream_global_index(
        &self,
        request: Request<pb::ScanGlobalIndexRequest>,
    ) -> Result<Response<Self::StreamGlobalIndexStream>, Status> {
        self.serve_stream_global_index(request).await
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, Status> {
        self.serve_send_message(request).await
    }

    async fn receive(
        &self,
        request: Request<pb::ReceiveRequest>,
    ) -> Result<Response<pb::ReceiveResponse>, Status> {
        self.serve_receive(request).await
    }

    async fn deliver(
        &self,
        request: Request<pb::DeliverRequest>,
    ) -> Result<Response<pb::DeliverResponse>, Status> {
        self.serve_deliver(request).await
    }

    async fn merge_join(
        &self,
        request: Request<pb::MergeJoinRequest>,
    ) -> Result<Response<pb::MergeJoinResponse>, Status> {
        self.serve_merge_join(request).await
    }

    async fn read_entities(
        &self,
        request: Request<pb::ReadEntitiesRequest>,
    ) -> Result<Response<pb::ReadEntitiesResponse>, Status> {
        self.serve_read_entities(request).await
    }

    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        self.serve_lease_grant(request).await
    }

    async fn lease_keep_alive(
        &self,
        request: Request<pb::LeaseKeepAliveRequest>,
    ) -> Result<Response<pb::LeaseKeepAliveResponse>, Status> {
        self.serve_lease_keep_alive(request).await
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        self.serve_lease_revoke(request).await
    }

    async fn lock(
        &self,
        request: Request<pb::LockRequest>,
    ) -> Result<Response<pb::LockResponse>, Status> {
        self.serve_lock(request).await
    }

    async fn unlock(
        &self,
        request: Request<pb::UnlockRequest>,
    ) -> Result<Response<pb::UnlockResponse>, Status> {
        self.serve_unlock(request).await
    }

    async fn lock_holder(
        &self,
        request: Request<pb::LockHolderRequest>,
    ) -> Result<Response<pb::LockHolderResponse>, Status> {
        self.serve_lock_holder(request).await
    }

    async fn put_leased(
        &self,
        request: Request<pb::PutLeasedRequest>,
    ) -> Result<Response<pb::PutLeasedResponse>, Status> {
        self.serve_put_leased(request).await
    }

    async fn leased_keys(
        &self,
        request: Request<pb::LeasedKeysRequest>,
    ) -> Result<Response<pb::LeasedKeysResponse>, Status> {
        self.serve_leased_keys(request).await
    }

    async fn group_of(
        &self,
        request: Request<pb::GroupOfRequest>,
    ) -> Result<Response<pb::GroupOfResponse>, Status> {
        // Schema arithmetic, no data: any caller the API serves may ask.
        self.access.caller(&request)?;
        let request = request.into_inner();
        let key = values_from_wire("key", request.key)?;
        let catalog = self.catalogs.current().await?;
        let (root_table, root_key) =
            megastore_client::group_root(&catalog, &request.table, &key).map_err(status)?;
        let id = entity_group(&catalog, root_table, &root_key).map_err(status)?;
        Ok(Response::new(pb::GroupOfResponse {
            root: Some(pb::GroupRoot {
                table: root_table.to_string(),
                key: root_key.into_iter().map(value_to_wire).collect(),
            }),
            id: id.0,
        }))
    }
}
