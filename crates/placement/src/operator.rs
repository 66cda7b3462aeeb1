//! The operator's side of a move (docs/protocol.md, "Placement"): what to do next,
//! decided from the stored placement and what this operator has done since it last
//! started. Nothing else is remembered, so an operator that crashes and starts again
//! (or another one) resumes the move from the placement alone: the copies and the
//! freeze are safe to repeat.

use megastore_types::{ReplicaId, ReplicaKind};

use crate::error::ChangeError;
use crate::ids::{RangeId, ServerId, Version};
use crate::map::Placement;
use crate::range::MovePhase;
use crate::serving::Span;

megastore_types::bug_knobs! {
    /// Deliberate mistakes of the operator that the placement tests must catch. All
    /// off in every real deployment.
    pub struct OperatorBugs {
        /// Finish as soon as the source froze, without copying what was written
        /// between the bulk copy and the freeze: those writes are lost.
        finish_without_final_copy,
        /// Record the move frozen without asking the source's coordinator whether it
        /// read the move: a coordinator behind it goes on acknowledging invalidations
        /// for the range, which the writers then count though the target will serve.
        record_frozen_unfenced,
        /// Remove a leaving full replica's slot without waiting for its coordinators'
        /// fence (`Placement::removal_fence`): a coordinator behind the removal goes on
        /// vouching for the range, and writers that count the set without it no longer
        /// invalidate it.
        remove_unfenced,
    }
}

/// The move an operator was asked for: slot `replica` of `range` to server `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveRequest {
    /// The range.
    pub range: RangeId,
    /// Its slot that moves.
    pub replica: ReplicaId,
    /// The server that takes it over.
    pub to: ServerId,
}

/// What one operator did since it (re)started, for the move it carries out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The move it is carrying out, once begun or found under way.
    pub move_id: Option<Version>,
    /// The target copied the range while the source still served it.
    pub bulk_copied: bool,
    /// The source answered that it froze the range.
    pub froze: bool,
    /// The source's coordinator answered that it has read the move, so it vouches and
    /// acknowledges invalidations for none of the range.
    pub fenced: bool,
    /// The target copied the frozen range: everything the source holds of it.
    pub final_copied: bool,
    /// The operator gives the move up (a copy keeps failing, or it was asked to).
    pub giving_up: bool,
}

impl Progress {
    /// The copy `next_step` asked for is done (`last`: the copy of the frozen range).
    pub fn copied(&mut self, last: bool) {
        if last {
            self.final_copied = true;
        } else {
            self.bulk_copied = true;
        }
    }

    /// The source refused the final copy: freeze it again first, or give the move
    /// up if the source can never give a copy.
    pub fn final_copy_refused(&mut self, why: FinalCopyRefused) {
        match why {
            FinalCopyRefused::NotFrozen => self.froze = false,
            FinalCopyRefused::StoreLost => self.giving_up = true,
        }
    }
}

/// Why a move's source refuses to give the final copy (the copy that makes the target
/// exactly the source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FinalCopyRefused {
    /// It is not frozen for the move: it never froze for it, or it lost the freeze it
    /// acknowledged (with its store) and has not read the move recorded frozen yet.
    /// Writes it takes meanwhile would be missing from the copy, so only a copy taken
    /// while it is frozen is final.
    #[error("the source is not frozen for the move")]
    NotFrozen,
    /// It lost its store since it last served (it is rejoining): what it holds of the
    /// range is not what its slot voted, and a target given it would vote as if it
    /// were. The move can only be given up; the source keeps the slot and rejoins.
    #[error("the source lost its store and is rejoining")]
    StoreLost,
}

/// The next thing the operator does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorStep {
    /// Store `next` in the lock service if the stored placement is still `expected`;
    /// then read the placement again, whether or not the write won.
    Write {
        /// The version read.
        expected: Version,
        /// The placement to store.
        next: Placement,
    },
    /// Have `to` copy every row of `span` from `from` (the whole group state: data,
    /// log, promises, grants, marks), replacing what it holds there. The target
    /// first checks that its placement shows the move ([`ServerPlacement::receive`]),
    /// reading the placement if it does not. `last`: `from` is frozen, so the copy is
    /// final.
    ///
    /// [`ServerPlacement::receive`]: crate::ServerPlacement::receive
    Copy {
        /// The source.
        from: ServerId,
        /// The target.
        to: ServerId,
        /// The range.
        range: RangeId,
        /// The move the copy is for.
        move_id: Version,
        /// The range's keys.
        span: Span,
        /// Whether this is the copy of the frozen range.
        last: bool,
    },
    /// Ask `server`, the move's source, to freeze `range` for `move_id` (it reads the
    /// placement first if it has not seen the move).
    Freeze {
        /// The source.
        server: ServerId,
        /// The range.
        range: RangeId,
        /// The move.
        move_id: Version,
    },
    /// (A full replica's slot only.) Ask the coordinator of `server`, the move's
    /// source, whether it has read the placement that began `move_id` (it then vouches and acknowledges invalidations
    /// for none of the range); ask again until it has. A move is recorded frozen only
    /// then, so no writer can finish its invalidation step at the source's coordinator
    /// once the target may serve.
    Fence {
        /// The source.
        server: ServerId,
        /// The move.
        move_id: Version,
    },
    /// The move is over.
    Done(MoveEnd),
}

