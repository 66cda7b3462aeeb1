//! `plan_rebalance`: every planned move is one the placement accepts, carried out in
//! order; the plan never makes a replica's heaviest server heavier; and it stops.

use std::collections::BTreeMap;

use megastore_placement::{
    MoveRequest, Placement, RangeId, Server, ServerId, Version, plan_rebalance,
};
use megastore_types::{ReplicaId, ReplicaInfo, ReplicaKind, SiteId, Topology};
use proptest::prelude::*;

fn slots() -> Topology {
    let info = |id, kind, site| ReplicaInfo {
        id: ReplicaId(id),
        kind,
        site: SiteId(site),
    };
    Topology::new(vec![
        info(1, ReplicaKind::Full, 0),
        info(2, ReplicaKind::Full, 1),
        info(3, ReplicaKind::Witness, 2),
    ])
    .unwrap()
}

/// One server per replica (ids 1, 2, 3): the placement every cluster starts from.
fn first_servers(ranges: u32) -> Placement {
    let servers = (1..=3)
        .map(|n| Server {
            id: ServerId(n),
            site: SiteId(n - 1),
        })
        .collect();
    Placement::initial(servers, &slots(), ranges).unwrap()
}

/// `placement` with `servers` added at `site`.
fn with_servers(mut placement: Placement, site: u16, servers: &[u16]) -> Placement {
    for &id in servers {
        placement = placement
            .add_server(Server {
                id: ServerId(id),
                site: SiteId(site),
            })
            .unwrap();
    }
    placement
}

/// Carries a planned move out on the placement alone (begun, recorded frozen,
/// finished), as the operator would.
fn carried_out(placement: &Placement, planned: &MoveRequest) -> Placement {
    let begun = placement
        .begin_move(planned.range, planned.replica, planned.to)
        .unwrap_or_else(|e| panic!("{planned:?} refused: {e}"));
    let id: Version = begun.version();
    let frozen = begun.record_frozen(planned.range, id).unwrap();
    frozen.finish_move(planned.range, id).unwrap()
}

/// What each server carries of replica `replica`'s slots.
fn loads(
    placement: &Placement,
    weights: &BTreeMap<RangeId, u64>,
    replica: ReplicaId,
) -> BTreeMap<ServerId, u64> {
    let mut loads = BTreeMap::new();
    for range in placement.ranges() {
        if let Some(slot) = range.slot(replica) {
            *loads.entry(slot.server).or_default() += weights.get(&range.id).copied().unwrap_or(0);
        }
    }
    loads
}

#[test]
fn four_equal_ranges_on_one_server_are_shared_with_an_empty_one() {
    let placement = with_servers(first_servers(4), 0, &[11]);
    let weights: BTreeMap<RangeId, u64> = placement.ranges().iter().map(|r| (r.id, 10)).collect();
    let candidates = BTreeMap::from([
        (ReplicaId(1), vec![ServerId(1), ServerId(11)]),
        // Replica 2 has one server: nothing to even out.
        (ReplicaId(2), vec![ServerId(2)]),
    ]);
    let plan = plan_rebalance(&placement, &weights, &candidates, 10);
    assert_eq!(plan.len(), 2, "{plan:?}");
    assert!(
        plan.iter()
            .all(|m| m.replica == ReplicaId(1) && m.to == ServerId(11))
    );
    let mut after = placement.clone();
    for planned in &plan {
        after = carried_out(&after, planned);
    }
    assert_eq!(
        loads(&after, &weights, ReplicaId(1)),
        BTreeMap::from([(ServerId(1), 20), (ServerId(11), 20)])
    );
    // Balanced: nothing more to do; and a bound of one move is kept.
    assert!(plan_rebalance(&after, &weights, &candidates, 10).is_empty());
    assert_eq!(
        plan_rebalance(&placement, &weights, &candidates, 1).len(),
        1
    );
    // A server at another site, or not in the placement, is never a target.
    let elsewhere = BTreeMap::from([(ReplicaId(1), vec![ServerId(1), ServerId(2), ServerId(99)])]);
    assert!(plan_rebalance(&placement, &weights, &elsewhere, 10).is_empty());
}

#[test]
fn a_range_under_a_move_stays_where_it_is() {
    let placement = with_servers(first_servers(2), 0, &[11, 12]);
    let ids: Vec<RangeId> = placement.ranges().iter().map(|r| r.id).collect();
    let moving = placement
        .begin_move(ids[0], ReplicaId(1), ServerId(12))
        .unwrap();
    let weights = BTreeMap::from([(ids[0], 100), (ids[1], 1)]);
    let candidates =
        BTreeMap::from([(ReplicaId(1), vec![ServerId(1), ServerId(11), ServerId(12)])]);
    let plan = plan_rebalance(&moving, &weights, &candidates, 10);
    assert!(plan.iter().all(|m| m.range != ids[0]), "{plan:?}");
}

proptest! {
    #[test]
    fn a_plan_is_valid_never_heavier_and_bounded(
        ranges in 1u32..12,
        extra_servers in 1u16..4,
        weights in proptest::collection::vec(0u64..1_000, 12),
        moves_max in 0usize..20,
    ) {
        let extra: Vec<u16> = (0..extra_servers).map(|n| 11 + n).collect();
        let placement = with_servers(first_servers(ranges), 0, &extra);
        let weights: BTreeMap<RangeId, u64> = placement
            .ranges()
            .iter()
            .zip(weights)
            .map(|(r, w)| (r.id, w))
            .collect();
        let mut servers = vec![ServerId(1)];
        servers.extend(extra.iter().map(|&n| ServerId(n)));
        let candidates = BTreeMap::from([(ReplicaId(1), servers)]);
        let plan = plan_rebalance(&placement, &weights, &candidates, moves_max);
        prop_assert!(plan.len() <= moves_max);
        let heaviest = |p: &Placement| loads(p, &weights, ReplicaId(1)).into_values().max();
        let before = heaviest(&placement);
        let mut after = placement.clone();
        for planned in &plan {
            let heavier_than = heaviest(&after);
            after = carried_out(&after, planned);
            prop_assert!(heaviest(&after) <= heavier_than);
        }
        prop_assert!(heaviest(&after) <= before);
    }
}
