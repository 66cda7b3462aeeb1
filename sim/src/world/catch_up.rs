//! The operator's voter catch-up pass (`megastore range catch-up`, docs/protocol.md,
//! "Voter changes") and the second voter change it allows: after the first witness of
//! two was removed (`removals.rs`), every so often the operator asks each voter of
//! each range whose voters changed to run the pass (`ReplicaInput::CatchUpVoters`,
//! after feeding it the newest placement, as the server's admin call reads it first),
//! records the change caught up (`Placement::record_caught_up`) once every voter's
//! pass found every group held, and, once no range waits, removes the other witness.
//! A pass lost to a crash, refused (a frozen source, a server behind) or that found a
//! group not held is asked for again at the next round.

use std::time::Duration;

use megastore_paxos::ReplicaInput;
use megastore_placement::RangeId;

use super::routing::address;
use super::{Event, World, ns};

impl World {
    /// One round of the operator's catch-up, or the second removal once nothing waits.
    pub(super) fn catch_up_voters(&mut self) {
        let Some(second) = self.second_removal else {
            return;
        };
        for (server, report) in std::mem::take(&mut self.pass_reports) {
            match &report.outcome {
                Ok(found) if found.complete() => {
                    self.passes_held
                        .insert((server, report.range, report.changed_at));
                }
                outcome => self.trace.note(
                    self.now,
                    &format!(
                        "catch-up pass of {} at {} for {}: {outcome:?}",
                        report.range, server.0, report.changed_at
                    ),
                ),
            }
        }
        let mut next = self.placement.clone();
        let mut recorded: Vec<RangeId> = Vec::new();
        let mut waiting = false;
        let ranges: Vec<RangeId> = self.placement.ranges().iter().map(|r| r.id).collect();
        for range in ranges {
            let Some((at, voters)) = self.placement.catch_up_needs(range) else {
                continue;
            };
            let missing: Vec<_> = voters
                .into_iter()
                .map(address)
                .filter(|a| !self.passes_held.contains(&(*a, range, at)))
                .collect();
            if missing.is_empty() {
                if let Ok(caught_up) = next.record_caught_up(range, at) {
                    next = caught_up;
                    recorded.push(range);
                }
                continue;
            }
            waiting = true;
            for server in missing {
                if self.replicas[&server].core.is_none() {
                    continue;
                }
                let newest = self.placement.clone();
                self.run_replica(server, ReplicaInput::Placement(newest), None);
                let ask = ReplicaInput::CatchUpVoters {
                    range,
                    changed_at: at,
                };
                self.run_replica(server, ask, None);
            }
        }
        if !recorded.is_empty() && self.write_placement(&next) {
            self.trace.note(
                self.now,
                &format!(
                    "voter changes of {recorded:?} caught up: placement {}",
                    next.version()
                ),
            );
            self.placement = next;
            self.stats.catch_ups += recorded.len() as u64;
            self.announce_placement();
        } else if !waiting && recorded.is_empty() {
            match self.placement.remove_replica(second, &[]) {
                Ok(next) if self.write_placement(&next) => {
                    self.trace.note(
                        self.now,
                        &format!(
                            "removed replica {} from every range: placement {}",
                            second.0,
                            next.version()
                        ),
                    );
                    self.placement = next;
                    self.stats.removals += 1;
                    self.second_removal = None;
                    self.announce_placement();
                    return;
                }
                refused => {
                    if let Err(why) = refused {
                        self.trace
                            .note(self.now, &format!("second removal refused: {why}"));
                    }
                }
            }
        }
        if self.now < self.safety_end {
            let at = self.now + ns(Duration::from_millis(500));
            self.schedule(at, Event::CatchUpVoters);
        }
    }
}
