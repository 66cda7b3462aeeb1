//! The operator's moves (docs/protocol.md, "Placement"): in a world with spare servers,
//! the operator moves a slot of a range between its home server and its spare, one
//! move at a time (mostly the slot it moved last, back), while the faults run. Every decision is `next_step`'s (the placement
//! crate's operator core); this file carries its steps out as `megastore range move`
//! would: writes go to the lock service through its leader; a copy is a `RangeCopy`
//! at the target (`Replica::begin_copy`: a final copy on a clean base is of the groups
//! the source changed since only), a few pages of the source's store per step (under
//! the source's `Replica::page_token`), the source serving (and crashing) between
//! them, taken by the target only for a move its placement shows and begun again if
//! the target's process restarts; the freeze is
//! `ReplicaInput::Freeze` at the source (after it read the placement); the fence (a
//! full replica's slot) asks the source's coordinator whether it read the move; and
//! each page of the final copy is taken only if the source gives it
//! (`Replica::final_copy_source`: frozen for the move, its store kept). A step whose
//! process is down waits and is tried again; the operator also crashes (it forgets
//! what it did and resumes from the placement) and gives moves up. When the
//! finishing placement is stored, the checkers judge the move (*moves-keep-writes*).

use std::time::Duration;

use megastore_coordinator::Input as CoordinatorInput;
use megastore_paxos::{RangeCopy, ReplicaInput, export_pages};
use megastore_placement::{MoveEnd, MoveRequest, OperatorStep, Progress, RangeId, Server, Version};
use megastore_rowstore::{Durability, KeyRange};
use megastore_types::ReplicaId;

use super::placement::spare_address;
use super::routing::{address, server_at};
use super::{Event, World, ns};

/// Rows per step of a copy: small, so that a copy takes several operator steps, with
/// the source serving (or crashing) between its pages.
const COPY_PAGE_ROWS: usize = 16;
/// Spans a step of a copy may take pages of (while they hold fewer than
/// [`COPY_PAGE_ROWS`] rows in all).
const COPY_SPANS_PER_STEP: usize = 8;

/// Rows (and spans) per step of a copy in a world of [`crate::SimConfig::whole_copies`]:
/// more than any simulated range holds, so the copy takes one step.
const WHOLE_COPY_ROWS: usize = 1 << 20;

/// Which copy: of `range` for move `move_id`, from the server at `from` to the one at
/// `to`; `last`: the final copy, from the frozen source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Copied {
    from: ReplicaId,
    to: ReplicaId,
    range: RangeId,
    move_id: Version,
    last: bool,
}

/// A copy under way at a move's target, as its process holds it.
pub(crate) struct Copying {
    what: Copied,
    /// The target's process ([`crate::nodes::ReplicaNode::starts`]) the copy runs in.
    target_process: u32,
    copy: RangeCopy,
}

impl World {
    /// The operator's first move, in a world with spares.
    pub(super) fn schedule_first_move(&mut self) {
        if self.config.spares {
            let at = self.operator_rng.below(ns(self.config.safety_phase) / 3);
            self.schedule(at, Event::Operate);
        }
    }

