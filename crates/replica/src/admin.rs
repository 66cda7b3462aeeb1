//! `megastore.admin.v1.Admin`, served by every replica: its groups, its lag, its public
//! API's activity (for `megastore top`), and a backup of its store while it serves. The driver thread takes a RocksDB checkpoint between two of its batches (so
//! the copy holds whole batches), into a scratch directory inside the data directory
//! (hard links on the same file system); a task then streams its files and removes it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use megastore_rpc::pb::admin as pb;
use megastore_rpc::pb::admin::admin_server::Admin;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::replica_server::Event;

/// Scratch directories of backups being streamed start with this; a start removes any
/// left over by a process that stopped mid-stream.
pub(crate) const SCRATCH_PREFIX: &str = "backup-in-progress-";

/// How many bytes of a file one chunk carries.
const CHUNK_BYTES: usize = 1 << 20;

pub(crate) struct AdminService {
    pub(crate) events: mpsc::Sender<Event>,
    /// The public API's client library (its counters and hot groups).
    pub(crate) gateway: megastore_client::Client,
    pub(crate) data_dir: PathBuf,
    pub(crate) next: AtomicU64,
    /// Who may call (`[auth]`); every backup and listing, and every refusal, is
    /// audited.
    pub(crate) operator: megastore_rpc::OperatorAuth,
    /// What a move's steps need (`admin_moves.rs`).
    pub(crate) moves: std::sync::Arc<crate::admin_moves::MoveContext>,
}

/// Removes scratch directories left by backups that did not finish.
pub(crate) fn remove_scratch(data_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    let scratch = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(SCRATCH_PREFIX));
    for entry in scratch {
        if let Err(e) = std::fs::remove_dir_all(entry.path()) {
            tracing::warn!("cannot remove {}: {e}", entry.path().display());
        }
    }
}

/// Groups one `ListGroups` answers at most.
const LIST_GROUPS_MAX: u32 = 10_000;

/// Hot groups one `Activity` answers when not told.
const HOT_GROUPS_DEFAULT: u32 = 10;

/// What the driver thread answers to the event `ask` makes (it answers between
/// batches).
pub(crate) async fn ask_driver<T>(
    events: &mpsc::Sender<Event>,
    ask: impl FnOnce(oneshot::Sender<T>) -> Event,
) -> Result<T, Status> {
    let (reply, answered) = oneshot::channel();
    events
        .send(ask(reply))
        .map_err(|_| Status::unavailable("the replica is stopping"))?;
    answered
        .await
        .map_err(|_| Status::unavailable("the replica is stopping"))
}

impl AdminService {
    async fn ask_driver<T>(
        &self,
        ask: impl FnOnce(oneshot::Sender<T>) -> Event,
    ) -> Result<T, Status> {
        ask_driver(&self.events, ask).await
    }

    async fn measure_lag(&self) -> Result<megastore_paxos::ReplicaLag, Status> {
        self.ask_driver(|reply| Event::Lag { reply }).await
    }
}

