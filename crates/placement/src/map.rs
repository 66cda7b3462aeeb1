//! The placement: every range of groups, its replica set and the servers, as one
//! versioned value (kept in the lock service as one small file).

use std::collections::{BTreeMap, BTreeSet};

use megastore_types::{ReplicaId, ReplicaKind, Topology};
use serde::{Deserialize, Serialize};

use crate::error::{ChangeError, Violation};
use crate::ids::{RangeId, Server, ServerId, Version};
use crate::range::{Range, Slot};

/// Every range of entity groups and where it lives, at one version. Only made by
/// [`Placement::initial`], by the changes in `change.rs` and by decoding; each checks
/// every invariant ([`Placement::check`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Unchecked")]
pub struct Placement {
    pub(crate) version: Version,
    pub(crate) servers: BTreeMap<ServerId, Server>,
    /// Sorted by `start`; they partition the key space.
    pub(crate) ranges: Vec<Range>,
    /// The id the next new range gets.
    pub(crate) next_range: RangeId,
    /// Replicas removed from every range ([`Placement::remove_replica`]): never placed
    /// again: a join of one changes nothing (*removed-stay-out*).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) removed: BTreeSet<ReplicaId>,
}

/// A placement as decoded, before its invariants are checked.
#[derive(Deserialize)]
struct Unchecked {
    version: Version,
    servers: BTreeMap<ServerId, Server>,
    ranges: Vec<Range>,
    next_range: RangeId,
    #[serde(default)]
    removed: BTreeSet<ReplicaId>,
}

impl TryFrom<Unchecked> for Placement {
    type Error = Violation;

    fn try_from(u: Unchecked) -> Result<Self, Violation> {
        let placement = Placement {
            version: u.version,
            servers: u.servers,
            ranges: u.ranges,
            next_range: u.next_range,
            removed: u.removed,
        };
        placement.check()?;
        Ok(placement)
    }
}

/// How far the default placement's split points reach into a group key: its first two
/// bytes, which a `SCATTER` root fills with a hash.
const SPLIT_PREFIX_VALUES: u32 = 1 << 16;

impl Placement {
    /// The default placement: `ranges` ranges of equal share of the keys' first two
    /// bytes, each with one slot per replica of `slots` (the voters and read-only
    /// replicas every group has), each slot held by a server of its site, round robin
    /// over the site's servers so the ranges spread evenly.
    pub fn initial(
        servers: Vec<Server>,
        slots: &Topology,
        ranges: u32,
    ) -> Result<Placement, ChangeError> {
        if ranges == 0 || ranges > SPLIT_PREFIX_VALUES {
            return Err(ChangeError::Initial(format!(
                "the number of ranges must be 1 to {SPLIT_PREFIX_VALUES}, not {ranges}"
            )));
        }
        let mut by_id = BTreeMap::new();
        for server in servers {
            let id = server.id;
            if by_id.insert(id, server).is_some() {
                return Err(ChangeError::DuplicateServer(id));
            }
        }
        let mut by_site: BTreeMap<_, Vec<ServerId>> = BTreeMap::new();
        for server in by_id.values() {
            by_site.entry(server.site).or_default().push(server.id);
        }
        let mut placed = Vec::with_capacity(ranges as usize);
        for index in 0..ranges {
            let bound = |i: u32| (i < ranges).then(|| split_point(i, ranges));
            let start = if index == 0 {
                Vec::new()
            } else {
                split_point(index, ranges)
            };
            let mut taken_at_site: BTreeMap<_, usize> = BTreeMap::new();
            let mut range_slots = Vec::new();
            for replica in slots.replicas() {
                let candidates = by_site.get(&replica.site).map_or(&[][..], Vec::as_slice);
                let nth = taken_at_site.entry(replica.site).or_default();
                if *nth >= candidates.len() {
                    return Err(ChangeError::Initial(format!(
                        "site {} has {} server(s) for {} replica(s)",
                        replica.site.0,
                        candidates.len(),
                        slots.at_site(replica.site).count()
                    )));
                }
                let server = candidates[(index as usize + *nth) % candidates.len()];
                *nth += 1;
                range_slots.push(Slot {
                    replica: replica.id,
                    site: replica.site,
                    kind: replica.kind,
                    server,
                });
            }
            placed.push(Range {
                id: RangeId(u64::from(index)),
                start,
                end: bound(index + 1),
                epoch: Version(1),
                slots: range_slots,
                moving: None,
                voters_changed: None,
                voters_since: Version(0),
                leaving: None,
            });
        }
        let placement = Placement {
            version: Version(1),
            servers: by_id,
            ranges: placed,
            next_range: RangeId(u64::from(ranges)),
            removed: BTreeSet::new(),
        };
        placement.assert_checked();
        Ok(placement)
    }

