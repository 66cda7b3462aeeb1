//! Catching up a range's voter change (`megastore range catch-up`, docs/protocol.md,
//! "Voter changes"): the operator's side, carried out over the network. For each
//! range whose voters changed and are not caught up yet, every voter of the range runs
//! the replica core's catch-up pass (`Admin.CatchUpVoters`, at once at every voter);
//! when every one found every group held by a majority of the voters, the change is
//! recorded caught up in the placement (`Placement::record_caught_up`), and the range
//! may take its next voter change. Nothing here decides what is held: the passes do.

use std::time::Duration;

use megastore_config::ClusterConfig;
use megastore_placement::{RangeId, ServerId, Version};
use megastore_rpc::pb::admin as admin_pb;
use megastore_rpc::with_operator_token;

use crate::ClientError;
use crate::placement_store::{change_placement, load_placement};
use crate::range_moves::Operator;

/// How long one voter's pass may take before the operator stops waiting for it (it
/// goes on at the server; running the command again joins it).
pub const PASS_PATIENCE: Duration = Duration::from_secs(600);

/// What one voter's pass found: groups held by a majority of the voters, groups not
/// held after every try, and the first few of those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassFound {
    /// Groups held.
    pub held: u64,
    /// Groups not held.
    pub not_held: u64,
    /// The first few groups not held.
    pub named: Vec<Vec<u8>>,
}

/// One range's catch-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeCatchUp {
    /// The range.
    pub range: RangeId,
    /// Its voter change (`None`: it had none waiting; nothing was done).
    pub changed_at: Option<Version>,
    /// Each voter's server and its pass (or why it did not run or answer).
    pub passes: Vec<(ServerId, Result<PassFound, String>)>,
    /// The placement version that recorded the change caught up, if it was.
    pub recorded: Option<Version>,
}

/// Catches up the voter changes of `ranges` (every range with one waiting, if empty),
/// one range after another; `progress` hears each pass as it ends.
pub async fn catch_up_voters(
    config: &ClusterConfig,
    ranges: &[RangeId],
    mut progress: impl FnMut(RangeId, ServerId, &Result<PassFound, String>),
) -> Result<Vec<RangeCatchUp>, ClientError> {
    let operator = Operator::new(config)?;
    let stored = load_placement(&operator.lockd, &operator.topology).await?;
    let named: Vec<RangeId> = if ranges.is_empty() {
        stored
            .placement
            .ranges()
            .iter()
            .filter(|r| r.voters_changed.is_some())
            .map(|r| r.id)
            .collect()
    } else {
        ranges.to_vec()
    };
    let mut done = Vec::new();
    for id in named {
        if stored.placement.range(id).is_none() {
            return Err(ClientError::InvalidArgument(format!("there is no {id}")));
        }
        let Some((changed_at, voters)) = stored.placement.catch_up_needs(id) else {
            done.push(RangeCatchUp {
                range: id,
                changed_at: None,
                passes: Vec::new(),
                recorded: None,
            });
            continue;
        };
        let asks = voters
            .iter()
            .map(|server| pass_at(&operator, *server, id, changed_at));
        let answers = futures::future::join_all(asks).await;
        let passes: Vec<(ServerId, Result<PassFound, String>)> =
            voters.into_iter().zip(answers).collect();
        for (server, outcome) in &passes {
            progress(id, *server, outcome);
        }
        let all_held = passes
            .iter()
            .all(|(_, outcome)| outcome.as_ref().is_ok_and(|f| f.not_held == 0));
        let recorded = if all_held {
            let placement = change_placement(&operator.lockd, &operator.topology, |p| {
                p.record_caught_up(id, changed_at)
            })
            .await?;
            Some(placement.version())
        } else {
            None
        };
        done.push(RangeCatchUp {
            range: id,
            changed_at: Some(changed_at),
            passes,
            recorded,
        });
    }
    Ok(done)
}

/// One voter's pass, answered or why not.
async fn pass_at(
    operator: &Operator,
    server: ServerId,
    range: RangeId,
    changed_at: Version,
) -> Result<PassFound, String> {
    let mut admin = operator.admin(server)?;
    let request = admin_pb::CatchUpVotersRequest {
        range: range.0,
        changed_at: changed_at.0,
    };
    let call = admin.catch_up_voters(with_operator_token(request, operator.token.as_deref()));
    let answer = tokio::time::timeout(PASS_PATIENCE, call)
        .await
        .map_err(|_| format!("no answer within {}s", PASS_PATIENCE.as_secs()))?
        .map_err(|status| status.message().to_string())?
        .into_inner();
    Ok(PassFound {
        held: answer.held,
        not_held: answer.not_held,
        named: answer.named,
    })
}
