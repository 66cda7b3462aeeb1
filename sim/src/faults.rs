//! Fault injection, all drawn from the seed: partitions (a site, one way between two
//! sites, a coordinator alone, the lock nodes, a site but not from the lock service — with
//! an operator disabling its coordinator), crashes and restarts (replicas — losing
//! unsynced writes, or once per run the whole store — coordinators, also stopped cleanly,
//! lock nodes) and lock leader changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use megastore_types::{ClientId, LockNodeId, NodeId, ReplicaId, SiteId};

use crate::rng::Rng;

/// What the fault schedule may look at when it draws: the nodes and where they run,
/// and the lock service's membership. (It never sees protocol state: faults are
/// drawn from the seed alone, whatever the protocol does.)
pub(crate) struct Scene {
    /// The seed chose a run of voter restarts rather than mixed faults.
    pub(crate) restart_storm: bool,
    /// How many sites there are.
    pub(crate) site_count: u16,
    /// The lock service's lease.
    pub(crate) lock_lease: Duration,
    /// The voting replicas.
    pub(crate) voters: Vec<ReplicaId>,
    /// Every node: replicas, coordinators, lock nodes, clients.
    pub(crate) nodes: Vec<NodeId>,
    /// Each node's site.
    pub(crate) sites: BTreeMap<NodeId, SiteId>,
    /// The replicas.
    pub(crate) replicas: Vec<ReplicaId>,
    /// The replicas that have a coordinator.
    pub(crate) coordinators: Vec<ReplicaId>,
    /// The clients and their sites.
    pub(crate) clients: Vec<(ClientId, SiteId)>,
    /// A replica's store was wiped already (at most one per run).
    pub(crate) wiped: bool,
    /// How many lock nodes there are.
    pub(crate) lock_nodes: u16,
    /// The lock service's leader.
    pub(crate) lock_leader: LockNodeId,
    /// The lock nodes that are up.
    pub(crate) lock_up: BTreeSet<LockNodeId>,
}

impl Scene {
    fn site(&self, node: NodeId) -> SiteId {
        self.sites[&node]
    }
}

/// What a hold holds back: a node's whole inbox, or one directed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Hold {
    Inbox(NodeId),
    Link(NodeId, NodeId),
}

/// One step of a fault, for the world to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The node crashes (a replica loses its unsynced writes) and restarts after
    /// `down`.
    Crash { node: NodeId, down: Duration },
    /// The node crashes `after` from now, for `down`.
    CrashLater {
        node: NodeId,
        after: Duration,
        down: Duration,
    },
    /// The replica crashes and loses its whole store.
    Wipe { replica: ReplicaId, down: Duration },
    /// The replica's coordinator stops cleanly (giving its lock back).
    StopCoordinator { replica: ReplicaId, down: Duration },
    /// An operator disables the replica's coordinator `after` from now, and restarts
    /// it `down` later.
    OperatorDisables {
        replica: ReplicaId,
        after: Duration,
        down: Duration,
    },
    /// These directed links drop everything for `duration`.
    BlockLinks {
        links: Vec<(NodeId, NodeId)>,
        duration: Duration,
    },
    /// These directed links are cut `after` from now, for `duration`.
    BlockLinksLater {
        links: Vec<(NodeId, NodeId)>,
        after: Duration,
        duration: Duration,
    },
    /// What `hold` holds back is delivered all at once after `duration`.
    Hold { hold: Hold, duration: Duration },
    /// Messages into the node from other sites take `extra_ms` longer.
    SlowDown { node: NodeId, extra_ms: u32 },
    /// The lock service's leadership moves to this node.
    ChangeLockLeader(LockNodeId),
}

fn millis(rng: &mut Rng, low: u64, high: u64) -> Duration {
    Duration::from_millis(low + rng.below(high - low))
}

/// Draws the next fault (none, or one to three steps of one): what the world then
/// carries out (`world/outages.rs`).
pub(crate) fn choose(scene: &Scene, rng: &mut Rng) -> Vec<Fault> {
    let mut out = Vec::new();
    choose_into(scene, rng, &mut out);
    out
}

