//! A server's side of placement: which requests it may answer, and what it does when
//! it sees a newer placement (docs/protocol.md, "Placement").

use std::collections::BTreeMap;

use megastore_types::ReplicaId;

use crate::error::ChangeError;
use crate::ids::{RangeId, ServerId, Version};
use crate::map::Placement;
use crate::range::{MovePhase, Range};

megastore_types::bug_knobs! {
    /// Deliberate mistakes that prove the placement checks catch them. All off in
    /// every real deployment.
    pub struct PlacementBugs {
        /// A move's source goes on serving the range it froze, for as long as its
        /// placement still shows the slot as its own: once the move finishes, two
        /// servers then serve one slot.
        serve_while_frozen,
        /// A move's target takes in a copy for a move its placement does not show
        /// yet. Reading a placement from before the move then retires the rows it
        /// was just given, and the move finishes without them.
        receive_before_seeing_move,
        /// A server judges only whether another server holds its slot of the range:
        /// once the slot is removed nobody does, and it goes on answering for it
        /// from the rows it retired (a read-only replica's reads; a witness's votes,
        /// though only proposers counting the set before the removal ask for them,
        /// and *votes-by-the-current-voters* refuses those).
        serve_removed_slot,
        /// A voter takes votes asked by a proposer that counts a voter set older than
        /// the range's: a proposer two voter changes behind then gathers a quorum
        /// that need not meet the newest set's.
        count_stale_voters,
    }
}

/// What a server answers a request for one group's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serving {
    /// Serve it: this server holds the slot of the group's range at `epoch`.
    Serve {
        /// The group's range.
        range: RangeId,
        /// The range's epoch.
        epoch: Version,
    },
    /// Not here, as of the range's `epoch` in this server's placement: the caller
    /// refreshes its placement (if older) and routes again.
    WrongServer {
        /// The group's range, as this server knows it.
        range: RangeId,
        /// Its epoch there.
        epoch: Version,
    },
    /// The caller routed by a newer epoch than this server knows: the server reads the
    /// placement and judges again.
    Refresh {
        /// The epoch the caller routed by.
        asked: Version,
    },
    /// Frozen for a move: nothing of the range is answered until the move ends (then
    /// by this server or its target).
    Frozen {
        /// The range.
        range: RangeId,
        /// The move it froze for.
        move_id: Version,
    },
}

/// A key span `start..end` (`None`: to the end of the key space).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// The first key.
    pub start: Vec<u8>,
    /// The first key past it.
    pub end: Option<Vec<u8>>,
}

/// What changed for a server when it adopted a newer placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Freezes lifted (their move was aborted): persist the smaller set of freezes;
    /// the ranges are served again.
    pub unfrozen: Vec<RangeId>,
    /// Key spans this server neither holds nor is receiving any more (moved away, or a
    /// copy whose move was aborted): their rows may be deleted.
    pub retire: Vec<Span>,
}

/// One server's placement: the newest placement it has read, and the ranges it froze
/// for moves away from it (durable: `frozen` is persisted before a freeze is
/// acknowledged, and loaded again on restart).
///
/// Invariant *one-server-per-slot*: at any instant, for any group and slot, at most
/// one server answers [`Serving::Serve`]. A move's target serves only from the
/// placement that finished the move, which needs its source's durable freeze first
/// (*flip-after-freeze*); a frozen source serves none of the range, and lifts a freeze
/// only on reading a placement in which the move is gone and the slot is still its own
/// (aborted). Abort and finish are exclusive, being compare-and-set writes of one
/// stored placement.
#[derive(Debug, Clone)]
pub struct ServerPlacement {
    server: ServerId,
    view: Placement,
    frozen: BTreeMap<RangeId, Version>,
    bugs: PlacementBugs,
}

impl ServerPlacement {
    /// A server's placement, from the placement it read and the freezes it persisted
    /// (reconciled at once: freezes whose move has ended are dropped).
    pub fn new(
        server: ServerId,
        view: Placement,
        frozen: BTreeMap<RangeId, Version>,
        bugs: PlacementBugs,
    ) -> (Self, Observed) {
        let mut this = Self {
            server,
            view,
            frozen,
            bugs,
        };
        let unfrozen = this.reconcile_freezes();
        (
            this,
            Observed {
                unfrozen,
                retire: Vec::new(),
            },
        )
    }

    /// The server it belongs to.
    pub fn server(&self) -> ServerId {
        self.server
    }

    /// The placement it judges by.
    pub fn view(&self) -> &Placement {
        &self.view
    }

    /// The ranges it froze, with the move each froze for.
    pub fn frozen(&self) -> &BTreeMap<RangeId, Version> {
        &self.frozen
    }

