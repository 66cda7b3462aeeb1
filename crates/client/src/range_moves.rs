//! Moving a range's slot to another server of its site (`megastore range move`): the
//! operator's side, carried out over the network. Every decision is the placement
//! core's [`next_step`], from the placement lockd holds and what this operator did
//! since it started; this module only carries each step out — a compare-and-set of
//! the placement, `Admin.CopyRange` at the target, `Admin.Freeze` at the source,
//! `Coordinator.KnowsMove` at the source's coordinator — and repeats a step whose
//! server did not answer. An operator that stops (Ctrl-C, a crash) leaves the move
//! under way in lockd; running the same move again resumes it, and giving it up
//! ([`MoveOptions::give_up`]) rolls it back.

use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_placement::{
    FinalCopyRefused, MoveEnd, MoveRequest, OperatorBugs, OperatorStep, Progress, ServerId,
    next_step,
};
use megastore_rpc::pb::admin as admin_pb;
use megastore_rpc::pb::admin::admin_client::AdminClient;
use megastore_rpc::pb::coordinator as coordinator_pb;
use megastore_rpc::pb::coordinator::coordinator_client::CoordinatorClient;
use megastore_rpc::{LockdClient, Transport, with_operator_token};
use megastore_types::Topology;
use tonic::transport::Channel;

use crate::ClientError;
use crate::placement_store::{change_placement, load_placement};

/// How a move is carried out.
#[derive(Debug, Clone)]
pub struct MoveOptions {
    /// Give the move up (roll it back) instead of carrying it on.
    pub give_up: bool,
    /// How long a step may keep failing (its server down, say) before the move is
    /// given up.
    pub patience: Duration,
}

impl Default for MoveOptions {
    fn default() -> Self {
        Self {
            give_up: false,
            patience: Duration::from_secs(120),
        }
    }
}

/// What the operator is doing, for a progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveUpdate {
    /// It stored a new placement (the move begun, recorded frozen, finished or given
    /// up), now at this version.
    Stored(u64),
    /// A copy into the target went on: `pages` and `rows` so far; `last`: the final
    /// copy.
    Copying {
        /// The final copy.
        last: bool,
        /// Pages applied so far.
        pages: u64,
        /// Rows applied so far.
        rows: u64,
        /// This copy is complete (its last page).
        done: bool,
        /// A final copy of only the groups the source changed since the bulk copy:
        /// how many (`None`: a copy of the whole range).
        changed_groups: Option<u64>,
    },
    /// The source froze the range.
    Frozen,
    /// The source's coordinator has read the move.
    Fenced,
    /// A step failed and will be tried again.
    Retrying(String),
}