fn choose_into(scene: &Scene, rng: &mut Rng, out: &mut Vec<Fault>) {
    let nodes = scene.nodes.clone();
    if scene.restart_storm && rng.chance(0.7) {
        // A voter restarts almost at once: it rejoins the rounds it was part of.
        let voters = voters(scene);
        let r = voters[rng.below(voters.len() as u64) as usize];
        let d = millis(rng, 2, 60);
        out.push(Fault::Crash { node: r, down: d });
        return;
    }
    let dice = rng.below(100);
    match dice {
        0..12 => site_lost_then_coordinator_first(scene, rng, &nodes, out),
        12..23 => {
            // A whole site is cut off, both ways.
            let sites = u64::from(scene.site_count);
            let site = rng.below(sites) as u16;
            let inside: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| scene.site(*n).0 == site)
                .collect();
            let links = pairs(&inside, &nodes)
                .into_iter()
                .flat_map(|(a, b)| [(a, b), (b, a)])
                .collect();
            let d = millis(rng, 300, 3000);
            out.push(Fault::BlockLinks { links, duration: d });
        }
        23..28 => {
            // The asymmetric partition that needs an operator (paper §4.7): a site is
            // cut off from the other sites, but its coordinator still reaches the lock
            // service and keeps its lock, so writers elsewhere cannot invalidate it.
            // The operator disables it, and restarts it once the partition has healed.
            let sites = u64::from(scene.site_count);
            let site = SiteId(rng.below(sites) as u16);
            let not_lock = |n: &NodeId| !matches!(n, NodeId::LockNode(_));
            let inside: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| not_lock(n) && scene.site(*n) == site)
                .collect();
            let outside: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| not_lock(n) && scene.site(*n) != site)
                .collect();
            let links = pairs(&inside, &outside)
                .into_iter()
                .flat_map(|(a, b)| [(a, b), (b, a)])
                .collect();
            let d = millis(rng, 1000, 4000);
            out.push(Fault::BlockLinks { links, duration: d });
            let coordinator = inside.iter().find_map(|n| match n {
                NodeId::Coordinator(r) => Some(*r),
                _ => None,
            });
            if let Some(r) = coordinator {
                let after = millis(rng, 100, 1000);
                out.push(Fault::OperatorDisables {
                    replica: r,
                    after,
                    down: d + Duration::from_millis(100),
                });
            }
        }
        28..38 => {
            // One way between two sites.
            let sites = u64::from(scene.site_count);
            let a = rng.below(sites) as u16;
            let b = rng.below(sites) as u16;
            let from: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| scene.site(*n).0 == a)
                .collect();
            let to: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| scene.site(*n).0 == b)
                .collect();
            let links = pairs(&from, &to);
            let d = millis(rng, 300, 3000);
            out.push(Fault::BlockLinks { links, duration: d });
        }
        38..44 => {
            // A coordinator alone (the asymmetric partition of §4.7: it keeps its
            // lock only if it still reaches the lock service; cut it from everything).
            let coordinators: Vec<NodeId> = scene
                .coordinators
                .iter()
                .map(|r| NodeId::Coordinator(*r))
                .collect();
            if coordinators.is_empty() {
                return;
            }
            let c = coordinators[rng.below(coordinators.len() as u64) as usize];
            let keep_lock = rng.chance(0.5);
            let links = nodes
                .iter()
                .filter(|n| **n != c && !(keep_lock && matches!(n, NodeId::LockNode(_))))
                .flat_map(|n| [(c, *n), (*n, c)])
                .collect();
            let d = millis(rng, 300, 3000);
            out.push(Fault::BlockLinks { links, duration: d });
        }
        44..48 => {
            // Hold and release: a node's inbox is held back, then delivered all at once
            // in random order (a coordinator's most often: validates and invalidates
            // then race, and may outlive its epoch).
            let coordinators: Vec<NodeId> = scene
                .coordinators
                .iter()
                .map(|r| NodeId::Coordinator(*r))
                .collect();
            let node = if rng.chance(0.7) && !coordinators.is_empty() {
                coordinators[rng.below(coordinators.len() as u64) as usize]
            } else {
                nodes[rng.below(nodes.len() as u64) as usize]
            };
            let d = millis(rng, 100, 3000);
            if let (true, NodeId::Coordinator(r)) = (rng.chance(0.6), node) {
                // One stalled connection: a client at the coordinator's site to it.
                let site = scene.site(node);
                let clients: Vec<NodeId> = scene
                    .clients
                    .iter()
                    .filter(|(_, at)| *at == site)
                    .map(|(c, _)| NodeId::Client(*c))
                    .collect();
                if !clients.is_empty() {
                    let client = clients[rng.below(clients.len() as u64) as usize];
                    out.push(Fault::Hold {
                        hold: Hold::Link(client, NodeId::Coordinator(r)),
                        duration: d,
                    });
                    return;
                }
            }
            if rng.chance(0.4) {
                // One proposer's link to one voter: its prepares and accepts arrive
                // late, all at once, after other proposers moved the position on
                // (duelling proposers, one of them stale).
                let voters = voters(scene);
                let clients: Vec<NodeId> = scene
                    .clients
                    .iter()
                    .map(|(c, _)| NodeId::Client(*c))
                    .collect();
                if !clients.is_empty() {
                    let client = clients[rng.below(clients.len() as u64) as usize];
                    let voter = voters[rng.below(voters.len() as u64) as usize];
                    out.push(Fault::Hold {
                        hold: Hold::Link(client, voter),
                        duration: d,
                    });
                    if rng.chance(0.5) {
                        // The voter restarts while the stale requests are delivered
                        // (over 50 ms, in random order): those that come after it is
                        // back must be refused by promises made before the crash.
                        let after = d + millis(rng, 0, 50);
                        let down = millis(rng, 2, 30);
                        out.push(Fault::CrashLater {
                            node: voter,
                            after,
                            down,
                        });
                    }
                    return;
                }
            }
            out.push(Fault::Hold {
                hold: Hold::Inbox(node),
                duration: d,
            });
        }
        48..52 => {
            // A slow inbound link: a replica keeps lagging behind the writes (and its
            // coordinator keeps being invalidated and revalidated).
            let replicas: Vec<NodeId> =
                scene.replicas.iter().map(|r| NodeId::Replica(*r)).collect();
            let r = replicas[rng.below(replicas.len() as u64) as usize];
            let extra = 50 + rng.below(350) as u32;
            out.push(Fault::SlowDown {
                node: r,
                extra_ms: extra,
            });
            let d = millis(rng, 1000, 5000);
            out.push(Fault::BlockLinks {
                links: Vec::new(),
                duration: d,
            });
        }
        52..56 => {
            // The lock nodes cut off from everyone else.
            let lock: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| matches!(n, NodeId::LockNode(_)))
                .collect();
            let others: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| !matches!(n, NodeId::LockNode(_)))
                .collect();
            let links = pairs(&lock, &others)
                .into_iter()
                .flat_map(|(a, b)| [(a, b), (b, a)])
                .collect();
            let d = millis(rng, 300, 2500);
            out.push(Fault::BlockLinks { links, duration: d });
        }
        56..72 => {
            // A replica crash: unsynced writes are lost; sometimes a quick restart, so
            // that it rejoins in the middle of the rounds it was part of.
            let replicas: Vec<NodeId> =
                scene.replicas.iter().map(|r| NodeId::Replica(*r)).collect();
            let r = replicas[rng.below(replicas.len() as u64) as usize];
            let d = if rng.chance(0.5) {
                millis(rng, 5, 200)
            } else {
                millis(rng, 200, 3000)
            };
            match r {
                // Sometimes the disk is lost too: the replica rejoins with nothing.
                NodeId::Replica(id) if !scene.wiped && rng.chance(0.25) => out.push(Fault::Wipe {
                    replica: id,
                    down: d,
                }),
                _ => out.push(Fault::Crash { node: r, down: d }),
            }
        }
        72..84 => {
            let coordinators: Vec<NodeId> = scene
                .coordinators
                .iter()
                .map(|r| NodeId::Coordinator(*r))
                .collect();
            if coordinators.is_empty() {
                return;
            }
            let c = coordinators[rng.below(coordinators.len() as u64) as usize];
            let d = millis(rng, 200, 3000);
            match c {
                // A clean stop (a restart for an upgrade): it gives its lock back.
                NodeId::Coordinator(r) if rng.chance(0.3) => out.push(Fault::StopCoordinator {
                    replica: r,
                    down: d,
                }),
                _ => out.push(Fault::Crash { node: c, down: d }),
            }
        }
        84..92 => {
            // Lock leader change (a new Raft term): leases restart on the new leader.
            let count = scene.lock_nodes;
            let next =
                LockNodeId((scene.lock_leader.0 + 1 + rng.below(u64::from(count)) as u16) % count);
            if scene.lock_up.contains(&next) {
                out.push(Fault::ChangeLockLeader(next));
            }
        }
        _ => {
            let count = u64::from(scene.lock_nodes);
            let n = NodeId::LockNode(LockNodeId(rng.below(count) as u16));
            let d = millis(rng, 300, 3000);
            out.push(Fault::Crash { node: n, down: d });
        }
    }
}

