//! Relayed commits (docs/protocol.md, "Relayed commits"): while this client lately
//! lost races for a group, its commits to the group go to its site's full replica,
//! whose own shared client commits them in its lane with every other client's — one
//! log entry for many, instead of a duel per position. The core decides when
//! ([`megastore_paxos::ClientCore::relay_for`]); this carries it out, and serves the
//! relay's side ([`Client::commit_for_relay`]).

use megastore_paxos::{CommitResult, RelayedCommit, Resolution};
use megastore_types::{EgId, ReplicaId};
use tokio::sync::oneshot;

use crate::client::{Client, ClientError, Event};

impl Client {
    /// The replica to relay a commit to `eg` through now, if any.
    pub(crate) async fn relay_route(&self, eg: &EgId) -> Result<Option<ReplicaId>, ClientError> {
        let (done, route) = oneshot::channel();
        self.send(Event::RelayFor {
            eg: eg.clone(),
            done,
        })?;
        route.await.map_err(|_| ClientError::Closed)
    }

    /// Relays `commit` to replica `relay`: its outcome, or `None` when the relay did
    /// not answer (then it may still be committed anywhere in its commit span).
    pub(crate) async fn relay_commit(
        &self,
        relay: ReplicaId,
        commit: RelayedCommit,
    ) -> Option<CommitResult> {
        let eg = commit.eg.clone();
        let started = std::time::Instant::now();
        // The relay may wait for its lane, then commit, then resolve an unknown outcome.
        let timeout = self.timeouts().resolve_patience + self.timeouts().rpc * 2;
        let result = self.peers().relay(relay, commit, timeout).await;
        // A closed driver changes nothing here: the caller learns it at its next call.
        let _ = self.send(Event::RelayEnded {
            eg,
            relay,
            result: result.clone(),
            started,
        });
        result
    }

    /// The relay's side: commits another client's transaction in this client's lane
    /// for its group, under the writer's id, and answers its outcome. One that ended
    /// unknown is resolved at its position first; `Aborted` means it was settled
    /// without the transaction (not committed, for good).
    pub async fn commit_for_relay(
        &self,
        commit: RelayedCommit,
    ) -> Result<CommitResult, ClientError> {
        let (done, result) = oneshot::channel();
        let RelayedCommit {
            txn,
            eg,
            read_position,
            leader,
            writes,
            reads,
        } = commit;
        self.send(Event::Commit {
            txn,
            eg: eg.clone(),
            read_position,
            leader,
            writes,
            reads,
            relayed: true,
            done,
        })?;
        self.metrics().relayed("served");
        let committed = result.await.map_err(|_| ClientError::Closed)?;
        Ok(match committed.result {
            CommitResult::Unknown { position } => {
                match self.resolve_patiently(&eg, position, txn).await {
                    Resolution::Committed(at) => CommitResult::Committed {
                        position: at,
                        fast: false,
                    },
                    Resolution::NotCommitted => CommitResult::Aborted,
                    Resolution::Undecided => CommitResult::Unknown { position },
                }
            }
            other => other,
        })
    }
}
