//! The operator removes a replica from ranges (`megastore range remove-replica`,
//! docs/protocol.md, "Voter changes") while the faults run: in the seeds that draw it
//! (`SimConfig::removals`), once, at a random moment of the faults — with two
//! witnesses in the topology, a witness or (a third of the time) a full replica (five
//! voters become four, so a majority stays three and the fault schedule, drawn for
//! five, stays within what four survive), else the read-only replica. From every
//! range that has it, or from one range. A removal refused (a range is being moved)
//! is tried again a little later.
//!
//! A full replica's slot leaves first (`Placement::begin_removal`); every so often the
//! operator then asks each of its servers' coordinators whether it read that
//! placement (after feeding it the newest, as its follower would) — or, with the
//! coordinator down, the lock service whether its lock is free — and removes the slot
//! once every one is fenced (`Placement::removal_fence`; the knob `remove-unfenced`
//! does not wait).
//!
//! With two witnesses, the operator then runs the voter catch-up pass and removes a
//! witness (the other one, if the first removal was a witness's): five voters become
//! three, a second voter change of the ranges (`catch_up.rs`).
//!
//! Every server process reads the new placement late, as after a split; clients only
//! when refused. The removed server refuses the ranges from when it reads it, and
//! retires their rows; *votes-where-placed* checks it casts no vote for them after.

use std::time::Duration;

use megastore_coordinator::{Input as CoordinatorInput, coordinator_lock};
use megastore_lock::{LockCommand, LockReply};
use megastore_placement::{Placement, RangeId, RemovalStep, ServerId, Version, removal_step};
use megastore_types::{NodeId, ReplicaId, ReplicaKind};

use super::routing::address;
use super::{Event, World, ns};
use crate::rng::Rng;

impl World {
    /// The operator's removal, if this seed's operator removes a replica.
    pub(super) fn schedule_removal(&mut self) {
        if let Some(mut rng) = self.removal_rng.take() {
            let at = rng.below(ns(self.config.safety_phase));
            self.removal_rng = Some(rng);
            self.schedule(at, Event::RemoveReplica);
        }
    }

    /// Removes the seed's replica from its ranges (or carries the removal on, or
    /// tries again later).
    pub(super) fn remove_replica(&mut self) {
        let Some(mut rng) = self.removal_rng.take() else {
            return;
        };
        let witnesses: Vec<_> = self.config.topology.of_kind(ReplicaKind::Witness).collect();
        let (target, ranges) = match self.removing.clone() {
            Some(chosen) => chosen,
            None => match self.choose_removal(&mut rng, &witnesses) {
                Some(chosen) => chosen,
                None => return,
            },
        };
        self.removing = Some((target, ranges.clone()));
        // Every step the placement core's: a full replica's slot leaves, its
        // coordinators are fenced, then the slot goes.
        let mut removed = false;
        for _ in 0..3 {
            let step = removal_step(
                &self.placement,
                target,
                &ranges,
                &self.fenced,
                self.bugs.operator,
            );
            match step {
                Ok(RemovalStep::Write(next)) => {
                    if !self.write_placement(&next) {
                        break;
                    }
                    let gone = self.placement.ranges().iter().any(|r| {
                        r.slot(target).is_some()
                            && next.range(r.id).is_none_or(|n| n.slot(target).is_none())
                    });
                    if gone {
                        self.removed(target, &ranges, next, &witnesses);
                        removed = true;
                        break;
                    }
                    self.trace.note(
                        self.now,
                        &format!(
                            "replica {} leaving {ranges:?}: placement {}",
                            target.0,
                            next.version()
                        ),
                    );
                    self.placement = next;
                    self.announce_placement();
                }
                Ok(RemovalStep::Fence { since, servers }) => {
                    let fenced: Vec<_> = servers
                        .into_iter()
                        .filter(|server| self.coordinator_fenced(*server, since))
                        .collect();
                    self.fenced
                        .extend(fenced.into_iter().map(|server| (server, since)));
                }
                Ok(RemovalStep::Done) => {
                    self.removing = None;
                    removed = true;
                    break;
                }
                Err(why) => {
                    self.trace
                        .note(self.now, &format!("removal refused: {why}"));
                    break;
                }
            }
        }
        if !removed && self.now < self.safety_end {
            let at =
                self.now + ns(Duration::from_millis(200)) + rng.below(ns(Duration::from_secs(2)));
            self.schedule(at, Event::RemoveReplica);
            self.removal_rng = Some(rng);
        }
    }

