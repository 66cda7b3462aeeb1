//! The public API's transactions across groups: `CommitMulti` (handles begun on
//! different groups, committed as one by the client library's two-phase commit),
//! `ResolveMulti` and `SettlePrepared`.

use megastore_client::ClientError;
use megastore_rpc::pb::client as pb;
use megastore_rpc::public::{invalid_argument as invalid, txn_id_from_wire};
use tokio::sync::OwnedMutexGuard;
use tonic::Status;

use crate::gateway::{Gateway, commit_answer, status};
use crate::gateway_access::{Caller, Tables};
use crate::gateway_sessions::SessionState;
use megastore_access::Access;

/// Handles one `CommitMulti` may name at most.
const HANDLES_MAX: usize = 64;

impl Gateway {
    pub(crate) async fn commit_multi(
        &self,
        caller: &Caller,
        request: pb::CommitMultiRequest,
    ) -> Result<pb::CommitResponse, Status> {
        let handles = request.txns;
        if handles.is_empty() {
            return Err(invalid("txns", "name the transactions to commit together"));
        }
        if handles.len() > HANDLES_MAX {
            return Err(invalid(
                "txns",
                format!("{} handles; at most {HANDLES_MAX}", handles.len()),
            ));
        }
        let mut sorted = handles.clone();
        sorted.sort_unstable();
        if let Some(twice) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(
                "txns",
                format!("handle {} is named twice", twice[0]),
            ));
        }
        // Locked in handle order, so that two calls naming the same handles cannot
        // wait for each other.
        let mut locked: Vec<(u64, OwnedMutexGuard<SessionState>)> = Vec::new();
        for handle in sorted {
            locked.push((handle, self.sessions.locked(handle, caller).await?));
        }
        locked.sort_by_key(|(handle, _)| handles.iter().position(|h| h == handle));
        if let Some((_, guard)) = locked
            .iter()
            .find(|(_, g)| matches!(**g, SessionState::Committed(_)))
        {
            // Sent again: every handle holds the same answer.
            let SessionState::Committed(answer) = &**guard else {
                unreachable!("just matched");
            };
            return answer.clone();
        }
        // A grant revoked since a write was staged stops the commit.
        for (_, guard) in &locked {
            if let SessionState::Open(_, written) = &**guard {
                caller.require_all(Access::Write, written)?;
            }
        }
        let typed = locked.iter().any(|(_, g)| match &**g {
            SessionState::Open(txn, _) => megastore_client::group_name(txn.eg()).is_none(),
            SessionState::Committed(_) => false,
        });
        let catalog = if typed {
            self.catalogs.current().await.ok()
        } else {
            None
        };
        let client = self.client.clone();
        // Committing from here on: no longer open transactions.
        for (handle, _) in &locked {
            self.sessions.committed(*handle);
        }
        // As Commit: to its end in a task of its own, with every handle locked.
        let committing = tokio::spawn(async move {
            let unfinished = Status::unknown(
                "outcome unknown: the commit did not finish on this replica; ResolveMulti it by its id",
            );
            let mut parts = Vec::with_capacity(locked.len());
            for (_, guard) in &mut locked {
                let SessionState::Open(txn, _) = std::mem::replace(
                    &mut **guard,
                    SessionState::Committed(Err(unfinished.clone())),
                ) else {
                    unreachable!("no handle was committed");
                };
                parts.push(*txn);
            }
            let groups: Vec<_> = parts.iter().map(|t| t.eg().clone()).collect();
            let id = parts[0].id();
            let answer = match client.multi_of(parts) {
                Ok(multi) => match multi.commit().await {
                    Err(ClientError::Unknown { txn, .. }) => Err(Status::unknown(format!(
                        "outcome unknown: cross-group transaction {txn} is not decided yet; ResolveMulti it by its id (client {}, seq {}) and its coordinator group {}",
                        txn.client.0, txn.seq, groups[0]
                    ))),
                    result => commit_answer(result, id, &groups[0], catalog.as_deref()),
                },
                Err(e) => Err(status(e)),
            };
            for (_, guard) in &mut locked {
                **guard = SessionState::Committed(answer.clone());
            }
            answer
        });
        committing.await.map_err(|e| {
            Status::unknown(format!(
                "outcome unknown: the commit failed ({e}); ResolveMulti it by its id"
            ))
        })?
    }

    pub(crate) async fn resolve_multi(
        &self,
        caller: &Caller,
        request: pb::ResolveRequest,
    ) -> Result<pb::ResolveResponse, Status> {
        use pb::resolve_response::{Committed, NotCommitted, Outcome as Wire, Unknown};
        let coordinator = self.named_group_pub(request.eg, request.root).await?;
        self.require_group(caller, Access::Read, &coordinator, Tables::Any)
            .await?;
        let (txn, _) = txn_id_from_wire("id", request.id)?;
        let outcome = match self.client.resolve_multi(&coordinator, txn).await {
            Ok(Some(true)) => Wire::Committed(Committed { position: 0 }),
            Ok(Some(false)) => Wire::NotCommitted(NotCommitted {}),
            Ok(None) => Wire::Unknown(Unknown {
                reason: format!(
                    "{txn} has no decision: not decided yet (it is aborted once it has been prepared longer than the prepared timeout and someone meets it), or, past the decision retention, decided and collected"
                ),
            }),
            Err(e) => Wire::Unknown(Unknown {
                reason: e.to_string(),
            }),
        };
        Ok(pb::ResolveResponse {
            outcome: Some(outcome),
        })
    }

    pub(crate) async fn settle_prepared(
        &self,
        caller: &Caller,
        request: pb::SettlePreparedRequest,
    ) -> Result<pb::SettlePreparedResponse, Status> {
        let eg = self.named_group_pub(request.eg, request.root).await?;
        // Deciding other clients' transactions on the group's rows.
        self.require_group(caller, Access::Admin, &eg, Tables::Every)
            .await?;
        let settled = self.client.settle_prepared(&eg).await.map_err(status)?;
        Ok(pb::SettlePreparedResponse {
            committed: settled.committed,
            aborted: settled.aborted,
            undecided: settled.undecided,
            failed: settled.failed,
        })
    }
}