/// A site cut off for longer than a lock lease: writers elsewhere go ahead without it
/// once its coordinator's lock lapsed. It heals in two steps: first the way to the lock
/// service — its coordinator opens a new session and takes its lock again, a new epoch
/// — while the site stays cut off from the other sites' replicas and clients a while
/// longer, so that readers at the site ask a coordinator of a new epoch about a replica
/// that missed writes (and writers elsewhere cannot invalidate it meanwhile). (The lock loss and re-acquire under load that a coordinator keeping
/// its state across epochs gets wrong.)
fn site_lost_then_coordinator_first(
    scene: &Scene,
    rng: &mut Rng,
    nodes: &[NodeId],
    out: &mut Vec<Fault>,
) {
    // A site with a coordinator and clients that read there.
    let sites: Vec<SiteId> = scene
        .coordinators
        .iter()
        .map(|r| scene.site(NodeId::Replica(*r)))
        .filter(|site| scene.clients.iter().any(|(_, at)| at == site))
        .collect();
    if sites.is_empty() {
        return;
    }
    let site = sites[rng.below(sites.len() as u64) as usize];
    let inside: Vec<NodeId> = nodes
        .iter()
        .copied()
        .filter(|n| scene.site(*n) == site)
        .collect();
    let links = pairs(&inside, nodes)
        .into_iter()
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .collect();
    let lease = scene.lock_lease;
    let cut = lease + millis(rng, 200, 2000);
    out.push(Fault::BlockLinks {
        links,
        duration: cut,
    });
    // Still cut: the site's replicas and coordinator from the other sites' replicas
    // and clients. Only the coordinator's way to the lock service, and the site's own
    // clients, are back.
    let replicas: Vec<NodeId> = inside
        .iter()
        .copied()
        .filter(|n| matches!(n, NodeId::Replica(_) | NodeId::Coordinator(_)))
        .collect();
    let far: Vec<NodeId> = nodes
        .iter()
        .copied()
        .filter(|n| {
            matches!(n, NodeId::Replica(_))
                || (matches!(n, NodeId::Client(_)) && scene.site(*n) != site)
        })
        .collect();
    let still_cut = pairs(&replicas, &far)
        .into_iter()
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .collect();
    let longer = millis(rng, 1000, 4000);
    out.push(Fault::BlockLinksLater {
        links: still_cut,
        after: cut,
        duration: longer,
    });
}

fn voters(scene: &Scene) -> Vec<NodeId> {
    scene.voters.iter().map(|r| NodeId::Replica(*r)).collect()
}

fn pairs(a: &[NodeId], b: &[NodeId]) -> Vec<(NodeId, NodeId)> {
    a.iter()
        .flat_map(|x| {
            b.iter()
                .filter(move |y| !a.contains(y))
                .map(move |y| (*x, *y))
        })
        .collect()
}
