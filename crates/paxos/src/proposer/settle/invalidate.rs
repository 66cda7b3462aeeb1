//! The invalidation step (write step 5): once the value is chosen, every full replica
//! not known to hold it has its coordinator invalidated for the group — or a
//! linearizable read of the lock service shows that coordinator's lock lapsed.

use std::collections::{BTreeMap, BTreeSet};

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest};
use megastore_lock::{LockError, LockReply};
use megastore_types::{ReplicaId, ReplicaKind};

use super::super::Ctx;
use super::{Chosen, Invalidation, Phase, Settle};

impl Settle {
    /// Write step 5 for a value just chosen (not learned from a visible mark): every
    /// full replica not among its holders has its coordinator invalidated.
    ///
    /// A full replica whose accept of the deciding round is still on its way gets a
    /// moment first — half as long again as the majority took — since its accept
    /// makes it a holder: invalidating a replica that was merely slower than the
    /// majority would cost its site local reads until its coordinator revalidates (a
    /// majority's log states per read).
    pub(super) fn on_chosen<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, chosen: Chosen) {
        // Accepts of the deciding round still outstanding (not a learn's log reads).
        let on_their_way: BTreeSet<ReplicaId> = self
            .outstanding
            .iter()
            .filter(|(id, _)| self.deciding.contains_key(id))
            .map(|(_, r)| *r)
            .collect();
        self.outstanding.clear();
        let grace = ctx.now.since(self.accepts_sent) / 2;
        let bugs = ctx.config.bugs;
        if bugs.skip_invalidate() {
            self.mark_visible(ctx, chosen.ballot, chosen.entry);
            return;
        }
        let targets: Vec<ReplicaId> = ctx
            .config
            .topology
            .of_kind(ReplicaKind::Full)
            .filter(|r| !chosen.holders.contains(r))
            .collect();
        #[cfg(feature = "sim-bugs")]
        let targets: Vec<ReplicaId> = if bugs.invalidate_only_seen_lacking() {
            targets
                .into_iter()
                .filter(|r| self.seen_lacking.contains(r))
                .collect()
        } else {
            targets
        };
        let mut pending = BTreeMap::new();
        for r in targets {
            let invalidation = if on_their_way.contains(&r) && !grace.is_zero() {
                Invalidation {
                    retry_at: ctx.now + grace,
                    lock_query: None,
                    sent: false,
                }
            } else {
                self.invalidate(ctx, r);
                Invalidation {
                    retry_at: ctx.now + ctx.config.timeouts.invalidate,
                    lock_query: None,
                    sent: true,
                }
            };
            pending.insert(r, invalidation);
        }
        self.phase = Phase::Invalidate {
            chosen,
            pending,
            started: ctx.now,
        };
        self.finish_invalidation(ctx);
    }

    pub(super) fn invalidate<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, r: ReplicaId) {
        let (eg, position) = (self.eg.clone(), self.position);
        let id = ctx.send_coordinator(r, |id| CoordinatorRequest::Invalidate { id, eg, position });
        self.outstanding.insert(id, r);
        self.mine.insert(id);
    }

    /// Replica `r` no longer needs invalidating.
    pub(super) fn invalidated<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, r: ReplicaId) {
        if let Phase::Invalidate { pending, .. } = &mut self.phase {
            pending.remove(&r);
        }
        self.finish_invalidation(ctx);
    }

    /// With every coordinator invalidated (or its lock lapsed), goes on to step 6.
    pub(super) fn finish_invalidation<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        if let Phase::Invalidate {
            chosen, pending, ..
        } = &self.phase
            && pending.is_empty()
        {
            let (ballot, entry) = (chosen.ballot, chosen.entry.clone());
            self.mark_visible(ctx, ballot, entry);
        }
    }

    /// Handles a coordinator's acknowledgement of an invalidate.
    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) {
        if let CoordinatorReply::Invalidated { id } = reply
            && self.outstanding.remove(&id).is_some()
        {
            self.invalidated(ctx, from);
        }
    }

    /// Handles the lock service's answer about a coordinator's lock: lapsed (or
    /// revoked and lapsed) means that coordinator needs no invalidate. The query was
    /// made after the value was chosen, as the rule requires.
    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        let Phase::Invalidate { pending, .. } = &mut self.phase else {
            return;
        };
        let Some(r) = pending
            .iter()
            .find(|(_, p)| p.lock_query == Some(id))
            .map(|(r, _)| *r)
        else {
            return;
        };
        if matches!(result, Ok(LockReply::Holder(None))) {
            self.invalidated(ctx, r);
        } else if let Some(p) = pending.get_mut(&r) {
            p.lock_query = None;
        }
    }
}