    /// One step of the operator: the next step of its move, or a new move.
    pub(super) fn operate(&mut self) {
        let Some((request, mut progress)) = self.moving.take().or_else(|| self.new_move()) else {
            if self.now < self.safety_end {
                self.schedule_next_move();
            }
            return;
        };
        // Per step; a copy's pages are quick steps, each a tenth as likely to see the
        // operator crash or give up.
        let odds = if self.copying.is_some() { 0.1 } else { 1.0 };
        if self.operator_rng.chance(0.03 * odds) {
            // The operator crashes and starts again on the same move.
            self.trace.note(self.now, "operator restarts");
            progress = Progress::default();
        }
        if self.operator_rng.chance(0.02 * odds) {
            progress.giving_up = true;
        }
        let step = megastore_placement::next_step(
            &self.placement,
            &request,
            &mut progress,
            self.bugs.operator,
        );
        match step {
            OperatorStep::Write { expected, next } => {
                if expected == self.placement.version() && self.write_placement(&next) {
                    self.trace.note(
                        self.now,
                        &format!("operator writes placement {}", next.version()),
                    );
                    let finished = self.finished_move(&request, &next);
                    self.placement = next;
                    if let Some((from, to, groups)) = finished {
                        let mut checks = self.checks.take().expect("checkers are present");
                        checks.on_move_finished(&self.observation(), (from, to), &groups);
                        self.checks = Some(checks);
                    }
                    self.announce_placement();
                }
            }
            OperatorStep::Copy {
                from,
                to,
                range,
                move_id,
                last,
                ..
            } => {
                let (from, to) = (address(from), address(to));
                let refused = if last {
                    self.replicas[&from]
                        .core
                        .as_ref()
                        .and_then(|core| core.final_copy_source(range, move_id).err())
                } else {
                    None
                };
                if let Some(why) = refused {
                    self.trace
                        .note(self.now, &format!("final copy refused: {why}"));
                    self.copying = None;
                    progress.final_copy_refused(why);
                } else if self.copy_page(Copied {
                    from,
                    to,
                    range,
                    move_id,
                    last,
                }) {
                    progress.copied(last);
                }
            }
            OperatorStep::Freeze {
                server,
                range,
                move_id,
            } => {
                let source = address(server);
                if self.replicas[&source].core.is_some() {
                    let newest = self.placement.clone();
                    self.run_replica(source, ReplicaInput::Placement(newest), None);
                    self.run_replica(source, ReplicaInput::Freeze { range, move_id }, None);
                    progress.froze = self.replicas[&source]
                        .core
                        .as_ref()
                        .and_then(|core| core.placement())
                        .is_some_and(|p| p.frozen_for(range, move_id));
                }
            }
            OperatorStep::Fence { server, move_id } => {
                let source = address(server);
                // `next_step` fences a full replica's slot only, which has a coordinator.
                match self.coordinators.get(&source).map(|c| c.core.is_some()) {
                    None | Some(false) => {}
                    Some(true) => {
                        let newest = self.placement.clone();
                        self.run_coordinator(source, CoordinatorInput::Placement(newest));
                        progress.fenced = self.coordinators[&source]
                            .core
                            .as_ref()
                            .is_some_and(|core| core.knows_placement(move_id));
                    }
                }
            }
            OperatorStep::Done(end) => {
                self.trace.note(self.now, &format!("move over: {end:?}"));
                match end {
                    MoveEnd::Finished { .. } => self.stats.moves_finished += 1,
                    MoveEnd::Aborted => self.stats.moves_aborted += 1,
                    MoveEnd::Refused(_) => {}
                }
                if self.now < self.safety_end {
                    self.schedule_next_move();
                }
                return;
            }
        }
        self.moving = Some((request, progress));
        // A copy's pages follow each other quickly; other steps wait for answers.
        let (least, spread) = if self.copying.is_some() {
            (Duration::from_millis(2), Duration::from_millis(30))
        } else {
            (Duration::from_millis(20), Duration::from_millis(400))
        };
        let at = self.now + ns(least) + self.operator_rng.below(ns(spread));
        self.schedule(at, Event::Operate);
    }

    /// If `next` finishes the move `request` (the range was moving in the stored
    /// placement and no longer is, its slot on the target): the source's and the
    /// target's addresses and the range's group keys.
    fn finished_move(
        &self,
        request: &MoveRequest,
        next: &megastore_placement::Placement,
    ) -> Option<(ReplicaId, ReplicaId, KeyRange)> {
        let before = self.placement.range(request.range)?;
        let moving = before.moving.as_ref()?;
        let after = next.range(request.range)?;
        let held = after.slot(request.replica)?;
        (after.moving.is_none() && held.server == moving.to).then(|| {
            let groups = KeyRange {
                start: after.start.clone(),
                end: after.end.clone(),
            };
            (address(moving.from), address(moving.to), groups)
        })
    }

    /// The operator's next move, a few seconds from now.
    fn schedule_next_move(&mut self) {
        let at = self.now
            + ns(Duration::from_millis(500))
            + self.operator_rng.below(ns(Duration::from_secs(3)));
        self.schedule(at, Event::Operate);
    }

