//! `Admin.ExportPage`, `Admin.Freeze` and `Admin.CopyRange`: a move's steps at a
//! replica server, as the operator (`megastore range move`) asks for them. Each reads
//! the newest placement from lockd first, so a server whose poll has not caught up
//! with the move still takes part; the cores decide the rest (`moves_driver.rs`).

use std::sync::Arc;

use megastore_client::placement_store::load_placement;
use megastore_config::ClusterConfig;
use megastore_paxos::RangeCopy;
use megastore_placement::{Placement, RangeId, Version};
use megastore_rowstore::KeyRange;
use megastore_rpc::pb::admin as pb;
use megastore_rpc::pb::admin::admin_client::AdminClient;
use megastore_rpc::{LockdClient, Transport, exported_page_from_wire, with_operator_token};
use megastore_types::Topology;
use megastore_types::limits::MESSAGE_BYTES_MAX;
use tonic::Status;

use crate::admin::ask_driver as ask;
use crate::moves_driver::{ExportRefused, MoveEvent, PAGE_ROWS_DEFAULT, PAGE_ROWS_MAX};
use crate::replica_server::Event;

/// What a server needs to take part in moves: the cluster (to reach a move's source)
/// and lockd (to read the newest placement).
pub(crate) struct MoveContext {
    pub(crate) config: Arc<ClusterConfig>,
    pub(crate) lockd: LockdClient,
    pub(crate) topology: Topology,
}

impl MoveContext {
    /// The placement lockd holds now, handed to the core too (which ignores it if it
    /// has a newer one).
    async fn newest_placement(
        &self,
        events: &std::sync::mpsc::Sender<Event>,
    ) -> Result<Placement, Status> {
        let stored = load_placement(&self.lockd, &self.topology)
            .await
            .map_err(|e| Status::unavailable(format!("reading the placement: {e}")))?;
        events
            .send(Event::Placement(stored.placement.clone()))
            .map_err(|_| Status::unavailable("the replica is stopping"))?;
        Ok(stored.placement)
    }
}

/// `Admin.ExportPage` at a move's source.
pub(crate) async fn export_page(
    context: &MoveContext,
    events: &std::sync::mpsc::Sender<Event>,
    request: pb::ExportPageRequest,
) -> Result<pb::ExportPageResponse, Status> {
    let rows = match request.rows as usize {
        0 => PAGE_ROWS_DEFAULT,
        n if n <= PAGE_ROWS_MAX => n,
        n => {
            return Err(Status::invalid_argument(format!(
                "rows: at most {PAGE_ROWS_MAX} rows a page, not {n}"
            )));
        }
    };
    let (range, move_id, last) = (
        RangeId(request.range),
        Version(request.move_id),
        request.r#final,
    );
    let span = KeyRange {
        start: request.start,
        end: request.end,
    };
    let exported = || {
        ask(events, |reply| {
            Event::Move(MoveEvent::Export {
                range,
                move_id,
                last,
                span: span.clone(),
                rows,
                reply,
            })
        })
    };
    let mut page = exported().await?;
    // A bulk page may be asked for before this server's poll read the move: read the
    // placement and ask once more. (The final copy is of the frozen source, which
    // read the move before it froze.)
    if page.is_err() && !last {
        context.newest_placement(events).await?;
        page = exported().await?;
    }
    let page = page.map_err(|refused| match refused {
        ExportRefused::FinalCopy(why) => megastore_rpc::final_copy_refused_status(why),
        ExportRefused::Other(why) => Status::failed_precondition(why),
    })?;
    Ok(megastore_rpc::exported_page_to_wire(page))
}

/// `Admin.Freeze` at a move's source.
pub(crate) async fn freeze(
    context: &MoveContext,
    events: &std::sync::mpsc::Sender<Event>,
    request: pb::FreezeRequest,
) -> Result<pb::FreezeResponse, Status> {
    context.newest_placement(events).await?;
    let (range, move_id) = (RangeId(request.range), Version(request.move_id));
    let frozen = ask(events, |reply| Event::Freeze {
        range,
        move_id,
        reply,
    })
    .await?;
    Ok(pb::FreezeResponse { frozen })
}

/// `Admin.CatchUpVoters` at a voter of the range: reads the newest placement, then
/// runs the replica core's pass (or joins the one running for the same change) and
/// answers when it ends.
pub(crate) async fn catch_up_voters(
    context: &MoveContext,
    events: &std::sync::mpsc::Sender<Event>,
    request: pb::CatchUpVotersRequest,
) -> Result<pb::CatchUpVotersResponse, Status> {
    context.newest_placement(events).await?;
    let (range, changed_at) = (RangeId(request.range), Version(request.changed_at));
    let found = ask(events, |reply| Event::CatchUpVoters {
        range,
        changed_at,
        reply,
    })
    .await?
    .map_err(|why| Status::failed_precondition(why.to_string()))?;
    Ok(pb::CatchUpVotersResponse {
        held: found.held,
        not_held: found.not_held,
        named: found.named.into_iter().map(|eg| eg.0).collect(),
    })
}

