//! One range of entity groups and who holds it.

use megastore_types::{ReplicaId, ReplicaKind, SiteId};
use serde::{Deserialize, Serialize};

use crate::ids::{RangeId, ServerId, Version};

/// A contiguous range of encoded group keys (`EgId` bytes), `start..end`, and its
/// replica set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// Its id.
    pub id: RangeId,
    /// The first group key in it; the first range starts at the empty key.
    pub start: Vec<u8>,
    /// The first key past it; `None` for the last range (the end of the key space).
    pub end: Option<Vec<u8>>,
    /// The placement version at which this record last changed who serves it, or its
    /// bounds. A request routed by an older epoch is answered `WrongServer`.
    pub epoch: Version,
    /// Its replica set: one slot per voter or read-only replica of its groups' Paxos
    /// logs, each held by one server at the slot's site.
    pub slots: Vec<Slot>,
    /// A move of one slot to another server, under way.
    pub moving: Option<Move>,
    /// The placement version at which this range's voter set last changed (a voter
    /// joined, or one was removed), until that change is caught up. Another voter
    /// change of the range waits until every group's log is held by a majority of the
    /// voters after this one ([`crate::Placement::record_caught_up`]; docs/protocol.md,
    /// "Voter changes").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voters_changed: Option<Version>,
    /// The placement version at which this range's voter set became what it is (0:
    /// never changed). Proposers send it with every vote they ask for, and a voter
    /// refuses a vote asked by an older one (*votes-by-the-current-voters*,
    /// [`crate::ServerPlacement::stale_voters`]): so once every voter read the change,
    /// no proposer still counting the set before it gathers a quorum.
    #[serde(default, skip_serializing_if = "Version::is_zero")]
    pub voters_since: Version,
    /// A full replica's slot on its way out ([`crate::Placement::begin_removal`]): its
    /// coordinator stops vouching for the range, and the slot is removed only once
    /// that coordinator is fenced ([`crate::Placement::removal_fence`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaving: Option<Leaving>,
}

impl Range {
    /// Whether `key` falls in this range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_ref().is_none_or(|end| key < end.as_slice())
    }

    /// The slot `replica`, if the range has one.
    pub fn slot(&self, replica: ReplicaId) -> Option<&Slot> {
        self.slots.iter().find(|s| s.replica == replica)
    }

    /// The slot `server` holds, if any (a server holds at most one slot of a range).
    pub fn slot_held_by(&self, server: ServerId) -> Option<&Slot> {
        self.slots.iter().find(|s| s.server == server)
    }
}

/// One replica of a range's groups: the voter (or read-only replica) the groups' Paxos
/// logs know as `replica`, and the server that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// The replica id the protocol uses (ballots, `next_leader`, coordinators' names).
    /// A move keeps it: only the server holding it changes.
    pub replica: ReplicaId,
    /// Its site.
    pub site: SiteId,
    /// What it does.
    pub kind: ReplicaKind,
    /// The server that holds it, at `site`.
    pub server: ServerId,
}

/// A full replica's slot whose removal from a range has begun (docs/protocol.md,
/// "Removing a full replica"). The replica still votes and writers still invalidate
/// its coordinator, which vouches for none of the range from the placement that began
/// this on; so once that coordinator has read it (or lost its lock since), nothing
/// read at the replica can be stale, and the slot may go like a witness's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaving {
    /// The slot leaving: a full replica's.
    pub replica: ReplicaId,
    /// The placement version that began it: the version its coordinator must have
    /// read.
    pub since: Version,
}

/// A slot on its way from one server to another (docs/protocol.md, "Placement").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The placement version that began it: names this move, so a server frozen for
    /// it can tell it from a later move of the same range.
    pub id: Version,
    /// The slot that moves.
    pub replica: ReplicaId,
    /// Its server until the move finishes.
    pub from: ServerId,
    /// Its server after.
    pub to: ServerId,
    /// How far the move got.
    pub phase: MovePhase,
}

/// The phases of a move that the placement records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MovePhase {
    /// `to` copies the range while `from` still serves it.
    Copying,
    /// `from` answered that it froze the range durably: it serves none of it until it
    /// sees the move end. Only now may the move finish (*flip-after-freeze*).
    Frozen,
}
