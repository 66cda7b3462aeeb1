//! `Admin.ExportPage`, `Admin.ChangedGroups`, `Admin.Freeze` and `Admin.CopyRange`: a
//! move's steps at a
//! replica server, as the operator (`megastore range move`) asks for them. Each reads
//! the newest placement from lockd first, so a server whose poll has not caught up
//! with the move still takes part; the cores decide the rest (`moves_driver.rs`).

use std::sync::Arc;

use megastore_client::placement_store::load_placement;
use megastore_config::ClusterConfig;
use megastore_paxos::{ChangeToken, RangeCopy};
use megastore_placement::{Placement, RangeId, Version};
use megastore_rowstore::KeyRange;
use megastore_rpc::pb::admin as pb;
use megastore_rpc::pb::admin::admin_client::AdminClient;
use megastore_rpc::{LockdClient, Transport, exported_pages_from_wire, with_operator_token};
use megastore_types::limits::MESSAGE_BYTES_MAX;
use megastore_types::{EgId, Topology};
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
    let first = KeyRange {
        start: request.start,
        end: request.end,
    };
    let following = request.following.into_iter().map(|span| KeyRange {
        start: span.start,
        end: span.end,
    });
    let spans: Vec<KeyRange> = std::iter::once(first).chain(following).collect();
    let exported = || {
        ask(events, |reply| {
            Event::Move(MoveEvent::Export {
                range,
                move_id,
                last,
                spans: spans.clone(),
                rows,
                reply,
            })
        })
    };
    let mut pages = exported().await?;
    // A bulk page may be asked for before this server's poll read the move: read the
    // placement and ask once more. (The final copy is of the frozen source, which
    // read the move before it froze.)
    if pages.is_err() && !last {
        context.newest_placement(events).await?;
        pages = exported().await?;
    }
    let (pages, token) = pages.map_err(|refused| match refused {
        ExportRefused::FinalCopy(why) => megastore_rpc::final_copy_refused_status(why),
        ExportRefused::Other(why) => Status::failed_precondition(why),
    })?;
    Ok(megastore_rpc::exported_pages_to_wire(
        pages,
        token.map(|t| t.0),
    ))
}

/// `Admin.ChangedGroups` at a move's source.
pub(crate) async fn changed_groups(
    events: &std::sync::mpsc::Sender<Event>,
    request: pb::ChangedGroupsRequest,
) -> Result<pb::ChangedGroupsResponse, Status> {
    let (range, move_id, token) = (
        RangeId(request.range),
        Version(request.move_id),
        ChangeToken(request.token),
    );
    let changed = ask(events, |reply| {
        Event::Move(MoveEvent::Changed {
            range,
            move_id,
            token,
            reply,
        })
    })
    .await?
    .map_err(megastore_rpc::final_copy_refused_status)?;
    Ok(pb::ChangedGroupsResponse {
        known: changed.is_some(),
        groups: changed
            .unwrap_or_default()
            .into_iter()
            .map(|eg| eg.0)
            .collect(),
    })
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

/// Rows a copy asks its source for in one answer, over as many spans as they take.
const ROWS_PER_ANSWER: u32 = 256;
/// Spans a copy names in one request to its source.
const SPANS_PER_ANSWER: usize = 256;

/// `Admin.CopyRange` at a move's target: checks the move is to this server, then
/// carries the copy out on a task of its own — for a final copy on a clean base, of
/// only the groups the source changed since (`Admin.ChangedGroups`) — sending
/// progress after each answer of the source; an error ends the stream.
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
    let config = &context.config;
    let channel = Transport::from_config(config)
        .and_then(|t| t.channel(&address, config.timeouts.rpc()))
        .map_err(|e| Status::internal(e.to_string()))?;
    let admin = AdminClient::new(channel)
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX);
    let token = config
        .operator_token()
        .map_err(|e| Status::internal(e.to_string()))?;
    let copy = Copy {
        events,
        admin,
        token,
        source: address,
        deadline: config.timeouts.rpc() * 4,
        range,
        move_id,
        last,
    };
    let changed = if last {
        copy.changed_groups().await?
    } else {
        None
    };
    let changed_groups = changed.as_ref().map(|c| c.len() as u64);
    let began = ask(&copy.events, |reply| {
        Event::Move(MoveEvent::BeginCopy {
            range,
            move_id,
            last,
            changed,
            reply,
        })
    })
    .await?
    .map_err(Status::failed_precondition)?;
    let (progress, stream) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        if let Err(status) = copy.run(began, changed_groups, &progress).await {
            let _ = progress.send(Err(status)).await;
        }
    });
    Ok(stream)
}