    /// Whether it has `range` frozen for move `move_id`: what its host acknowledges to
    /// the operator's freeze (once persisted), and what a final copy needs.
    pub fn frozen_for(&self, range: RangeId, move_id: Version) -> bool {
        self.frozen.get(&range) == Some(&move_id)
    }

    /// Whether it answers a request for slot `replica` of the group whose key is `key`,
    /// routed by the caller at `asked` (the epoch of the range in the caller's
    /// placement; `None` when routed by key alone).
    pub fn judge(&self, key: &[u8], replica: ReplicaId, asked: Option<Version>) -> Serving {
        let range = self.view.range_of(key);
        if let Some(&move_id) = self.frozen.get(&range.id)
            && !self.bugs.serve_while_frozen()
        {
            return Serving::Frozen {
                range: range.id,
                move_id,
            };
        }
        match asked {
            Some(asked) if asked > range.epoch => return Serving::Refresh { asked },
            Some(asked) if asked < range.epoch => {
                return Serving::WrongServer {
                    range: range.id,
                    epoch: range.epoch,
                };
            }
            _ => {}
        }
        let removed_but_served = self.bugs.serve_removed_slot() && range.slot(replica).is_none();
        if removed_but_served
            || range
                .slot(replica)
                .is_some_and(|slot| slot.server == self.server)
        {
            Serving::Serve {
                range: range.id,
                epoch: range.epoch,
            }
        } else {
            Serving::WrongServer {
                range: range.id,
                epoch: range.epoch,
            }
        }
    }

    /// Whether a vote (a promise or an acceptance) asked for the group whose key is
    /// `key` by a proposer counting the voter set of version `voters_at` must be
    /// refused: the range's voter set changed after it. Returns the range and its
    /// epoch, for the refusal (`WrongServer`, which has the proposer read the
    /// placement).
    ///
    /// Invariant *votes-by-the-current-voters*: a server that read a voter change votes
    /// only for proposers that count the set after it. So once every voter of the new
    /// set read the change, a proposer still counting an older set gathers no quorum,
    /// and the set before the change takes part in no decision again: what lets a
    /// caught-up change be followed by another (`voters.rs`).
    pub fn stale_voters(&self, key: &[u8], voters_at: Version) -> Option<(RangeId, Version)> {
        let range = self.view.range_of(key);
        (range.voters_since > voters_at && !self.bugs.count_stale_voters())
            .then_some((range.id, range.epoch))
    }

    /// The key spans in which it serves slot `replica` — the ranges whose slot it holds
    /// and has not frozen — in key order, adjacent ones merged: where
    /// [`ServerPlacement::judge`] answers `Serve` to a request routed by key alone.
    pub fn served_spans(&self, replica: ReplicaId) -> Vec<Span> {
        spans_of(self.view.ranges().iter().filter(|range| {
            (!self.frozen.contains_key(&range.id) || self.bugs.serve_while_frozen())
                && range
                    .slot(replica)
                    .is_some_and(|slot| slot.server == self.server)
        }))
    }

    /// Freezes `range` for move `move_id` away from this server: from now on it serves
    /// none of the range until it reads a placement in which the move has ended. The
    /// driver persists [`ServerPlacement::frozen`] before it acknowledges the freeze,
    /// and only that acknowledgement lets the move be recorded frozen. Refused unless
    /// this server's placement shows the move, from this server (read the placement
    /// and ask again if it is older than the move).
    pub fn freeze(&mut self, range: RangeId, move_id: Version) -> Result<(), ChangeError> {
        self.moving_away(range, move_id)?;
        self.frozen.insert(range, move_id);
        Ok(())
    }

    /// Whether this server's placement shows move `move_id` of `range` away from this
    /// server: what it needs to freeze for the move, or to give a page of a copy for it
    /// (the final copy also needs the freeze: `Replica::final_copy_source`). Refused
    /// otherwise (read the placement and ask again if it is older than the move).
    pub fn moving_away(&self, range: RangeId, move_id: Version) -> Result<(), ChangeError> {
        let current = self
            .view
            .range(range)
            .ok_or(ChangeError::UnknownRange(range))?;
        match &current.moving {
            Some(m) if m.id == move_id && m.from == self.server => Ok(()),
            _ => Err(ChangeError::NoSuchMove { range, move_id }),
        }
    }

