//! The public API's index queries and lookups: a local index page inside a
//! transaction, global index pages (one, or every page as a stream), merge-joins and
//! parallel entity lookups. Requests become library calls here; the library decides
//! what each reads.

use megastore_client::{IndexQuery, IndexRead, LOOKUPS_IN_FLIGHT, PageToken};
use megastore_rpc::pb::client as pb;
use megastore_rpc::public::{
    IndexQueryWire, entity_to_wire, index_entry_to_wire, index_query_from_wire,
    invalid_argument as invalid, page_token_to_wire, read_mode_from_wire, read_path_to_wire,
    value_to_wire, values_from_wire,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::gateway::{Gateway, status};
use crate::gateway_sessions::open;
use megastore_access::{Access, Target};

/// Entries per message of a streamed global index scan that names no limit.
const STREAM_PAGE: usize = 256;

/// Lookups one `ReadEntities` may run at once.
const IN_FLIGHT_MAX: u32 = 1_024;

fn read_of(verify: bool) -> IndexRead {
    if verify {
        IndexRead::Verified
    } else {
        IndexRead::AsApplied
    }
}

/// An entity read outside a transaction, as the API returns it.
pub(crate) fn entity_read_to_wire(read: megastore_client::EntityRead) -> pb::ReadEntityResponse {
    pb::ReadEntityResponse {
        entity: read.entity.map(entity_to_wire),
        position: read.position.map_or(0, |p| p.0),
        replica: u32::from(read.replica.0),
        path: read_path_to_wire(read.path).to_string(),
    }
}

fn global_query(request: &pb::ScanGlobalIndexRequest) -> Result<IndexQuery, Status> {
    index_query_from_wire(IndexQueryWire {
        index: request.index.clone(),
        leading: request.leading.clone(),
        lower: request.lower.clone(),
        upper: request.upper.clone(),
        reverse: request.reverse,
        limit: request.limit,
        page_token: request.page_token.clone(),
    })
}

fn page_to_wire(scan: megastore_client::GlobalIndexScan) -> pb::ScanGlobalIndexResponse {
    pb::ScanGlobalIndexResponse {
        entries: scan.entries.into_iter().map(index_entry_to_wire).collect(),
        replica: u32::from(scan.replica.0),
        next_page_token: page_token_to_wire(scan.next),
    }
}

impl Gateway {
    pub(crate) async fn serve_scan_index(
        &self,
        request: Request<pb::ScanIndexRequest>,
    ) -> Result<Response<pb::ScanIndexResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let query = index_query_from_wire(IndexQueryWire {
            index: request.index,
            leading: request.leading,
            lower: request.lower,
            upper: request.upper,
            reverse: request.reverse,
            limit: request.limit,
            page_token: request.page_token,
        })?;
        let catalog = self.catalogs.current().await?;
        caller.require_index(&catalog, &query.index)?;
        let mut guard = self.sessions.locked(request.txn, &caller).await?;
        let page = open(&mut guard)?
            .scan_index(&catalog, &query)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ScanIndexResponse {
            entries: page.entries.into_iter().map(index_entry_to_wire).collect(),
            next_page_token: page_token_to_wire(page.next),
        }))
    }

    pub(crate) async fn serve_scan_global_index(
        &self,
        request: Request<pb::ScanGlobalIndexRequest>,
    ) -> Result<Response<pb::ScanGlobalIndexResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let query = global_query(&request)?;
        let catalog = self.catalogs.current().await?;
        caller.require_index(&catalog, &query.index)?;
        let scan = self
            .client
            .scan_global_index(&catalog, &query, read_of(request.verify))
            .await
            .map_err(status)?;
        Ok(Response::new(page_to_wire(scan)))
    }

    /// Every page of a global index query, one message each, until the last (or until
    /// the caller hangs up).
    pub(crate) async fn serve_stream_global_index(
        &self,
        request: Request<pb::ScanGlobalIndexRequest>,
    ) -> Result<Response<ReceiverStream<Result<pb::ScanGlobalIndexResponse, Status>>>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let mut query = global_query(&request)?;
        query.limit.get_or_insert(STREAM_PAGE);
        let read = read_of(request.verify);
        let catalog = self.catalogs.current().await?;
        caller.require_index(&catalog, &query.index)?;
        // The first page is read before answering, so a bad query is a status, not a
        // stream that fails at once.
        let first = self
            .client
            .scan_global_index(&catalog, &query, read)
            .await
            .map_err(status)?;
        let client = self.client.clone();
        let access = std::sync::Arc::clone(&self.access);
        let (pages, stream) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            let mut page = Ok(first);
            loop {
                // Each page goes out only if the caller may still read the index.
                if let Err(denied) = access
                    .current(&caller)
                    .and_then(|now| now.require_index(&catalog, &query.index))
                {
                    let _ = pages.send(Err(denied)).await;
                    return;
                }
                let next = match page {
                    Ok(scan) => {
                        let next = scan.next.clone();
                        if pages.send(Ok(page_to_wire(scan))).await.is_err() {
                            return;
                        }
                        match next {
                            Some(token) => token,
                            None => return,
                        }
                    }
                    Err(e) => {
                        let _ = pages.send(Err(status(e))).await;
                        return;
                    }
                };
                query.page = Some(next);
                page = client.scan_global_index(&catalog, &query, read).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    pub(crate) async fn serve_merge_join(
        &self,
        request: Request<pb::MergeJoinRequest>,
    ) -> Result<Response<pb::MergeJoinResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        let queries = request
            .queries
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let equal = values_from_wire(&format!("queries[{i}].equal"), q.equal)?;
                Ok(IndexQuery::new(q.index).equal(equal))
            })
            .collect::<Result<Vec<_>, Status>>()?;
        let limit = (request.limit > 0).then_some(request.limit as usize);
        let after =
            (!request.page_token.is_empty()).then(|| PageToken::from_bytes(request.page_token));
        let catalog = self.catalogs.current().await?;
        for query in &queries {
            caller.require_index(&catalog, &query.index)?;
        }
        let joined = self
            .client
            .merge_join(
                &catalog,
                &queries,
                limit,
                after.as_ref(),
                read_of(request.verify),
            )
            .await
            .map_err(status)?;
        Ok(Response::new(pb::MergeJoinResponse {
            hits: joined
                .hits
                .into_iter()
                .map(|hit| pb::merge_join_response::Hit {
                    primary_key: hit.primary_key.into_iter().map(value_to_wire).collect(),
                    entries: hit.entries.into_iter().map(index_entry_to_wire).collect(),
                })
                .collect(),
            next_page_token: page_token_to_wire(joined.next),
        }))
    }

    pub(crate) async fn serve_read_entities(
        &self,
        request: Request<pb::ReadEntitiesRequest>,
    ) -> Result<Response<pb::ReadEntitiesResponse>, Status> {
        let caller = self.access.caller(&request)?;
        let request = request.into_inner();
        caller.require(Access::Read, Target::Table(&request.table))?;
        let mode = read_mode_from_wire(request.mode)?;
        let in_flight = match request.in_flight {
            0 => LOOKUPS_IN_FLIGHT,
            n if n <= IN_FLIGHT_MAX => n as usize,
            n => {
                return Err(invalid(
                    "in_flight",
                    format!("at most {IN_FLIGHT_MAX} reads at once, not {n}"),
                ));
            }
        };
        let keys = request
            .keys
            .into_iter()
            .enumerate()
            .map(|(i, k)| values_from_wire(&format!("keys[{i}].key"), k.key))
            .collect::<Result<Vec<_>, Status>>()?;
        let catalog = self.catalogs.current().await?;
        let reads = self
            .client
            .read_entities(&catalog, mode, &request.table, &keys, in_flight)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ReadEntitiesResponse {
            entities: reads.into_iter().map(entity_read_to_wire).collect(),
        }))
    }
}
