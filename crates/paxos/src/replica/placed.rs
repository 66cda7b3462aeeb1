//! A replica placed over many servers (docs/protocol.md, "Placement"): it answers only
//! for the groups of ranges its server holds, and keeps in memory only those.
//!
//! With a [`ServerPlacement`] ([`Replica::placed`]) every request naming a group is
//! judged first. A group whose range this server does not hold the slot of is refused
//! with [`ReplicaError::WrongServer`], one whose range it froze for a move away with
//! [`ReplicaError::Frozen`]; neither is loaded. When the placement changes
//! ([`Input::Placement`](super::Input::Placement)) the groups it no longer serves
//! leave memory at once — their held long polls answered with the refusal, their
//! sweep forgotten — so a copy that then replaces their rows (a move's target
//! receiving the range, or its source after an abort) or a retirement that deletes
//! them is never shadowed by a stale group in memory.
//!
//! A move's source freezes the range ([`Input::Freeze`](super::Input::Freeze)): its
//! groups leave memory the same way. Whenever the server's placement changes — a newer
//! placement read, a freeze made or lifted — the whole of it (the placement it judges
//! by and its freezes) is persisted, synced, in [`SERVER_PLACEMENT_ROW`] before
//! anything later in the batch leaves; so the host acknowledges a freeze to the
//! operator only after the sync, and a retirement is never durable without the
//! placement that caused it. [`load_server_placement`] reads it back at start.
//!
//! Invariants:
//! - *loaded-only-if-served*: every group in memory is one the placement lets this
//!   replica serve. Loads are answered within the step that asks
//!   ([`super::driver`]), so no load is in flight when the placement changes.
//! - *placement-never-goes-back*: a server restarts from the placement it last
//!   judged by, never an older one, even before it reaches the lock service. An older
//!   one could show a range it has since given away (frozen, finished, the freeze
//!   dropped and the rows retired) as its own, and it would serve the range again
//!   beside its new holder. (The view persisted with each freeze already prevents
//!   that; persisting every view also keeps a restart from judging by a placement
//!   older than any it acted on.) The host then feeds the newest placement it reads
//!   from the lock service, as any other.
//! - *arrivals-are-looked-after*: where the server starts serving (a move to it
//!   finished, or one away was aborted), it loads what it would load at start there
//!   (with a bounded cache, the groups with work left), so a received group's sweep
//!   does not wait for a request.

use std::collections::BTreeMap;

use megastore_placement::{
    FinalCopyRefused, Placement, PlacementBugs, RangeId, ServerId, ServerPlacement, Serving, Span,
    Version, uncovered,
};
use megastore_rowstore::{KeyRange, LATEST, RowMutation, RowRead, RowStoreError};
use megastore_types::EgId;

use super::{GroupSlot, Output, Replica, reply};
use crate::messages::{ReplicaError, ReplicaReply};

/// The system row that holds a placed server's placement: the placement it judges
/// by, and the ranges it froze for moves away, each with its move.
pub const SERVER_PLACEMENT_ROW: &[u8] = b"\xff\xffmegastore/placement/server";
const VIEW_COLUMN: &[u8] = b"view";
const FROZEN_COLUMN: &[u8] = b"frozen";

/// Why a server's stored placement could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ServerPlacementError {
    /// The store failed.
    #[error("reading the server's placement: {0}")]
    Store(#[from] RowStoreError),
    /// The row does not decode: the server must not guess what it holds or froze.
    #[error("the server's placement row ({row:?}) does not decode: {why}")]
    Corrupt {
        /// The row.
        row: String,
        /// What is wrong.
        why: String,
    },
}