    /// The placement of a cluster that runs one server per replica of `topology`
    /// (every cluster today: the server of replica `r` is `ServerId(r)`): one range,
    /// the whole key space, each slot on its own replica's server. What the lock
    /// service holds until an operator first changes it.
    pub fn one_server_per_replica(topology: &Topology) -> Placement {
        let server_of = |r: &megastore_types::ReplicaInfo| ServerId(r.id.0);
        let placement = Placement {
            version: Version(1),
            servers: topology
                .replicas()
                .iter()
                .map(|r| {
                    let id = server_of(r);
                    (id, Server { id, site: r.site })
                })
                .collect(),
            ranges: vec![Range {
                id: RangeId(0),
                start: Vec::new(),
                end: None,
                epoch: Version(1),
                slots: topology
                    .replicas()
                    .iter()
                    .map(|r| Slot {
                        replica: r.id,
                        site: r.site,
                        kind: r.kind,
                        server: server_of(r),
                    })
                    .collect(),
                moving: None,
                voters_changed: None,
                voters_since: Version(0),
                leaving: None,
            }],
            next_range: RangeId(1),
            removed: BTreeSet::new(),
        };
        placement.assert_checked();
        placement
    }

    /// The placement of a cluster of `topology` whose lock-service file
    /// ([`crate::PLACEMENT_FILE`]) holds `contents`: decoded, its invariants checked;
    /// no file means nothing was changed yet, so the one-server-per-replica default.
    pub fn stored(contents: Option<&[u8]>, topology: &Topology) -> Result<Placement, DecodeError> {
        match contents {
            None => Ok(Placement::one_server_per_replica(topology)),
            Some(bytes) => Placement::decode(bytes),
        }
    }

    /// Its version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Every range, in key order.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// Every server.
    pub fn servers(&self) -> impl Iterator<Item = &Server> {
        self.servers.values()
    }

    /// The server `id`.
    pub fn server(&self, id: ServerId) -> Option<&Server> {
        self.servers.get(&id)
    }

    /// The servers holding slot `replica` in some range, in id order: between them
    /// they hold every group of that replica (what a global index scan of it asks).
    pub fn servers_of_slot(&self, replica: ReplicaId) -> BTreeSet<ServerId> {
        self.ranges
            .iter()
            .filter_map(|r| r.slot(replica))
            .map(|s| s.server)
            .collect()
    }

    /// The range holding the group whose encoded key is `key`.
    pub fn range_of(&self, key: &[u8]) -> &Range {
        // The first range starts at the empty key, so at least one start is <= key.
        let after = self.ranges.partition_point(|r| r.start.as_slice() <= key);
        &self.ranges[after - 1]
    }

    /// The range `id`.
    pub fn range(&self, id: RangeId) -> Option<&Range> {
        self.ranges.iter().find(|r| r.id == id)
    }

    pub(crate) fn range_index(&self, id: RangeId) -> Result<usize, ChangeError> {
        self.ranges
            .iter()
            .position(|r| r.id == id)
            .ok_or(ChangeError::UnknownRange(id))
    }