    /// The replica this seed removes, and from which ranges (none: every range).
    fn choose_removal(
        &self,
        rng: &mut Rng,
        witnesses: &[ReplicaId],
    ) -> Option<(ReplicaId, Vec<RangeId>)> {
        let topology = &self.config.topology;
        let target = if witnesses.len() >= 2 {
            let full: Vec<_> = topology.of_kind(ReplicaKind::Full).collect();
            if rng.chance(1.0 / 3.0) {
                full[rng.below(full.len() as u64) as usize]
            } else {
                witnesses[rng.below(witnesses.len() as u64) as usize]
            }
        } else {
            topology.of_kind(ReplicaKind::ReadOnly).next()?
        };
        let holding: Vec<_> = self
            .placement
            .ranges()
            .iter()
            .filter(|r| r.slot(target).is_some())
            .map(|r| r.id)
            .collect();
        if holding.is_empty() {
            return None;
        }
        let ranges = if rng.chance(0.5) {
            Vec::new()
        } else {
            vec![holding[rng.below(holding.len() as u64) as usize]]
        };
        Some((target, ranges))
    }

    /// Whether `server`'s coordinator is fenced for placement `since`: it read it
    /// (fed the newest first, as its follower would), or — down — the lock service
    /// says nobody holds its lock, asked now (after `since` was stored).
    fn coordinator_fenced(&mut self, server: ServerId, since: Version) -> bool {
        let at = address(server);
        if self.coordinators.get(&at).is_some_and(|c| c.core.is_some()) {
            let newest = self.placement.clone();
            self.run_coordinator(at, CoordinatorInput::Placement(newest));
            return self.coordinators[&at]
                .core
                .as_ref()
                .is_some_and(|core| core.knows_placement(since));
        }
        let (clocks, now, net) = (&self.clocks, self.now, &self.net);
        let holder = self.lock.model.execute_at_leader(
            |n| clocks[&NodeId::LockNode(n)].local(now),
            &LockCommand::Holder {
                lock: coordinator_lock(server),
            },
            super::drive::lock_link(net),
        );
        matches!(holder, Ok(LockReply::Holder(None)))
    }

    /// `target`'s slot is gone from `ranges`: `next` is the placement now.
    fn removed(
        &mut self,
        target: ReplicaId,
        ranges: &[RangeId],
        next: Placement,
        witnesses: &[ReplicaId],
    ) {
        self.trace.note(
            self.now,
            &format!(
                "removed replica {} from {}: placement {}",
                target.0,
                if ranges.is_empty() {
                    "every range".to_string()
                } else {
                    format!("{ranges:?}")
                },
                next.version()
            ),
        );
        if self.config.topology.kind(target) == Some(ReplicaKind::Full) {
            self.stats.full_removals += 1;
        }
        self.placement = next;
        self.stats.removals += 1;
        self.removing = None;
        self.announce_placement();
        // Two witnesses: one goes too (the other, if this was one), once this change
        // is caught up (a second voter change of the ranges, `catch_up.rs`).
        if witnesses.len() >= 2 {
            self.second_removal = witnesses.iter().copied().find(|w| *w != target);
            let at = self.now + ns(Duration::from_secs(1));
            self.schedule(at, Event::CatchUpVoters);
        }
    }
}
