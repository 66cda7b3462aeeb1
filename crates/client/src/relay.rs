//! The relay's side of relayed commits (docs/protocol.md, "Relayed commits"): a
//! replica's own shared client commits the transactions its site's clients relay to
//! it, each in its lane for the group with every other, under the writer's id. Which
//! commits a client relays, and what it does when its relay does not answer, is its
//! core's ([`megastore_paxos::ClientCore::commit`]).

use megastore_paxos::{CommitResult, RelayedCommit};

use crate::client::{Client, ClientError, Event};

impl Client {
    /// Commits another client's transaction in this client's lane for its group,
    /// under the writer's id, and returns its outcome as the core reported it (an
    /// unknown one is the writer's to resolve).
    pub async fn commit_for_relay(
        &self,
        commit: RelayedCommit,
    ) -> Result<CommitResult, ClientError> {
        let committed = self
            .ask(|done| Event::CommitRelayed { commit, done })
            .await?;
        self.metrics().relayed("served");
        Ok(committed.result)
    }
}
