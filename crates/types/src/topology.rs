use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::ids::{ReplicaId, SiteId};

/// What a replica does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaKind {
    /// Votes, applies, has a coordinator, serves every kind of read.
    Full,
    /// Votes and keeps the log; no data, no coordinator, serves no reads.
    Witness,
    /// Does not vote; applies what it learns; serves snapshot reads.
    ReadOnly,
}

impl std::fmt::Display for ReplicaKind {
    /// As a config file spells it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReplicaKind::Full => "full",
            ReplicaKind::Witness => "witness",
            ReplicaKind::ReadOnly => "read-only",
        })
    }
}

/// One replica of the deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaInfo {
    /// Its id.
    pub id: ReplicaId,
    /// Its kind.
    pub kind: ReplicaKind,
    /// Where it runs.
    pub site: SiteId,
}

/// Why a topology is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// Two replicas share an id.
    DuplicateReplica(ReplicaId),
    /// No full replica: nothing could serve reads or apply.
    NoFullReplica,
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopologyError::DuplicateReplica(r) => write!(f, "replica id {} is used twice", r.0),
            TopologyError::NoFullReplica => write!(f, "a topology needs at least one full replica"),
        }
    }
}

impl std::error::Error for TopologyError {}

/// The replicas of a deployment (every entity group is replicated on all of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    replicas: Vec<ReplicaInfo>,
}

impl Topology {
    /// A topology of these replicas.
    pub fn new(replicas: Vec<ReplicaInfo>) -> Result<Self, TopologyError> {
        let mut seen = BTreeSet::new();
        for r in &replicas {
            if !seen.insert(r.id) {
                return Err(TopologyError::DuplicateReplica(r.id));
            }
        }
        if !replicas.iter().any(|r| r.kind == ReplicaKind::Full) {
            return Err(TopologyError::NoFullReplica);
        }
        Ok(Self { replicas })
    }

    /// Every replica.
    pub fn replicas(&self) -> &[ReplicaInfo] {
        &self.replicas
    }

    /// The replica with id `id`.
    pub fn replica(&self, id: ReplicaId) -> Option<&ReplicaInfo> {
        self.replicas.iter().find(|r| r.id == id)
    }

    /// Its kind, if it exists.
    pub fn kind(&self, id: ReplicaId) -> Option<ReplicaKind> {
        self.replica(id).map(|r| r.kind)
    }

    /// The voters: full replicas and witnesses.
    pub fn voters(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.replicas
            .iter()
            .filter(|r| r.kind != ReplicaKind::ReadOnly)
            .map(|r| r.id)
    }

    /// The full replicas (each with a coordinator).
    pub fn full_replicas(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        self.of_kind(ReplicaKind::Full)
    }

    /// The replicas of one kind.
    pub fn of_kind(&self, kind: ReplicaKind) -> impl Iterator<Item = ReplicaId> + '_ {
        self.replicas
            .iter()
            .filter(move |r| r.kind == kind)
            .map(|r| r.id)
    }

    /// How many voters make a majority.
    pub fn majority(&self) -> usize {
        self.voters().count() / 2 + 1
    }

    /// Whether `id` votes.
    pub fn is_voter(&self, id: ReplicaId) -> bool {
        self.kind(id).is_some_and(|k| k != ReplicaKind::ReadOnly)
    }

    /// The replicas at `site`.
    pub fn at_site(&self, site: SiteId) -> impl Iterator<Item = &ReplicaInfo> + '_ {
        self.replicas.iter().filter(move |r| r.site == site)
    }
}