/// One copy under way at its target.
struct Copy {
    events: std::sync::mpsc::Sender<Event>,
    admin: AdminClient<tonic::transport::Channel>,
    /// The operator's token, for the source.
    token: Option<String>,
    /// The source's admin address.
    source: String,
    deadline: std::time::Duration,
    range: RangeId,
    move_id: Version,
    last: bool,
}

impl Copy {
    /// For a final copy: the groups the source changed since this target's base, if
    /// it holds a clean one and the source still tracks its token (else `None`: the
    /// whole range is copied). A refusal of the final copy is passed on.
    async fn changed_groups(&self) -> Result<Option<Vec<EgId>>, Status> {
        let (range, move_id) = (self.range, self.move_id);
        let base = ask(&self.events, |reply| {
            Event::Move(MoveEvent::Base {
                range,
                move_id,
                reply,
            })
        })
        .await?;
        let Some(base) = base else {
            return Ok(None);
        };
        let request = pb::ChangedGroupsRequest {
            range: range.0,
            move_id: move_id.0,
            token: base.0,
        };
        // A clone (a handle to the same channel): the call borrows it, not `self`.
        let mut admin = self.admin.clone();
        let call = admin.changed_groups(with_operator_token(request, self.token.as_deref()));
        let answer = self.answered(call).await?;
        Ok(answer
            .known
            .then(|| answer.groups.into_iter().map(EgId).collect()))
    }

    /// The answer of a call to the source, within the deadline; a refusal is passed
    /// on with its details (a final copy's refusal names its reason there, for the
    /// operator).
    async fn answered<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<T, Status> {
        let source = &self.source;
        Ok(tokio::time::timeout(self.deadline, call)
            .await
            .map_err(|_| Status::unavailable(format!("the source at {source} did not answer")))?
            .map_err(|status| {
                Status::with_details(
                    status.code(),
                    format!("the source at {source}: {}", status.message()),
                    status.details().to_vec().into(),
                )
            })?
            .into_inner())
    }

    async fn run(
        self,
        mut copy: RangeCopy,
        changed_groups: Option<u64>,
        progress: &tokio::sync::mpsc::Sender<Result<pb::CopyProgress, Status>>,
    ) -> Result<(), Status> {
        let (mut pages, mut rows) = (0u64, 0u64);
        let mut answers = 0;
        loop {
            let mut spans = copy.next_spans(SPANS_PER_ANSWER).map(|span| pb::KeySpan {
                start: span.start.clone(),
                end: span.end.clone(),
            });
            // None left: the copy is done.
            let Some(first) = spans.next() else {
                break;
            };
            let request = pb::ExportPageRequest {
                range: self.range.0,
                move_id: self.move_id.0,
                start: first.start,
                end: first.end,
                rows: ROWS_PER_ANSWER,
                r#final: self.last,
                following: spans.collect(),
            };
            let mut admin = self.admin.clone();
            let call = admin.export_page(with_operator_token(request, self.token.as_deref()));
            let answer = self.answered(call).await?;
            let (exported, token) = exported_pages_from_wire(answer)
                .map_err(|e| Status::internal(format!("the source at {} sent {e}", self.source)))?;
            pages += exported.len() as u64;
            rows += exported.iter().map(|p| p.rows.len() as u64).sum::<u64>();
            copy = *ask(&self.events, |reply| {
                Event::Move(MoveEvent::ApplyPages {
                    copy: Box::new(copy),
                    pages: exported,
                    token: token.map(ChangeToken),
                    reply,
                })
            })
            .await?
            .map_err(Status::failed_precondition)?;
            answers += 1;
            let sent = progress
                .send(Ok(pb::CopyProgress {
                    pages,
                    rows,
                    done: copy.is_done(),
                    changed_groups,
                }))
                .await;
            if sent.is_err() {
                // The caller went away: the operator begins the copy again.
                return Ok(());
            }
        }
        if answers == 0 {
            let _ = progress
                .send(Ok(pb::CopyProgress {
                    pages,
                    rows,
                    done: true,
                    changed_groups,
                }))
                .await;
        }
        Ok(())
    }
}