/// The placement a placed server persisted (`None`: it never persisted one, so it
/// never judged by any but the one it is first given), for server `server`.
pub fn load_server_placement<R: RowRead>(
    store: &R,
    server: ServerId,
    bugs: PlacementBugs,
) -> Result<Option<ServerPlacement>, ServerPlacementError> {
    let Some(row) = store.read_row(SERVER_PLACEMENT_ROW, &KeyRange::all(), LATEST)? else {
        return Ok(None);
    };
    let corrupt = |why: String| ServerPlacementError::Corrupt {
        row: String::from_utf8_lossy(SERVER_PLACEMENT_ROW).into_owned(),
        why,
    };
    let column = |name: &[u8]| {
        row.value(name)
            .ok_or_else(|| corrupt(format!("no {} column", String::from_utf8_lossy(name))))
    };
    let view = Placement::decode(column(VIEW_COLUMN)?).map_err(|e| corrupt(e.to_string()))?;
    let frozen: BTreeMap<RangeId, Version> =
        postcard::from_bytes(column(FROZEN_COLUMN)?).map_err(|e| corrupt(e.to_string()))?;
    Ok(Some(ServerPlacement::new(server, view, frozen, bugs).0))
}

/// The mutation that stores `placement` as the server's.
fn placement_mutation(placement: &ServerPlacement) -> RowMutation {
    let frozen = postcard::to_allocvec(placement.frozen()).expect("a map of integers encodes");
    RowMutation::new(SERVER_PLACEMENT_ROW.to_vec())
        .set(VIEW_COLUMN.to_vec(), 0, placement.view().encode())
        .set(FROZEN_COLUMN.to_vec(), 0, frozen)
}

impl Replica {
    /// This replica, answering only for the ranges `placement` puts its slot on its
    /// server (the placement the server read, and the freezes it persisted).
    pub fn placed(mut self, placement: ServerPlacement) -> Self {
        if let Some(sweeper) = &mut self.sweeper {
            sweeper.observe_placement(placement.view().clone());
        }
        self.placement = Some(placement);
        let mut out = Vec::new();
        self.forget_unserved(&mut out);
        debug_assert!(out.is_empty(), "a new replica holds no group");
        self
    }

    /// The placement the replica's own proposer (its sweep) routes coordinator requests
    /// by: the server's, or a newer one the sweep read during an invalidation step.
    pub fn routing_placement(&self) -> Option<&Placement> {
        self.sweeper
            .as_ref()
            .and_then(|s| s.placement())
            .or_else(|| self.placement.as_ref().map(ServerPlacement::view))
    }

    /// The server's placement, if the replica is placed.
    pub fn placement(&self) -> Option<&ServerPlacement> {
        self.placement.as_ref()
    }

    /// Whether the operator may take the final copy of `range` for move `move_id`
    /// from this server, its source: only while it is frozen for the move (so the
    /// copy holds everything it will ever hold of the range), and only if it kept its
    /// store (*final-copy-from-a-kept-store*: a rejoining server's rows are not what
    /// its slot voted, and the target would vote as if they were).
    pub fn final_copy_source(
        &self,
        range: RangeId,
        move_id: Version,
    ) -> Result<(), FinalCopyRefused> {
        if self.config.rejoining {
            return Err(FinalCopyRefused::StoreLost);
        }
        let frozen = self
            .placement
            .as_ref()
            .is_some_and(|p| p.frozen_for(range, move_id));
        if frozen {
            Ok(())
        } else {
            Err(FinalCopyRefused::NotFrozen)
        }
    }

    /// Why this replica does not serve `eg` (`None`: it does, or it is not placed).
    pub(super) fn refusal(&self, eg: &EgId) -> Option<ReplicaError> {
        let placement = self.placement.as_ref()?;
        match placement.judge(&eg.0, self.me.id, None) {
            Serving::Serve { .. } => None,
            Serving::WrongServer { range, epoch } => {
                Some(ReplicaError::WrongServer { range, epoch })
            }
            Serving::Frozen { range, move_id } => Some(ReplicaError::Frozen { range, move_id }),
            // Only a request routed by an epoch is told to refresh; none is yet.
            Serving::Refresh { .. } => {
                let range = placement.view().range_of(&eg.0);
                Some(ReplicaError::WrongServer {
                    range: range.id,
                    epoch: range.epoch,
                })
            }
        }
    }