    /// A move of a random slot of a random range to the other server of its site (home
    /// to spare, or back). A spare the placement does not list yet is added first (its
    /// process runs from the start); none if that write fails.
    fn new_move(&mut self) -> Option<(MoveRequest, Progress)> {
        if self.now >= self.safety_end {
            return None;
        }
        let ranges = self.placement.ranges();
        // Three times in four the slot the last move moved goes back, as a flapping
        // rebalancer would move it: a server then receives a range it served before,
        // with its coordinator's and its replica's memory of it.
        let back = self
            .last_moved
            .filter(|_| self.operator_rng.chance(0.75))
            .and_then(|(range, replica)| {
                let range = self.placement.range(range)?;
                Some((range, range.slot(replica)?))
            });
        let (range, slot) = match back {
            Some(back) => back,
            None => {
                let range = &ranges[self.operator_rng.below(ranges.len() as u64) as usize];
                let slot = &range.slots[self.operator_rng.below(range.slots.len() as u64) as usize];
                (range, slot)
            }
        };
        self.last_moved = Some((range.id, slot.replica));
        let home = slot.replica;
        let to = if address(slot.server) == home {
            spare_address(home)
        } else {
            home
        };
        let request = MoveRequest {
            range: range.id,
            replica: slot.replica,
            to: server_at(to),
        };
        if self.placement.server(request.to).is_none() {
            let server = Server {
                id: request.to,
                site: self.replicas[&to].site,
            };
            let added = self
                .placement
                .add_server(server)
                .expect("a spare is at its slot's site");
            if !self.write_placement(&added) {
                return None;
            }
            self.trace.note(
                self.now,
                &format!(
                    "operator adds {}: placement {}",
                    request.to,
                    added.version()
                ),
            );
            self.placement = added;
            self.announce_placement();
        }
        self.trace
            .note(self.now, &format!("operator moves {request:?}"));
        Some((request, Progress::default()))
    }

    /// One step of the copy `what`: the target at `to` applies the next pages the
    /// source at `from` exports, starting the copy first (one per target process) if
    /// none is under way — a final copy on a clean base, of the groups the source
    /// changed since only (`Replica::begin_copy`). Each step needs both processes up
    /// and the target's placement showing the move (it reads the newest if not, as
    /// `ServerPlacement::receive` asks); a copy whose target restarted is begun again.
    /// Whether the copy is done.
    fn copy_page(&mut self, what: Copied) -> bool {
        let (from, to) = (what.from, what.to);
        if self.replicas[&from].core.is_none() || self.replicas[&to].core.is_none() {
            return false;
        }
        let shows = |world: &World| {
            world.replicas[&to]
                .core
                .as_ref()
                .and_then(|core| core.placement())
                .is_some_and(|p| p.receive(what.range, what.move_id).is_ok())
        };
        if !shows(self) {
            let newest = self.placement.clone();
            self.run_replica(to, ReplicaInput::Placement(newest), None);
        }
        if !shows(self) {
            return false;
        }
        let target_process = self.replicas[&to].starts;
        let under_way = self
            .copying
            .take()
            .filter(|c| c.what == what && c.target_process == target_process);
        let mut copying = match under_way {
            Some(copying) => copying,
            None => {
                // A final copy on a clean base copies only what the source changed
                // since (the caller checked that the source gives a final copy).
                let (range, move_id) = (what.range, what.move_id);
                let changed = what
                    .last
                    .then(|| self.replicas[&to].core.as_ref()?.copy_base(range, move_id))
                    .flatten()
                    .and_then(|token| {
                        let source = self.replicas[&from].core.as_ref()?;
                        source.changed_groups(range, move_id, token).ok().flatten()
                    });
                if let Some(changed) = &changed {
                    self.stats.short_final_copies += 1;
                    self.trace.note(
                        self.now,
                        &format!("final copy of {} changed groups", changed.len()),
                    );
                }
                let node = self.replicas.get_mut(&to).expect("the target exists");
                let core = node.core.as_mut().expect("the target is up");
                let Ok(copy) =
                    core.begin_copy(&node.store, range, move_id, what.last, changed.as_deref())
                else {
                    return false;
                };
                Copying {
                    what,
                    target_process,
                    copy,
                }
            }
        };
        if !copying.copy.is_done() {
            let nonce = self.operator_rng.next_u64();
            let source = self.replicas.get_mut(&from).expect("the source exists");
            let token = source.core.as_mut().expect("the source is up").page_token(
                what.range,
                what.move_id,
                what.last,
                nonce,
            );
            let (page_rows, spans) = if self.config.whole_copies {
                (WHOLE_COPY_ROWS, WHOLE_COPY_ROWS)
            } else {
                (COPY_PAGE_ROWS, COPY_SPANS_PER_STEP)
            };
            let pages = export_pages(&source.store, copying.copy.next_spans(spans), page_rows)
                .expect("the memory store does not fail");
            let target = self.replicas.get_mut(&to).expect("the target exists");
            let core = target.core.as_mut().expect("the target is up");
            for page in &pages {
                core.apply_copied_page(
                    &target.store,
                    &mut copying.copy,
                    page,
                    token,
                    page_rows,
                    Durability::Synced,
                )
                .expect("the target shows the move and the memory store does not fail");
            }
            self.stats.copy_pages += pages.len() as u64;
        }
        if copying.copy.is_done() {
            return true;
        }
        self.copying = Some(copying);
        false
    }
}
