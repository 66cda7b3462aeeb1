//! The names placement gives: servers and ranges.

use std::fmt;

use megastore_types::SiteId;
use serde::{Deserialize, Serialize};

/// A replica server: one process (with its coordinator) at one site, holding the
/// ranges placed on it. A range's slot (a [`megastore_types::ReplicaId`], the voter
/// Paxos knows) is held by one server at a time; a move hands it to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServerId(pub u16);

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server-{}", self.0)
    }
}

/// A range of entity groups. Ids are never reused: a split keeps the left half's id
/// and gives the right half a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RangeId(pub u64);

impl fmt::Display for RangeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "range-{}", self.0)
    }
}

/// A version of the placement. Every change makes the next one; a range's *epoch* is
/// the version at which its record last changed, so epochs only grow.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Version(pub u64);

impl Version {
    /// Whether this is version 0 (before any placement was stored).
    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// One replica server of the deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    /// Its id.
    pub id: ServerId,
    /// Where it runs.
    pub site: SiteId,
}
