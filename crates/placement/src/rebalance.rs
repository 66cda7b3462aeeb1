//! Rebalancing (docs/protocol.md, "Placement"): which moves even out what a replica's
//! servers carry. A range weighs what the caller measured of it (its groups, or its
//! writes per second); a server of replica `R` carries the weight of every range whose
//! slot `R` it holds. Each planned move takes one range's slot from the heaviest of
//! `R`'s servers to the lightest, and only if the pair ends closer than it began
//! (the lightest stays lighter than the heaviest was), so no plan ever makes the
//! heaviest server heavier, and each move strictly lowers the sum of squared loads: a
//! plan ends. Ranges under a move are left alone. The moves are carried out one by one
//! by the operator ([`crate::next_step`]); a plan is a suggestion made from one
//! measurement, planned again after it is carried out.

use std::collections::BTreeMap;

use megastore_types::ReplicaId;

use crate::ids::{RangeId, ServerId};
use crate::map::Placement;
use crate::operator::MoveRequest;

/// Plans at most `moves_max` moves evening out, for every replica of `candidates`,
/// the weight its servers carry: `weights` by range (a range not named weighs 0),
/// `candidates` the servers each replica's slots may be held by (a replica's first
/// server and its other servers; a server not listed in the placement is left out,
/// and so is one at another site than the replica's slots).
pub fn plan_rebalance(
    placement: &Placement,
    weights: &BTreeMap<RangeId, u64>,
    candidates: &BTreeMap<ReplicaId, Vec<ServerId>>,
    moves_max: usize,
) -> Vec<MoveRequest> {
    let mut planned = Vec::new();
    for (&replica, servers) in candidates {
        // What each candidate carries now, and the ranges it holds (not moving).
        let mut load: BTreeMap<ServerId, u64> = BTreeMap::new();
        let mut held: BTreeMap<ServerId, Vec<(u64, RangeId)>> = BTreeMap::new();
        let site = placement
            .ranges()
            .iter()
            .find_map(|r| r.slot(replica))
            .map(|slot| slot.site);
        for &server in servers {
            if placement
                .server(server)
                .is_some_and(|s| Some(s.site) == site)
            {
                load.insert(server, 0);
                held.insert(server, Vec::new());
            }
        }
        if load.len() < 2 {
            continue;
        }
        for range in placement.ranges() {
            let Some(slot) = range.slot(replica) else {
                continue;
            };
            let weight = weights.get(&range.id).copied().unwrap_or(0);
            if let Some(carried) = load.get_mut(&slot.server) {
                *carried += weight;
                if range.moving.is_none() && range.leaving.is_none() {
                    held.entry(slot.server)
                        .or_default()
                        .push((weight, range.id));
                }
            }
        }
        while planned.len() < moves_max {
            // Heaviest and lightest, ties broken by server id (a plan is repeatable).
            let Some((&heavy, &heavy_load)) = load
                .iter()
                .max_by_key(|(id, carried)| (**carried, std::cmp::Reverse(**id)))
            else {
                break;
            };
            let Some((&light, &light_load)) = load.iter().min_by_key(|(id, c)| (**c, **id)) else {
                break;
            };
            let gap = heavy_load - light_load;
            // The range whose move narrows the gap most: weight below the gap, as
            // close to half of it as there is.
            let best = held
                .get(&heavy)
                .into_iter()
                .flatten()
                .filter(|(weight, _)| *weight > 0 && *weight < gap)
                // A server holds one slot of a range at most.
                .filter(|(_, id)| {
                    placement
                        .range(*id)
                        .is_some_and(|r| r.slot_held_by(light).is_none())
                })
                .min_by_key(|(weight, id)| ((i128::from(*weight) * 2 - i128::from(gap)).abs(), *id))
                .copied();
            let Some((weight, range)) = best else {
                break;
            };
            if let Some(ranges) = held.get_mut(&heavy) {
                ranges.retain(|(_, id)| *id != range);
            }
            held.entry(light).or_default().push((weight, range));
            *load.entry(heavy).or_default() -= weight;
            *load.entry(light).or_default() += weight;
            planned.push(MoveRequest {
                range,
                replica,
                to: light,
            });
        }
    }
    planned
}