    /// The server read a newer placement: groups it no longer serves leave memory,
    /// freezes of ended moves are dropped, and the spans it neither holds nor
    /// receives any more are retired. Where it starts serving (a move to it finished,
    /// or a move away was aborted) it loads what needs looking after as at start: the
    /// groups the start listing finds there (*arrivals-are-looked-after*), so a
    /// received group with work left is swept without waiting for a request.
    pub(super) fn observe_placement(&mut self, placement: Placement, out: &mut Vec<Output>) {
        let me = self.me.id;
        let Some(server) = &mut self.placement else {
            return;
        };
        let before = server.view().version();
        let served_before = server.served_spans(me);
        if let Some(sweeper) = &mut self.sweeper {
            sweeper.observe_placement(placement.clone());
        }
        let seen = server.observe(placement);
        if server.view().version() != before {
            out.push(Output::PersistPlacement {
                mutation: placement_mutation(server),
            });
        }
        let arrived = !uncovered(&server.served_spans(me), &served_before).is_empty();
        self.forget_ended_moves();
        self.forget_unserved(out);
        if arrived && !self.config.bugs.ignore_arrivals() {
            // From the first group: the listing skips those served elsewhere and those
            // already in memory.
            out.push(Output::ListGroups {
                which: self.start_list(),
                after: None,
                limit: super::START_PAGE,
                for_peer: None,
            });
        }
        out.extend(seen.retire.into_iter().map(|span| Output::Retire {
            groups: span_keys(span),
        }));
    }

    /// The operator asks this server, a move's source, to freeze `range` for
    /// `move_id`. Refused (nothing changes) unless its placement shows the move, from
    /// it. Else the range's groups leave memory and the placement is persisted; the
    /// host acknowledges once [`ServerPlacement::frozen`] holds the move and the
    /// batch is released (so synced).
    pub(super) fn freeze(&mut self, range: RangeId, move_id: Version, out: &mut Vec<Output>) {
        let Some(server) = &mut self.placement else {
            return;
        };
        if server.freeze(range, move_id).is_err() {
            return;
        }
        out.push(Output::PersistPlacement {
            mutation: placement_mutation(server),
        });
        self.forget_unserved(out);
    }

    /// Drops from memory every group this replica does not serve.
    fn forget_unserved(&mut self, out: &mut Vec<Output>) {
        if self.config.bugs.keep_unserved_groups() {
            return;
        }
        let unserved: Vec<(EgId, ReplicaError)> = self
            .groups
            .keys()
            .filter_map(|eg| self.refusal(eg).map(|why| (eg.clone(), why)))
            .collect();
        for (eg, why) in unserved {
            self.forget(&eg, why, out);
        }
    }

    /// Drops `eg` from memory with everything kept about it: requests waiting for its
    /// load and held long polls are answered with `why`. Nothing is written: its rows
    /// (open index listing included) stay for the range's next holder or retirement.
    fn forget(&mut self, eg: &EgId, why: ReplicaError, out: &mut Vec<Output>) {
        if let Some(GroupSlot::Loading(waiting)) = self.groups.remove(eg) {
            for (from, request) in waiting {
                let error = why.clone();
                reply(
                    out,
                    from,
                    ReplicaReply::Error {
                        id: request.id(),
                        error,
                    },
                );
            }
        }
        for awaiter in self.awaiting.release(eg) {
            let error = why.clone();
            reply(
                out,
                awaiter.from,
                ReplicaReply::Error {
                    id: awaiter.id,
                    error,
                },
            );
        }
        self.recency.remove(eg);
        self.open_listed.remove(eg);
        self.unregistered.remove(eg);
        self.probe_when_loaded.remove(eg);
        self.probe_if_new.remove(eg);
        self.to_clear.retain(|g| g != eg);
        if let Some(sweeper) = &mut self.sweeper {
            sweeper.forget(eg);
        }
    }
}

/// A placement span as the row store's key range.
pub fn span_keys(span: Span) -> KeyRange {
    KeyRange {
        start: span.start,
        end: span.end,
    }
}
