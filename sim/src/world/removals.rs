//! The operator removes a replica from ranges (`megastore range remove-replica`,
//! docs/protocol.md, "Voter changes") while the faults run: in the seeds that draw it
//! (`SimConfig::removals`), once, at a random moment of the faults — a witness when
//! the topology has two (five voters become four, so a majority stays three and the
//! fault schedule, drawn for five, stays within what four survive), else the read-only
//! replica. From every range that has it, or from one range. A removal refused
//! (a range is being moved) is tried again a little later.
//!
//! With two witnesses, the operator then runs the voter catch-up pass and removes the
//! other witness too: five voters become three, a second voter change of the ranges
//! (`catch_up.rs`).
//!
//! Every server process reads the new placement late, as after a split; clients only
//! when refused. The removed server refuses the ranges from when it reads it, and
//! retires their rows; *votes-where-placed* checks it casts no vote for them after.

use std::time::Duration;

use megastore_types::ReplicaKind;

use super::{Event, World, ns};

impl World {
    /// The operator's removal, if this seed's operator removes a replica.
    pub(super) fn schedule_removal(&mut self) {
        if let Some(mut rng) = self.removal_rng.take() {
            let at = rng.below(ns(self.config.safety_phase));
            self.removal_rng = Some(rng);
            self.schedule(at, Event::RemoveReplica);
        }
    }

    /// Removes the seed's replica from its ranges (or tries again later).
    pub(super) fn remove_replica(&mut self) {
        let Some(mut rng) = self.removal_rng.take() else {
            return;
        };
        let topology = &self.config.topology;
        let witnesses: Vec<_> = topology.of_kind(ReplicaKind::Witness).collect();
        let target = if witnesses.len() >= 2 {
            witnesses[rng.below(witnesses.len() as u64) as usize]
        } else {
            match topology.of_kind(ReplicaKind::ReadOnly).next() {
                Some(r) => r,
                None => return,
            }
        };
        let holding: Vec<_> = self
            .placement
            .ranges()
            .iter()
            .filter(|r| r.slot(target).is_some())
            .map(|r| r.id)
            .collect();
        if holding.is_empty() {
            return;
        }
        let ranges = if rng.chance(0.5) {
            Vec::new()
        } else {
            vec![holding[rng.below(holding.len() as u64) as usize]]
        };
        match self.placement.remove_replica(target, &ranges) {
            Ok(next) if self.write_placement(&next) => {
                self.trace.note(
                    self.now,
                    &format!(
                        "removed replica {} from {}: placement {}",
                        target.0,
                        if ranges.is_empty() {
                            "every range".to_string()
                        } else {
                            format!("{:?}", ranges)
                        },
                        next.version()
                    ),
                );
                self.placement = next;
                self.stats.removals += 1;
                self.announce_placement();
                // Two witnesses: the other goes too, once this change is caught up
                // (a second voter change of the ranges, `catch_up.rs`).
                if witnesses.len() >= 2 {
                    self.second_removal = witnesses.iter().copied().find(|w| *w != target);
                    let at = self.now + ns(Duration::from_secs(1));
                    self.schedule(at, Event::CatchUpVoters);
                }
            }
            refused => {
                if let Err(why) = refused {
                    self.trace
                        .note(self.now, &format!("removal refused: {why}"));
                }
                if self.now < self.safety_end {
                    let at = self.now
                        + ns(Duration::from_millis(200))
                        + rng.below(ns(Duration::from_secs(2)));
                    self.schedule(at, Event::RemoveReplica);
                    self.removal_rng = Some(rng);
                }
            }
        }
    }
}
