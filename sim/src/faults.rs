//! Fault injection, all drawn from the seed: partitions (a site, one way between two
//! sites, a coordinator alone, the lock nodes, a site but not from the lock service — with
//! an operator disabling its coordinator), crashes and restarts (replicas — losing
//! unsynced writes, or once per run the whole store — coordinators, also stopped cleanly,
//! lock nodes) and lock leader changes.

use std::time::Duration;

use megastore_types::{LockNodeId, NodeId, SiteId};

use crate::world::{Hold, World};

fn millis(world: &mut World, low: u64, high: u64) -> Duration {
    Duration::from_millis(low + world.rng().below(high - low))
}

/// Injects one fault.
pub(crate) fn inject(world: &mut World) {
    let nodes = world.all_nodes();
    if world.config.restart_storm && world.rng().chance(0.7) {
        // A voter restarts almost at once: it rejoins the rounds it was part of.
        let voters = voters(world);
        let r = voters[world.rng().below(voters.len() as u64) as usize];
        let d = millis(world, 2, 60);
        world.crash(r, d);
        return;
    }
    let dice = world.rng().below(100);
    match dice {
        0..12 => site_lost_then_coordinator_first(world, &nodes),
        12..23 => {
            // A whole site is cut off, both ways.
            let sites = u64::from(world.config.sites);
            let site = world.rng().below(sites) as u16;
            let inside: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| world.node_site(*n).0 == site)
                .collect();
            let links = pairs(&inside, &nodes)
                .into_iter()
                .flat_map(|(a, b)| [(a, b), (b, a)])
                .collect();
            let d = millis(world, 300, 3000);
            world.block_links(links, d);
        }
        23..28 => {
            // The asymmetric partition that needs an operator (paper §4.7): a site is
            // cut off from the other sites, but its coordinator still reaches the lock
            // service and keeps its lock, so writers elsewhere cannot invalidate it.
            // The operator disables it, and restarts it once the partition has healed.
            let sites = u64::from(world.config.sites);
            let site = SiteId(world.rng().below(sites) as u16);
            let not_lock = |n: &NodeId| !matches!(n, NodeId::LockNode(_));
            let inside: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| not_lock(n) && world.node_site(*n) == site)
                .collect();
            let outside: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| not_lock(n) && world.node_site(*n) != site)
                .collect();
            let links = pairs(&inside, &outside)
                .into_iter()
                .flat_map(|(a, b)| [(a, b), (b, a)])
                .collect();
            let d = millis(world, 1000, 4000);
            world.block_links(links, d);
            let coordinator = inside.iter().find_map(|n| match n {
                NodeId::Coordinator(r) => Some(*r),
                _ => None,
            });
            if let Some(r) = coordinator {
                let after = millis(world, 100, 1000);
                world.operator_disables(r, after, d + Duration::from_millis(100));
            }
        }
        28..38 => {
            // One way between two sites.
            let sites = u64::from(world.config.sites);
            let a = world.rng().below(sites) as u16;
            let b = world.rng().below(sites) as u16;
            let from: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| world.node_site(*n).0 == a)
                .collect();
            let to: Vec<NodeId> = nodes
                .iter()
                .copied()
                .filter(|n| world.node_site(*n).0 == b)
                .collect();
            let links = pairs(&from, &to);
            let d = millis(world, 300, 3000);
            world.block_links(links, d);
        }
        38..44 => {
            // A coordinator alone (the asymmetric partition of §4.7: it keeps its
            // lock only if it still reaches the lock service; cut it from everything).
            let coordinators: Vec<NodeId> = world
                .coordinators
                .keys()
                .map(|r| NodeId::Coordinator(*r))
                .collect();
            if coordinators.is_empty() {
                return;
            }
            let c = coordinators[world.rng().below(coordinators.len() as u64) as usize];
            let keep_lock = world.rng().chance(0.5);
            let links = nodes
                .iter()
                .filter(|n| **n != c && !(keep_lock && matches!(n, NodeId::LockNode(_))))
                .flat_map(|n| [(c, *n), (*n, c)])
                .collect();
            let d = millis(world, 300, 3000);
            world.block_links(links, d);
        }
        44..48 => {
            // Hold and release: a node's inbox is held back, then delivered all at once
            // in random order (a coordinator's most often: validates and invalidates
            // then race, and may outlive its epoch).
            let coordinators: Vec<NodeId> = world
                .coordinators
                .keys()
                .map(|r| NodeId::Coordinator(*r))
                .collect();
            let node = if world.rng().chance(0.7) && !coordinators.is_empty() {
                coordinators[world.rng().below(coordinators.len() as u64) as usize]
            } else {
                nodes[world.rng().below(nodes.len() as u64) as usize]
            };
            let d = millis(world, 100, 3000);
            if let (true, NodeId::Coordinator(r)) = (world.rng().chance(0.6), node) {
                // One stalled connection: a client at the coordinator's site to it.
                let site = world.node_site(node);
                let clients: Vec<NodeId> = world
                    .clients
                    .values()
                    .filter(|c| c.site == site)
                    .map(|c| NodeId::Client(c.id))
                    .collect();
                if !clients.is_empty() {
                    let client = clients[world.rng().below(clients.len() as u64) as usize];
                    world.hold(Hold::Link(client, NodeId::Coordinator(r)), d);
                    return;
                }
            }
            if world.rng().chance(0.4) {
                // One proposer's link to one voter: its prepares and accepts arrive
                // late, all at once, after other proposers moved the position on
                // (duelling proposers, one of them stale).
                let voters = voters(world);
                let clients: Vec<NodeId> = world
                    .clients
                    .values()
                    .map(|c| NodeId::Client(c.id))
                    .collect();
                if !clients.is_empty() {
                    let client = clients[world.rng().below(clients.len() as u64) as usize];
                    let voter = voters[world.rng().below(voters.len() as u64) as usize];
                    world.hold(Hold::Link(client, voter), d);
                    if world.rng().chance(0.5) {
                        // The voter restarts while the stale requests are delivered
                        // (over 50 ms, in random order): those that come after it is
                        // back must be refused by promises made before the crash.
                        let after = d + millis(world, 0, 50);
                        let down = millis(world, 2, 30);
                        world.crash_later(voter, after, down);
                    }
                    return;
                }
            }
            world.hold(Hold::Inbox(node), d);
        }
        48..52 => {
            // A slow inbound link: a replica keeps lagging behind the writes (and its
            // coordinator keeps being invalidated and revalidated).
            let replicas: Vec<NodeId> =
                world.replicas.keys().map(|r| NodeId::Replica(*r)).collect();
            let r = replicas[world.rng().below(replicas.len() as u64) as usize];
            let extra = 50 + world.rng().below(350) as u32;
            world.net.slow_down(r, extra);
            world
                .trace
                .note(world.now, &format!("slow link into {r}: +{extra} ms"));
            let d = millis(world, 1000, 5000);
            world.block_links(Vec::new(), d);
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
            let d = millis(world, 300, 2500);
            world.block_links(links, d);
        }
        56..72 => {
            // A replica crash: unsynced writes are lost; sometimes a quick restart, so
            // that it rejoins in the middle of the rounds it was part of.
            let replicas: Vec<NodeId> =
                world.replicas.keys().map(|r| NodeId::Replica(*r)).collect();
            let r = replicas[world.rng().below(replicas.len() as u64) as usize];
            let d = if world.rng().chance(0.5) {
                millis(world, 5, 200)
            } else {
                millis(world, 200, 3000)
            };
            match r {
                // Sometimes the disk is lost too: the replica rejoins with nothing.
                NodeId::Replica(id) if !world.wiped && world.rng().chance(0.25) => {
                    world.wipe(id, d)
                }
                _ => world.crash(r, d),
            }
        }
        72..84 => {
            let coordinators: Vec<NodeId> = world
                .coordinators
                .keys()
                .map(|r| NodeId::Coordinator(*r))
                .collect();
            if coordinators.is_empty() {
                return;
            }
            let c = coordinators[world.rng().below(coordinators.len() as u64) as usize];
            let d = millis(world, 200, 3000);
            match c {
                // A clean stop (a restart for an upgrade): it gives its lock back.
                NodeId::Coordinator(r) if world.rng().chance(0.3) => world.stop_coordinator(r, d),
                _ => world.crash(c, d),
            }
        }
        84..92 => {
            // Lock leader change (a new Raft term): leases restart on the new leader.
            let count = world.lock.model.len() as u16;
            let next = LockNodeId(
                (world.lock.model.leader().0 + 1 + world.rng().below(u64::from(count)) as u16)
                    % count,
            );
            if world.lock.model.is_up(next) {
                world.stats.faults += 1;
                world
                    .trace
                    .note(world.now, &format!("lock leader -> {}", next.0));
                world.change_lock_leader(next);
            }
        }
        _ => {
            let count = world.lock.model.len() as u64;
            let n = NodeId::LockNode(LockNodeId(world.rng().below(count) as u16));
            let d = millis(world, 300, 3000);
            world.crash(n, d);
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
fn site_lost_then_coordinator_first(world: &mut World, nodes: &[NodeId]) {
    // A site with a coordinator and clients that read there.
    let sites: Vec<SiteId> = world
        .coordinators
        .keys()
        .map(|r| world.node_site(NodeId::Replica(*r)))
        .filter(|site| world.clients.values().any(|c| c.site == *site))
        .collect();
    if sites.is_empty() {
        return;
    }
    let site = sites[world.rng().below(sites.len() as u64) as usize];
    let inside: Vec<NodeId> = nodes
        .iter()
        .copied()
        .filter(|n| world.node_site(*n) == site)
        .collect();
    let links = pairs(&inside, nodes)
        .into_iter()
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .collect();
    let lease = world.config.lock_lease;
    let cut = lease + millis(world, 200, 2000);
    world.block_links(links, cut);
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
                || (matches!(n, NodeId::Client(_)) && world.node_site(*n) != site)
        })
        .collect();
    let still_cut = pairs(&replicas, &far)
        .into_iter()
        .flat_map(|(a, b)| [(a, b), (b, a)])
        .collect();
    let longer = millis(world, 1000, 4000);
    world.block_links_later(still_cut, cut, longer);
}

fn voters(world: &World) -> Vec<NodeId> {
    world
        .config
        .topology
        .voters()
        .map(NodeId::Replica)
        .collect()
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