    /// Accepts a copy of `range` into this server for move `move_id`, naming the span
    /// to copy: refused unless this server's placement shows the move, to this server
    /// (read the placement and ask again if it is older than the move).
    ///
    /// Invariant *copy-after-seeing-the-move*: from the move's placement on, every
    /// placement this server can read keeps the span here until the move ends
    /// (moving to it, then held by it), so no retirement removes the copy before the
    /// move is over. A server with an older placement could still read one from
    /// before the move, in which it does not keep the span, and retire the copy.
    pub fn receive(&self, range: RangeId, move_id: Version) -> Result<Span, ChangeError> {
        let current = self
            .view
            .range(range)
            .ok_or(ChangeError::UnknownRange(range))?;
        let shown = current
            .moving
            .as_ref()
            .is_some_and(|m| m.id == move_id && m.to == self.server);
        if shown || self.bugs.receive_before_seeing_move() {
            Ok(Span {
                start: current.start.clone(),
                end: current.end.clone(),
            })
        } else {
            Err(ChangeError::NoSuchMove { range, move_id })
        }
    }

    /// Adopts `placement` if it is newer than the one it has (placements never go
    /// back), lifting the freezes of aborted moves and naming the spans to retire.
    pub fn observe(&mut self, placement: Placement) -> Observed {
        if placement.version() <= self.view.version() {
            return Observed::default();
        }
        let before = self.spans_kept(&self.view);
        self.view = placement;
        let after = self.spans_kept(&self.view);
        let unfrozen = self.reconcile_freezes();
        Observed {
            unfrozen,
            retire: uncovered(&before, &after),
        }
    }

    /// Drops the freezes whose move the placement no longer shows; returns those the
    /// server serves again (aborted: the slot is still its own).
    ///
    /// Invariant *frozen-once-recorded*: a move the placement records frozen freezes
    /// its source, whether or not the source still has the freeze it acknowledged (a
    /// server that lost its store lost its freezes too, and restarts on the newest
    /// placement).
    fn reconcile_freezes(&mut self) -> Vec<RangeId> {
        for range in self.view.ranges() {
            if let Some(m) = &range.moving
                && m.from == self.server
                && m.phase == MovePhase::Frozen
            {
                self.frozen.insert(range.id, m.id);
            }
        }
        let view = &self.view;
        let server = self.server;
        let mut unfrozen = Vec::new();
        self.frozen.retain(|&id, &mut move_id| {
            let Some(range) = view.range(id) else {
                return false;
            };
            if range.moving.as_ref().is_some_and(|m| m.id == move_id) {
                return true;
            }
            if range.slot_held_by(server).is_some() {
                unfrozen.push(id);
            }
            false
        });
        unfrozen
    }

    /// The key spans whose rows this server keeps under `placement`: the ranges it
    /// holds a slot of, and those being moved to it. In key order.
    fn spans_kept(&self, placement: &Placement) -> Vec<Span> {
        spans_of(placement.ranges().iter().filter(|r| keeps(r, self.server)))
    }
}

fn keeps(range: &Range, server: ServerId) -> bool {
    range.slot_held_by(server).is_some() || range.moving.as_ref().is_some_and(|m| m.to == server)
}

/// The spans of `ranges`, in key order, adjacent ones merged.
pub fn spans_of<'a>(ranges: impl IntoIterator<Item = &'a Range>) -> Vec<Span> {
    let mut out = Vec::new();
    for range in ranges {
        push_merged(
            &mut out,
            Span {
                start: range.start.clone(),
                end: range.end.clone(),
            },
        );
    }
    out
}

/// The parts of the spans `before` that no span of `after` covers (both sorted and
/// disjoint), adjacent parts merged.
pub fn uncovered(before: &[Span], after: &[Span]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for span in before {
        let mut cursor = Some(span.start.clone());
        for cover in after {
            let Some(at) = cursor.clone() else { break };
            if below_end(&cover.start, &span.end) && above(&cover.end, &at) {
                if cover.start > at {
                    push_merged(
                        &mut out,
                        Span {
                            start: at,
                            end: Some(cover.start.clone()),
                        },
                    );
                }
                cursor = match &cover.end {
                    None => None,
                    Some(end) if !below_end(end, &span.end) => None,
                    Some(end) => Some(end.clone()),
                };
            }
        }
        if let Some(at) = cursor {
            push_merged(
                &mut out,
                Span {
                    start: at,
                    end: span.end.clone(),
                },
            );
        }
    }
    out
}

/// Whether `key` lies before `end` (`None`: the end of the key space).
fn below_end(key: &[u8], end: &Option<Vec<u8>>) -> bool {
    end.as_ref().is_none_or(|end| key < end.as_slice())
}

/// Whether the span ending at `end` reaches past `key`.
fn above(end: &Option<Vec<u8>>, key: &[u8]) -> bool {
    below_end(key, end)
}

fn push_merged(out: &mut Vec<Span>, span: Span) {
    if let Some(last) = out.last_mut()
        && last.end.as_ref() == Some(&span.start)
    {
        last.end = span.end;
        return;
    }
    out.push(span);
}