fn group_counts(counts: Vec<megastore_client::GroupCount>) -> Vec<pb::GroupCount> {
    counts
        .into_iter()
        .map(|c| pb::GroupCount {
            group: c.group.0,
            count: c.count,
            error: c.error,
        })
        .collect()
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn lag(
        &self,
        request: Request<pb::LagRequest>,
    ) -> Result<Response<pb::LagResponse>, Status> {
        self.operator.admit(&request, "Admin.Lag", false)?;
        let lag = self.measure_lag().await?;
        Ok(Response::new(pb::LagResponse {
            groups_behind: lag.groups,
            positions_behind: lag.positions,
        }))
    }

    async fn ranges(
        &self,
        request: Request<pb::RangesRequest>,
    ) -> Result<Response<pb::RangesResponse>, Status> {
        self.operator.admit(&request, "Admin.Ranges", false)?;
        let (placement_version, ranges) = self.ask_driver(|reply| Event::Ranges { reply }).await?;
        Ok(Response::new(pb::RangesResponse {
            placement_version,
            ranges: ranges
                .into_iter()
                .map(|r| pb::RangeApplied {
                    range: r.range.0,
                    applied: r.applied,
                    applied_per_second: r.per_second,
                    bytes: r.bytes,
                })
                .collect(),
        }))
    }

    async fn activity(
        &self,
        request: Request<pb::ActivityRequest>,
    ) -> Result<Response<pb::ActivityResponse>, Status> {
        self.operator.admit(&request, "Admin.Activity", false)?;
        let tracked = megastore_client::HOT_GROUPS_TRACKED as u32;
        let top = match request.into_inner().top {
            0 => HOT_GROUPS_DEFAULT,
            n if n <= tracked => n,
            n => {
                return Err(Status::invalid_argument(format!(
                    "top: at most {tracked} groups (what is tracked), not {n}"
                )));
            }
        };
        let lag = self.measure_lag().await?;
        let totals = self.gateway.metrics().totals();
        let hot = self
            .gateway
            .hot_groups(top as usize)
            .await
            .map_err(|_| Status::unavailable("the public API is stopping"))?;
        Ok(Response::new(pb::ActivityResponse {
            commits: totals.commits,
            conflicts: totals.conflicts,
            unknown_outcomes: totals.unknown_outcomes,
            reads_local: totals.reads_local,
            reads_majority: totals.reads_majority,
            reads_other: totals.reads_other,
            read_failures: totals.read_failures,
            groups_behind: lag.groups,
            positions_behind: lag.positions,
            hot_commits: group_counts(hot.commits),
            hot_conflicts: group_counts(hot.conflicts),
        }))
    }

    async fn list_groups(
        &self,
        request: Request<pb::ListGroupsRequest>,
    ) -> Result<Response<pb::ListGroupsResponse>, Status> {
        self.operator.admit(&request, "Admin.ListGroups", true)?;
        let request = request.into_inner();
        let limit = match request.limit {
            0 => 1_000,
            n if n <= LIST_GROUPS_MAX => n,
            n => {
                return Err(Status::invalid_argument(format!(
                    "limit: at most {LIST_GROUPS_MAX} groups at once, not {n}"
                )));
            }
        };
        let groups = self
            .ask_driver(|reply| Event::ListGroups {
                range: megastore_rowstore::KeyRange {
                    start: request.start,
                    end: request.end,
                },
                limit: limit as usize,
                reply,
            })
            .await?;
        Ok(Response::new(pb::ListGroupsResponse { groups }))
    }

    type BackupStream = ReceiverStream<Result<pb::BackupChunk, Status>>;

    async fn backup(
        &self,
        request: Request<pb::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        self.operator.admit(&request, "Admin.Backup", true)?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let scratch = self
            .data_dir
            .join(format!("{SCRATCH_PREFIX}{}-{n}", std::process::id()));
        let (reply, taken) = oneshot::channel();
        self.events
            .send(Event::Checkpoint {
                into: scratch.clone(),
                reply,
            })
            .map_err(|_| Status::unavailable("the replica is stopping"))?;
        taken
            .await
            .map_err(|_| Status::unavailable("the replica is stopping"))?
            .map_err(|e| Status::internal(format!("taking a checkpoint: {e}")))?;
        tracing::info!(scratch = %scratch.display(), "streaming a backup");
        let (chunks, stream) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            if let Err(e) = stream_files(&scratch, &chunks).await {
                let _ = chunks.send(Err(Status::internal(e))).await;
            }
            if let Err(e) = tokio::fs::remove_dir_all(&scratch).await {
                tracing::warn!("cannot remove {}: {e}", scratch.display());
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn export_page(
        &self,
        request: Request<pb::ExportPageRequest>,
    ) -> Result<Response<pb::ExportPageResponse>, Status> {
        self.operator.admit(&request, "Admin.ExportPage", false)?;
        let page = crate::admin_moves::export_page(&self.moves, &self.events, request.into_inner())
            .await?;
        Ok(Response::new(page))
    }

    async fn changed_groups(
        &self,
        request: Request<pb::ChangedGroupsRequest>,
    ) -> Result<Response<pb::ChangedGroupsResponse>, Status> {
        self.operator
            .admit(&request, "Admin.ChangedGroups", false)?;
        let changed =
            crate::admin_moves::changed_groups(&self.events, request.into_inner()).await?;
        Ok(Response::new(changed))
    }

    async fn freeze(
        &self,
        request: Request<pb::FreezeRequest>,
    ) -> Result<Response<pb::FreezeResponse>, Status> {
        self.operator.admit(&request, "Admin.Freeze", true)?;
        let frozen =
            crate::admin_moves::freeze(&self.moves, &self.events, request.into_inner()).await?;
        Ok(Response::new(frozen))
    }

    async fn catch_up_voters(
        &self,
        request: Request<pb::CatchUpVotersRequest>,
    ) -> Result<Response<pb::CatchUpVotersResponse>, Status> {
        self.operator.admit(&request, "Admin.CatchUpVoters", true)?;
        let found =
            crate::admin_moves::catch_up_voters(&self.moves, &self.events, request.into_inner())
                .await?;
        Ok(Response::new(found))
    }

    type CopyRangeStream = ReceiverStream<Result<pb::CopyProgress, Status>>;

    async fn copy_range(
        &self,
        request: Request<pb::CopyRangeRequest>,
    ) -> Result<Response<Self::CopyRangeStream>, Status> {
        self.operator.admit(&request, "Admin.CopyRange", true)?;
        let progress = crate::admin_moves::copy_range(
            self.moves.clone(),
            self.events.clone(),
            request.into_inner(),
        )
        .await?;
        Ok(Response::new(ReceiverStream::new(progress)))
    }
}

/// Sends every file of `dir`, in name order; stops early (without error) if the caller
/// went away.
async fn stream_files(
    dir: &Path,
    chunks: &tokio::sync::mpsc::Sender<Result<pb::BackupChunk, Status>>,
) -> Result<(), String> {
    let reading = |e: std::io::Error| format!("reading {}: {e}", dir.display());
    let mut names = Vec::new();
    let mut entries = tokio::fs::read_dir(dir).await.map_err(reading)?;
    while let Some(entry) = entries.next_entry().await.map_err(reading)? {
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let mut first = true;
        loop {
            let mut data = vec![0; CHUNK_BYTES];
            let read = file
                .read(&mut data)
                .await
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            if read == 0 && !first {
                break;
            }
            data.truncate(read);
            first = false;
            let chunk = pb::BackupChunk {
                file: name.clone(),
                data,
            };
            if chunks.send(Ok(chunk)).await.is_err() {
                return Ok(());
            }
            if read == 0 {
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_copies_left_by_a_stopped_process_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join(format!("{SCRATCH_PREFIX}12-0"));
        std::fs::create_dir(&scratch).unwrap();
        std::fs::write(scratch.join("000009.sst"), b"x").unwrap();
        std::fs::write(dir.path().join("CURRENT"), b"MANIFEST-000005\n").unwrap();
        remove_scratch(dir.path());
        assert!(!scratch.exists());
        assert!(dir.path().join("CURRENT").exists());
    }
}
