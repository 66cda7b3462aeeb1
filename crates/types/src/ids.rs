use std::fmt;

use serde::{Deserialize, Serialize};

/// A replica (one per site and kind in a deployment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaId(pub u16);

/// A client of the database (an application server's client library).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientId(pub u32);

/// A node of the lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockNodeId(pub u16);

/// A site (datacenter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SiteId(pub u16);

/// Any process that sends or receives protocol messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum NodeId {
    /// A replica server.
    Replica(ReplicaId),
    /// The coordinator beside a full replica.
    Coordinator(ReplicaId),
    /// A client library instance.
    Client(ClientId),
    /// A lock service node.
    LockNode(LockNodeId),
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeId::Replica(r) => write!(f, "replica-{}", r.0),
            NodeId::Coordinator(r) => write!(f, "coordinator-{}", r.0),
            NodeId::Client(c) => write!(f, "client-{}", c.0),
            NodeId::LockNode(l) => write!(f, "lock-{}", l.0),
        }
    }
}

/// Who proposes a ballot: a client writing or reading, or a replica finishing an
/// abandoned position. Distinct for every proposer, so ballots never collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProposerId(pub u64);

impl ProposerId {
    /// The proposer id of a client.
    pub fn client(c: ClientId) -> Self {
        ProposerId(1 << 32 | u64::from(c.0))
    }

    /// The proposer id of a replica's sweep.
    pub fn replica(r: ReplicaId) -> Self {
        ProposerId(2 << 32 | u64::from(r.0))
    }
}

/// A log position of one entity group, from 1. The entry at position `p` is applied
/// at timestamp `p`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Position(pub u64);

impl Position {
    /// "Nothing yet": below the first position.
    pub const NONE: Position = Position(0);

    /// The next position.
    pub fn next(self) -> Position {
        Position(self.0 + 1)
    }

    /// The previous position (saturating at [`Position::NONE`]).
    pub fn prev(self) -> Position {
        Position(self.0.saturating_sub(1))
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}

/// A Paxos proposal number: ordered by round, then proposer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ballot {
    /// The round; 0 only for [`Ballot::ZERO`].
    pub round: u64,
    /// Who proposes it.
    pub proposer: ProposerId,
}

impl Ballot {
    /// The fast-path ballot: granted by the position leader to one writer only.
    pub const ZERO: Ballot = Ballot {
        round: 0,
        proposer: ProposerId(0),
    };

    /// Whether this is the fast-path ballot.
    pub fn is_zero(self) -> bool {
        self == Ballot::ZERO
    }

    /// The smallest ballot of `proposer` above `above`.
    pub fn next_above(above: Ballot, proposer: ProposerId) -> Ballot {
        let round = if proposer > above.proposer {
            above.round.max(1)
        } else {
            above.round + 1
        };
        Ballot { round, proposer }
    }
}

impl fmt::Display for Ballot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            write!(f, "b0")
        } else {
            write!(f, "b{}.{:x}", self.round, self.proposer.0)
        }
    }
}

/// An entity group: its id in the row key space, a self-delimiting prefix shared by
/// all its rows and by no other group's (see the schema crate's `keyspace`), which also
/// names its root row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EgId(pub Vec<u8>);

impl fmt::Display for EgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "eg:{}", self.0.escape_ascii())
    }
}

/// A coordinator incarnation: the sequencer of the lock it holds. Changes on every
/// restart, lock loss and re-acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Epoch(pub u64);

/// A transaction: unique per client, so a retry can be recognised in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId {
    /// The client that started it.
    pub client: ClientId,
    /// The client's sequence number for it.
    pub seq: u64,
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "txn-{}.{}", self.client.0, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_ballot_is_above_and_never_zero() {
        let a = ProposerId::client(ClientId(1));
        let b = ProposerId::replica(ReplicaId(1));
        for above in [
            Ballot::ZERO,
            Ballot {
                round: 3,
                proposer: a,
            },
            Ballot {
                round: 3,
                proposer: b,
            },
        ] {
            for p in [a, b] {
                let next = Ballot::next_above(above, p);
                assert!(
                    next > above && !next.is_zero() && next.proposer == p,
                    "{above} {next}"
                );
            }
        }
    }
}
