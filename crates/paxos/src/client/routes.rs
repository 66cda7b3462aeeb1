//! A placed client's routes follow the servers' refusals (docs/protocol.md,
//! "Placement", *routes-follow-refusals*): a replica server that answers
//! `WrongServer` with a newer epoch of the range than the client knows, or `Frozen`,
//! tells it that its placement is behind (a split or move it has not read), so it reads
//! the placement from the lock service again — one read at a time, and at most one per
//! round of RPCs — and routes by it from then on. A `WrongServer` at an epoch it already
//! knows comes from a server that is behind: reading again would not help, so nothing
//! is read.

use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_placement::PLACEMENT_FILE;
use megastore_types::{NodeId, Time};

use super::ClientCore;
use crate::messages::{Message, ReplicaError, ReplicaReply};

impl ClientCore {
    /// A replica's reply: if it says the client's placement is behind, the placement
    /// is read again.
    pub(super) fn follow_refusal(
        &mut self,
        now: Time,
        reply: &ReplicaReply,
        sends: &mut Vec<(NodeId, Message)>,
    ) {
        let ReplicaReply::Error { error, .. } = reply else {
            return;
        };
        let Some(known) = self.wiring.placement() else {
            return;
        };
        let behind = match error {
            ReplicaError::WrongServer { range, epoch } => {
                known.range(*range).is_none_or(|mine| mine.epoch < *epoch)
            }
            ReplicaError::Frozen { .. } => true,
            _ => false,
        };
        let rested = self
            .placement_read_at
            .is_none_or(|at| now.since(at) >= self.config.proposer.timeouts.rpc);
        if !behind || self.placement_read.is_some() || !rested {
            return;
        }
        let (id, send) = self.wiring.lock_client().start(
            now,
            LockCommand::ReadFile {
                name: PLACEMENT_FILE.into(),
            },
        );
        self.placement_read = Some(id);
        self.placement_read_at = Some(now);
        sends.push((
            NodeId::LockNode(send.to),
            Message::LockRequest(send.request),
        ));
    }

    /// The lock service's answer to lock request `id`, if it is the placement read;
    /// whether it was.
    pub(super) fn on_placement_read(
        &mut self,
        id: u64,
        result: &Result<LockReply, LockError>,
    ) -> bool {
        if self.placement_read != Some(id) {
            return false;
        }
        self.placement_read = None;
        if let Some(placement) =
            crate::proposer::placement_read(result, &self.config.proposer.topology)
        {
            self.wiring.observe_placement(placement);
        }
        true
    }
}