/// Carries out (or gives up) `request` to its end.
pub async fn carry_out_move(
    config: &ClusterConfig,
    request: &MoveRequest,
    options: &MoveOptions,
    mut report: impl FnMut(MoveUpdate),
) -> Result<MoveEnd, ClientError> {
    let operator = Operator::new(config)?;
    let mut progress = Progress {
        giving_up: options.give_up,
        ..Progress::default()
    };
    let mut failing_since: Option<Instant> = None;
    loop {
        let stored = load_placement(&operator.lockd, &operator.topology).await?;
        let step = next_step(
            &stored.placement,
            request,
            &mut progress,
            OperatorBugs::NONE,
        );
        let done = match step {
            OperatorStep::Done(end) => return Ok(end),
            OperatorStep::Write { expected, next } => {
                let stored = change_placement(&operator.lockd, &operator.topology, |current| {
                    // Only over the placement the step was decided on; otherwise the
                    // next read decides again.
                    Ok(if current.version() == expected {
                        next.clone()
                    } else {
                        current.clone()
                    })
                })
                .await?;
                if stored == next {
                    report(MoveUpdate::Stored(stored.version().0));
                }
                Ok(())
            }
            OperatorStep::Copy {
                to,
                range,
                move_id,
                last,
                ..
            } => {
                let request = admin_pb::CopyRangeRequest {
                    range: range.0,
                    move_id: move_id.0,
                    r#final: last,
                };
                match operator.copy(to, request, last, &mut report).await {
                    Ok(()) => {
                        progress.copied(last);
                        Ok(())
                    }
                    Err(Failed::Refused(why)) => {
                        progress.final_copy_refused(why);
                        Err(why.to_string())
                    }
                    Err(Failed::Again(why)) => Err(why),
                }
            }
            OperatorStep::Freeze {
                server,
                range,
                move_id,
            } => {
                let request = admin_pb::FreezeRequest {
                    range: range.0,
                    move_id: move_id.0,
                };
                match operator.freeze(server, request).await {
                    Ok(true) => {
                        progress.froze = true;
                        report(MoveUpdate::Frozen);
                        Ok(())
                    }
                    Ok(false) => Err(format!("server {} did not freeze {range}", server.0)),
                    Err(why) => Err(why),
                }
            }
            OperatorStep::Fence { server, move_id } => {
                match operator.knows_move(server, move_id.0).await {
                    Ok(true) => {
                        progress.fenced = true;
                        report(MoveUpdate::Fenced);
                        Ok(())
                    }
                    Ok(false) => Err(format!(
                        "the coordinator of server {} has not read move {move_id}",
                        server.0
                    )),
                    Err(why) => Err(why),
                }
            }
        };
        match done {
            Ok(()) => failing_since = None,
            Err(why) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > options.patience && !progress.giving_up {
                    report(MoveUpdate::Retrying(format!(
                        "{why}; failing for {:?}: giving the move up",
                        options.patience
                    )));
                    progress.giving_up = true;
                } else {
                    report(MoveUpdate::Retrying(why));
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// The pause before a failed step is tried again.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Why a copy did not finish.
enum Failed {
    /// The source refused the final copy: the operator core decides what next.
    Refused(FinalCopyRefused),
    /// Anything else: the step is tried again.
    Again(String),
}

/// Connections to the servers a move (or a voter catch-up) touches.
pub(crate) struct Operator {
    config: ClusterConfig,
    pub(crate) lockd: LockdClient,
    pub(crate) topology: Topology,
    transport: Transport,
    pub(crate) token: Option<String>,
}

impl Operator {
    pub(crate) fn new(config: &ClusterConfig) -> Result<Self, ClientError> {
        Ok(Self {
            config: config.clone(),
            lockd: LockdClient::new(config).map_err(ClientError::Config)?,
            topology: config
                .topology()
                .map_err(|e| ClientError::Config(e.to_string()))?,
            transport: Transport::from_config(config)
                .map_err(|e| ClientError::Config(e.to_string()))?,
            token: config
                .operator_token()
                .map_err(|e| ClientError::Config(e.to_string()))?,
        })
    }

    /// A channel to server `server`'s admin service (`coordinator`: its coordinator's).
    fn channel(&self, server: ServerId, coordinator: bool) -> Result<Channel, String> {
        let process = self
            .config
            .server_processes()
            .into_iter()
            .find(|p| p.server == server.0)
            .ok_or_else(|| format!("server {} is not in the config", server.0))?
            .process;
        let address = if coordinator {
            process
                .coordinator_address
                .clone()
                .ok_or_else(|| format!("server {} has no coordinator", server.0))?
        } else {
            process.admin_endpoint().to_string()
        };
        self.transport
            .channel(&address, self.config.timeouts.rpc())
            .map_err(|e| e.to_string())
    }

    pub(crate) fn admin(&self, server: ServerId) -> Result<AdminClient<Channel>, String> {
        Ok(AdminClient::new(self.channel(server, false)?))
    }

    /// A short call's deadline.
    fn deadline(&self) -> Duration {
        self.config.timeouts.rpc() * 4
    }

    async fn copy(
        &self,
        to: ServerId,
        request: admin_pb::CopyRangeRequest,
        last: bool,
        report: &mut impl FnMut(MoveUpdate),
    ) -> Result<(), Failed> {
        let mut admin = self.admin(to).map_err(Failed::Again)?;
        let call = admin.copy_range(with_operator_token(request, self.token.as_deref()));
        let mut stream = tokio::time::timeout(self.deadline(), call)
            .await
            .map_err(|_| Failed::Again(format!("server {} did not answer", to.0)))?
            .map_err(|status| refused_or_again(to, &status))?
            .into_inner();
        loop {
            // Each page is a short call at the target; a silent stream is a lost one.
            let next = tokio::time::timeout(self.deadline(), stream.message())
                .await
                .map_err(|_| Failed::Again(format!("the copy at server {} stalled", to.0)))?
                .map_err(|status| refused_or_again(to, &status))?;
            let Some(page) = next else {
                return Err(Failed::Again(format!(
                    "the copy at server {} ended unfinished",
                    to.0
                )));
            };
            report(MoveUpdate::Copying {
                last,
                pages: page.pages,
                rows: page.rows,
                done: page.done,
                changed_groups: page.changed_groups,
            });
            if page.done {
                return Ok(());
            }
        }
    }

    async fn freeze(
        &self,
        server: ServerId,
        request: admin_pb::FreezeRequest,
    ) -> Result<bool, String> {
        let mut admin = self.admin(server)?;
        let call = admin.freeze(with_operator_token(request, self.token.as_deref()));
        let answer = tokio::time::timeout(self.deadline(), call)
            .await
            .map_err(|_| format!("server {} did not answer the freeze", server.0))?
            .map_err(|status| format!("server {}: {}", server.0, status.message()))?;
        Ok(answer.into_inner().frozen)
    }

    pub(crate) async fn knows_move(&self, server: ServerId, move_id: u64) -> Result<bool, String> {
        let mut coordinator = CoordinatorClient::new(self.channel(server, true)?);
        let call = coordinator.knows_move(coordinator_pb::KnowsMoveRequest { move_id });
        let answer = tokio::time::timeout(self.deadline(), call)
            .await
            .map_err(|_| format!("the coordinator of server {} did not answer", server.0))?
            .map_err(|status| {
                format!(
                    "the coordinator of server {}: {}",
                    server.0,
                    status.message()
                )
            })?;
        Ok(answer.into_inner().knows)
    }
}

/// A copy's error: the source's refusal of the final copy (its reason in the status's
/// details, as the target passes them on), or a failure to try again.
fn refused_or_again(to: ServerId, status: &tonic::Status) -> Failed {
    match megastore_rpc::final_copy_refusal(status) {
        Some(why) => Failed::Refused(why),
        None => Failed::Again(format!("the copy at server {}: {}", to.0, status.message())),
    }
}