/// `Admin.CopyRange` at a move's target: checks the move is to this server and
/// begins the copy, then carries it out page by page on a task of its own, sending
/// progress after each page; an error ends the stream.
pub(crate) async fn copy_range(
    context: Arc<MoveContext>,
    events: std::sync::mpsc::Sender<Event>,
    request: pb::CopyRangeRequest,
) -> Result<tokio::sync::mpsc::Receiver<Result<pb::CopyProgress, Status>>, Status> {
    let (range, move_id, last) = (
        RangeId(request.range),
        Version(request.move_id),
        request.r#final,
    );
    let placement = context.newest_placement(&events).await?;
    let source = placement
        .range(range)
        .and_then(|r| r.moving.as_ref())
        .filter(|m| m.id == move_id)
        .map(|m| m.from)
        .ok_or_else(|| {
            Status::failed_precondition(format!("{range} has no move {move_id} under way"))
        })?;
    let address = context
        .config
        .server_processes()
        .into_iter()
        .find(|p| p.server == source.0)
        .map(|p| p.process.admin_endpoint().to_string())
        .ok_or_else(|| {
            Status::failed_precondition(format!(
                "the move's source, server {}, is not in this server's config",
                source.0
            ))
        })?;
    let copy = ask(&events, |reply| {
        Event::Move(MoveEvent::BeginCopy {
            range,
            move_id,
            reply,
        })
    })
    .await?
    .map_err(Status::failed_precondition)?;
    let (progress, stream) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let copied = Copy {
            context: &context,
            events: &events,
            range,
            move_id,
            last,
        }
        .run(&address, copy, &progress)
        .await;
        if let Err(status) = copied {
            let _ = progress.send(Err(status)).await;
        }
    });
    Ok(stream)
}

/// One copy under way at its target.
struct Copy<'a> {
    context: &'a MoveContext,
    events: &'a std::sync::mpsc::Sender<Event>,
    range: RangeId,
    move_id: Version,
    last: bool,
}

impl Copy<'_> {
    async fn run(
        &self,
        source: &str,
        mut copy: RangeCopy,
        progress: &tokio::sync::mpsc::Sender<Result<pb::CopyProgress, Status>>,
    ) -> Result<(), Status> {
        let config = &self.context.config;
        let channel = Transport::from_config(config)
            .and_then(|t| t.channel(source, config.timeouts.rpc()))
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut admin = AdminClient::new(channel)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX);
        let token = config
            .operator_token()
            .map_err(|e| Status::internal(e.to_string()))?;
        let (mut pages, mut rows) = (0u64, 0u64);
        while let Some(span) = copy.next_span() {
            let request = pb::ExportPageRequest {
                range: self.range.0,
                move_id: self.move_id.0,
                start: span.start.clone(),
                end: span.end.clone(),
                rows: 0,
                r#final: self.last,
            };
            let call = admin.export_page(with_operator_token(request, token.as_deref()));
            let page = tokio::time::timeout(config.timeouts.rpc() * 4, call)
                .await
                .map_err(|_| Status::unavailable(format!("the source at {source} did not answer")))?
                // Passed on with its details: a final copy's refusal names its
                // reason there, for the operator.
                .map_err(|status| {
                    Status::with_details(
                        status.code(),
                        format!("the source at {source}: {}", status.message()),
                        status.details().to_vec().into(),
                    )
                })?
                .into_inner();
            let page = exported_page_from_wire(page)
                .map_err(|e| Status::internal(format!("the source at {source} sent {e}")))?;
            rows += page.rows.len() as u64;
            let (range, move_id) = (self.range, self.move_id);
            copy = *ask(self.events, |reply| {
                Event::Move(MoveEvent::ApplyPage {
                    range,
                    move_id,
                    copy: Box::new(copy),
                    page,
                    reply,
                })
            })
            .await?
            .map_err(Status::failed_precondition)?;
            pages += 1;
            let sent = progress
                .send(Ok(pb::CopyProgress {
                    pages,
                    rows,
                    done: copy.is_done(),
                }))
                .await;
            if sent.is_err() {
                // The caller went away: the operator begins the copy again.
                return Ok(());
            }
        }
        if pages == 0 {
            let _ = progress
                .send(Ok(pb::CopyProgress {
                    pages,
                    rows,
                    done: true,
                }))
                .await;
        }
        Ok(())
    }
}
