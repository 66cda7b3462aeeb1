//! The invalidation step (write step 5): once the value is chosen, every full replica
//! not known to hold it has its coordinator invalidated for the group — or a
//! linearizable read of the lock service shows that coordinator's lock lapsed.
//!
//! A placed proposer (docs/protocol.md, "Placement") invalidates the coordinator of
//! the server its placement names for the slot. Which server that is can change under
//! it (a move), so a server's coordinator that cannot vouch — its lock lapsed, or it
//! answered that it does not serve the group ([`CoordinatorReply::NotServed`]) — counts
//! only once a placement read from the lock service after that answer still names the
//! same server for the slot (*lapse-of-the-holder*). Otherwise the slot's coordinator
//! is now another server's, which may vouch: the proposer invalidates that one. An
//! acknowledgement counts as it comes: a coordinator acknowledges only while it serves
//! the group, and a move's target vouches only after its source's coordinator stopped.

use std::collections::{BTreeMap, BTreeSet};

use megastore_coordinator::{CoordinatorReply, CoordinatorRequest, coordinator_lock, lock_name};
use megastore_lock::{LockCommand, LockError, LockReply};
use megastore_placement::{PLACEMENT_FILE, Placement, ServerId};
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
            .replica_set(&self.eg)
            .of_kind(ReplicaKind::Full)
            .into_iter()
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
            let mut invalidation = Invalidation {
                retry_at: ctx.now + ctx.config.timeouts.invalidate,
                lock_query: None,
                sent: false,
                server: ctx.coordinator_server(&self.eg, r),
                requests: BTreeSet::new(),
                confirming: None,
            };
            if on_their_way.contains(&r) && !grace.is_zero() {
                invalidation.retry_at = ctx.now + grace;
            } else {
                invalidation.sent = true;
                invalidation.requests.insert(self.invalidate(ctx, r));
            }
            pending.insert(r, invalidation);
        }
        self.phase = Phase::Invalidate {
            chosen,
            pending,
            started: ctx.now,
        };
        self.finish_invalidation(ctx);
    }

    /// Sends replica `r`'s coordinator an invalidate (routed by the proposer's
    /// placement); returns its id.
    fn invalidate<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, r: ReplicaId) -> u64 {
        let (eg, position) = (self.eg.clone(), self.position);
        let id = ctx.send_coordinator(r, |id| CoordinatorRequest::Invalidate { id, eg, position });
        self.outstanding.insert(id, r);
        self.mine.insert(id);
        id
    }

    /// The invalidations whose retry is due: the invalidate goes out again (or for
    /// the first time, if the replica's accept did not come in time), and the lock
    /// service is asked whether the coordinator's lock lapsed.
    pub(super) fn retry_invalidations<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) {
        let Phase::Invalidate { pending, .. } = &self.phase else {
            return;
        };
        let due: Vec<ReplicaId> = pending
            .iter()
            .filter(|(_, p)| ctx.now >= p.retry_at)
            .map(|(r, _)| *r)
            .collect();
        for r in due {
            let id = self.invalidate(ctx, r);
            let retry_at = ctx.now + ctx.config.timeouts.invalidate;
            let Phase::Invalidate { pending, .. } = &mut self.phase else {
                return;
            };
            let Some(p) = pending.get_mut(&r) else {
                continue;
            };
            p.requests.insert(id);
            p.retry_at = retry_at;
            if !p.sent {
                // Its accept did not come in time: the first invalidate.
                p.sent = true;
                continue;
            }
            if p.confirming.is_none() {
                let lock = p.server.map_or_else(|| lock_name(r), coordinator_lock);
                let query = ctx.send_lock(LockCommand::Holder { lock });
                self.mine.insert(query);
                p.lock_query = Some(query);
            }
        }
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

    /// The coordinator the proposer invalidates for replica `r` cannot vouch for the
    /// group (its lock lapsed, or it does not serve the group): done if the proposer is
    /// not placed; else the placement is read, and the slot is done if that read still
    /// names the same server (*lapse-of-the-holder*).
    fn cannot_vouch<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, r: ReplicaId) {
        let Phase::Invalidate { pending, .. } = &mut self.phase else {
            return;
        };
        let Some(p) = pending.get_mut(&r) else {
            return;
        };
        if p.server.is_none() || ctx.config.bugs.trust_unconfirmed_lapse() {
            self.invalidated(ctx, r);
            return;
        }
        if p.confirming.is_none() {
            let read = ctx.send_lock(LockCommand::ReadFile {
                name: PLACEMENT_FILE.into(),
            });
            self.mine.insert(read);
            p.confirming = Some(read);
        }
    }

    /// The placement read after replica `r`'s coordinator could not vouch: the slot is
    /// done if its server is still the one that could not vouch; else that server's
    /// coordinator is invalidated in its stead.
    fn on_placement_read<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        r: ReplicaId,
        read: Option<Placement>,
    ) {
        let Phase::Invalidate { pending, .. } = &mut self.phase else {
            return;
        };
        let Some(p) = pending.get_mut(&r) else {
            return;
        };
        p.confirming = None;
        let Some(placement) = read else {
            // Unreadable: tried again after the next lock query.
            return;
        };
        let holder: Option<ServerId> = placement
            .range_of(&self.eg.0)
            .slot(r)
            .map(|slot| slot.server);
        ctx.observe_placement(placement);
        if holder.is_none() || holder == p.server {
            // Still the slot's server (or the slot is gone): nobody vouches for the
            // group at `r` but through a new epoch, which reads the chosen value first.
            self.invalidated(ctx, r);
            return;
        }
        // The slot moved: its new server's coordinator may vouch.
        p.server = holder;
        p.requests.clear();
        p.lock_query = None;
        p.sent = true;
        p.retry_at = ctx.now + ctx.config.timeouts.invalidate;
        let id = self.invalidate(ctx, r);
        if let Phase::Invalidate { pending, .. } = &mut self.phase
            && let Some(p) = pending.get_mut(&r)
        {
            p.requests.insert(id);
        }
    }

    /// Handles a coordinator's answer to an invalidate: an acknowledgement from the
    /// server invalidated counts; `NotServed` means that server's coordinator cannot
    /// vouch for the group.
    pub(crate) fn on_coordinator_reply<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        from: ReplicaId,
        reply: CoordinatorReply,
    ) {
        let id = reply.id();
        if self.outstanding.remove(&id).is_none() {
            return;
        }
        let Phase::Invalidate { pending, .. } = &self.phase else {
            return;
        };
        let Some(p) = pending.get(&from).filter(|p| p.requests.contains(&id)) else {
            // Sent to a server the slot has since moved away from.
            return;
        };
        match reply {
            CoordinatorReply::Invalidated { .. } => self.invalidated(ctx, from),
            CoordinatorReply::NotServed { .. } if p.server.is_some() => {
                self.cannot_vouch(ctx, from)
            }
            _ => {}
        }
    }

    /// Handles the lock service's answers: about a coordinator's lock (lapsed, or
    /// revoked and lapsed, means that coordinator cannot vouch), and the placement read
    /// after. The query was made after the value was chosen, as the rule requires.
    pub(crate) fn on_lock_outcome<K: Clone + Ord>(
        &mut self,
        ctx: &mut Ctx<'_, K>,
        id: u64,
        result: Result<LockReply, LockError>,
    ) {
        let Phase::Invalidate { pending, .. } = &mut self.phase else {
            return;
        };
        if let Some(r) = pending
            .iter()
            .find(|(_, p)| p.confirming == Some(id))
            .map(|(r, _)| *r)
        {
            let read = super::super::placement_read(&result, &ctx.config.topology);
            self.on_placement_read(ctx, r, read);
            return;
        }
        let Some(r) = pending
            .iter()
            .find(|(_, p)| p.lock_query == Some(id))
            .map(|(r, _)| *r)
        else {
            return;
        };
        if matches!(result, Ok(LockReply::Holder(None))) {
            if let Some(p) = pending.get_mut(&r) {
                p.lock_query = None;
            }
            self.cannot_vouch(ctx, r);
        } else if let Some(p) = pending.get_mut(&r) {
            p.lock_query = None;
        }
    }
}
