//! Marking the chosen value visible everywhere (write step 6), and ending a settle
//! early when some replica already has the position visible.

use megastore_types::{Ballot, ReplicaId};

use super::super::Ctx;
use super::{Phase, Settle, SettleOutcome};
use crate::entry::LogEntry;
use crate::messages::ReplicaRequest;

impl Settle {
    /// Write step 6 for the value chosen at `ballot`: only now is the visible mark
    /// written anywhere.
    pub(super) fn mark_visible<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        ballot: Ballot,
        entry: LogEntry,
    ) {
        let position = self.position;
        let replicas: Vec<ReplicaId> = ctx.replica_set(&self.eg).ids();
        self.outstanding.clear();
        for r in replicas {
            let entry = entry.clone();
            self.send(ctx, r, |id, eg| ReplicaRequest::MarkVisible {
                id,
                eg,
                position,
                ballot,
                entry,
            });
        }
        self.outstanding.clear();
        self.phase = Phase::Done(SettleOutcome::Settled { ballot, entry });
    }

    /// The value is visible somewhere: its invalidation step was done by whoever
    /// marked it, so no step 5 here.
    pub(super) fn learned_visible<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        ballot: Ballot,
        entry: LogEntry,
    ) {
        self.mark_visible(ctx, ballot, entry);
    }
}