    /// The placement as the lock service stores it (JSON: small, and readable by an
    /// operator with `megastore lock read`).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a placement always serializes")
    }

    /// A placement read from the lock service, its invariants checked.
    pub fn decode(bytes: &[u8]) -> Result<Placement, DecodeError> {
        serde_json::from_slice(bytes).map_err(|e| DecodeError(e.to_string()))
    }

    /// Checks every invariant of a placement (docs/protocol.md, "Placement"):
    /// - *ranges-partition*: the ranges are sorted, non-empty, the first starts at the
    ///   empty key, each ends where the next starts, the last reaches the end;
    /// - *slot-at-its-site*: each slot's server exists and is at the slot's site;
    /// - *one-slot-per-server*: no server holds two slots of a range, no replica id
    ///   names two slots of a range, and every range has a full replica;
    /// - *epochs-from-the-past*: no range's epoch or move is newer than the placement,
    ///   and range ids are unique and below `next_range`;
    /// - *move-well-formed*: a move's slot is held by its source, its target is a
    ///   server of the slot's site holding no slot of the range;
    /// - *leaving-well-formed*: a leaving slot is a full replica's, the range keeps
    ///   another full replica, and is not being moved too;
    /// - *removed-stay-out*: no range has a slot of a replica listed as removed.
    pub fn check(&self) -> Result<(), Violation> {
        let fail = |invariant, detail: String| {
            Err(Violation {
                version: self.version,
                invariant,
                detail,
            })
        };
        let Some(first) = self.ranges.first() else {
            return fail("ranges-partition", "there are no ranges".into());
        };
        if !first.start.is_empty() {
            return fail(
                "ranges-partition",
                format!("{} does not start at the empty key", first.id),
            );
        }
        let mut ids = BTreeSet::new();
        for (i, range) in self.ranges.iter().enumerate() {
            let next_start = self.ranges.get(i + 1).map(|r| &r.start);
            if range.end.as_ref() != next_start {
                return fail(
                    "ranges-partition",
                    format!("{} does not end where the next range starts", range.id),
                );
            }
            if range.end.as_ref().is_some_and(|end| *end <= range.start) {
                return fail("ranges-partition", format!("{} is empty", range.id));
            }
            if !ids.insert(range.id) || range.id >= self.next_range {
                return fail(
                    "epochs-from-the-past",
                    format!("{} is named twice or after next_range", range.id),
                );
            }
            if range.epoch > self.version
                || range.moving.as_ref().is_some_and(|m| m.id > self.version)
                || range.voters_changed.is_some_and(|v| v > self.version)
                || range.voters_since > self.version
                || range.leaving.is_some_and(|l| l.since > self.version)
            {
                return fail(
                    "epochs-from-the-past",
                    format!("{} has an epoch or a move after {}", range.id, self.version),
                );
            }
            self.check_slots(range)
                .or_else(|(invariant, detail)| fail(invariant, detail))?;
            if let Some(slot) = range
                .slots
                .iter()
                .find(|s| self.removed.contains(&s.replica))
            {
                return fail(
                    "removed-stay-out",
                    format!(
                        "{} has a slot of removed replica {}",
                        range.id, slot.replica.0
                    ),
                );
            }
        }
        Ok(())
    }

    fn check_slots(&self, range: &Range) -> Result<(), (&'static str, String)> {
        let mut servers = BTreeSet::new();
        let mut replicas = BTreeSet::new();
        for slot in &range.slots {
            let Some(server) = self.servers.get(&slot.server) else {
                return Err((
                    "slot-at-its-site",
                    format!("{} is held by unknown {}", range.id, slot.server),
                ));
            };
            if server.site != slot.site {
                return Err((
                    "slot-at-its-site",
                    format!(
                        "replica {} of {} is at site {} but {} is at site {}",
                        slot.replica.0, range.id, slot.site.0, server.id, server.site.0
                    ),
                ));
            }
            if !servers.insert(slot.server) || !replicas.insert(slot.replica) {
                return Err((
                    "one-slot-per-server",
                    format!(
                        "{} names {} or replica {} twice",
                        range.id, slot.server, slot.replica.0
                    ),
                ));
            }
        }
        if !range.slots.iter().any(|s| s.kind == ReplicaKind::Full) {
            return Err((
                "one-slot-per-server",
                format!("{} has no full replica", range.id),
            ));
        }
        if let Some(leaving) = range.leaving {
            let full = |s: &&crate::Slot| s.kind == ReplicaKind::Full;
            let is_full = range.slot(leaving.replica).filter(full).is_some();
            let other = range
                .slots
                .iter()
                .filter(full)
                .any(|s| s.replica != leaving.replica);
            if !is_full || !other || range.moving.is_some() {
                return Err((
                    "leaving-well-formed",
                    format!(
                        "replica {} leaving {}: not a full replica's slot, the last one, or moving",
                        leaving.replica.0, range.id
                    ),
                ));
            }
        }
        if let Some(m) = &range.moving {
            let from = range.slot(m.replica).filter(|s| s.server == m.from);
            let to_site = self.servers.get(&m.to).map(|s| s.site);
            match from {
                None => {
                    return Err((
                        "move-well-formed",
                        format!(
                            "move {} of {}: replica {} is not held by {}",
                            m.id, range.id, m.replica.0, m.from
                        ),
                    ));
                }
                Some(slot) if to_site != Some(slot.site) || servers.contains(&m.to) => {
                    return Err((
                        "move-well-formed",
                        format!(
                            "move {} of {}: {} is not a free server of site {}",
                            m.id, range.id, m.to, slot.site.0
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Asserts [`Placement::check`]: every placement this crate makes keeps the
    /// invariants, or the change that made it is a bug.
    pub(crate) fn assert_checked(&self) {
        if let Err(violation) = self.check() {
            panic!("{violation}");
        }
    }
}

/// The `i`-th of `n` split points over the first two key bytes.
fn split_point(i: u32, n: u32) -> Vec<u8> {
    let at = u64::from(i) * u64::from(SPLIT_PREFIX_VALUES) / u64::from(n);
    let at = u16::try_from(at).expect("i < n keeps the split point below 2^16");
    at.to_be_bytes().to_vec()
}

/// A stored placement that cannot be used: not JSON of a placement, or one breaking an
/// invariant (named in the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the stored placement is unusable: {0}")]
pub struct DecodeError(pub String);