/// How a move ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveEnd {
    /// The target holds the slot, from `epoch` on.
    Finished {
        /// The range's new epoch.
        epoch: Version,
    },
    /// Given up: the source holds the slot still, and serves it again.
    Aborted,
    /// Not begun: the placement refuses it, naming why.
    Refused(ChangeError),
}

/// What the operator does next for `request`, given the stored `placement` and its
/// `progress` (updated by the caller as each step completes).
///
/// Invariant *moves-keep-writes*: a move finishes only after a copy made while the
/// source was frozen, so the target starts with every write the source acknowledged
/// (the source serves nothing of the range from its freeze on).
pub fn next_step(
    placement: &Placement,
    request: &MoveRequest,
    progress: &mut Progress,
    bugs: OperatorBugs,
) -> OperatorStep {
    let write = |next: Result<Placement, ChangeError>| match next {
        Ok(next) => OperatorStep::Write {
            expected: placement.version(),
            next,
        },
        Err(refused) => OperatorStep::Done(MoveEnd::Refused(refused)),
    };
    let Some(range) = placement.range(request.range) else {
        return OperatorStep::Done(MoveEnd::Refused(ChangeError::UnknownRange(request.range)));
    };
    let Some(moving) = &range.moving else {
        // No move under way: not begun yet, or over (finished or aborted).
        return match progress.move_id {
            None if progress.giving_up => OperatorStep::Done(MoveEnd::Aborted),
            // Already there: a move made before this operator restarted.
            None if range
                .slot(request.replica)
                .is_some_and(|s| s.server == request.to) =>
            {
                OperatorStep::Done(MoveEnd::Finished { epoch: range.epoch })
            }
            None => write(placement.begin_move(request.range, request.replica, request.to)),
            Some(_) => match range.slot(request.replica) {
                Some(slot) if slot.server == request.to => {
                    OperatorStep::Done(MoveEnd::Finished { epoch: range.epoch })
                }
                _ => OperatorStep::Done(MoveEnd::Aborted),
            },
        };
    };
    let ours = moving.replica == request.replica && moving.to == request.to;
    if !ours || progress.move_id.is_some_and(|id| id != moving.id) {
        return OperatorStep::Done(MoveEnd::Refused(ChangeError::Moving {
            range: range.id,
            move_id: moving.id,
        }));
    }
    if progress.move_id != Some(moving.id) {
        // Found under way (begun by this operator before it restarted, or by
        // another): carried on from what the placement says, every step repeated.
        *progress = Progress {
            move_id: Some(moving.id),
            giving_up: progress.giving_up,
            ..Progress::default()
        };
    }
    if progress.giving_up {
        return write(placement.abort_move(range.id, moving.id));
    }
    let moves_a_full_slot = range
        .slot(moving.replica)
        .is_some_and(|slot| slot.kind == ReplicaKind::Full);
    let copy = |last| OperatorStep::Copy {
        from: moving.from,
        to: moving.to,
        range: range.id,
        move_id: moving.id,
        span: Span {
            start: range.start.clone(),
            end: range.end.clone(),
        },
        last,
    };
    match moving.phase {
        MovePhase::Copying if !progress.bulk_copied => copy(false),
        MovePhase::Copying if !progress.froze => OperatorStep::Freeze {
            server: moving.from,
            range: range.id,
            move_id: moving.id,
        },
        // Only a full replica has a coordinator to fence: a witness or read-only slot
        // is vouched for by no one.
        MovePhase::Copying
            if !progress.fenced && !bugs.record_frozen_unfenced() && moves_a_full_slot =>
        {
            OperatorStep::Fence {
                server: moving.from,
                move_id: moving.id,
            }
        }
        MovePhase::Copying => write(placement.record_frozen(range.id, moving.id)),
        // The final copy is taken from a source frozen now. An operator that restarted
        // does not know whether the source froze, and a source that lost its store
        // lost its freeze (*frozen-once-recorded* restores it once it reads this
        // placement): the source is asked (again) first.
        MovePhase::Frozen
            if !progress.final_copied && !bugs.finish_without_final_copy() && !progress.froze =>
        {
            OperatorStep::Freeze {
                server: moving.from,
                range: range.id,
                move_id: moving.id,
            }
        }
        MovePhase::Frozen if !progress.final_copied && !bugs.finish_without_final_copy() => {
            copy(true)
        }
        MovePhase::Frozen => write(placement.finish_move(range.id, moving.id)),
    }
}
