//! What a coordinator's memory costs per group it remembers, measured by counting the
//! bytes allocated while 100,000 groups are validated (and as many invalidated), in
//! the current epoch: at most 48 bytes beside the key (issue 20's goal; about 46 with
//! one allocation per group, its 8-byte state before its key, docs/performance.md).
//! The map it replaced (`EgId` keys and 16-byte states) is measured beside it.

use std::time::Duration;

use megastore_coordinator::{
    Coordinator, CoordinatorBugs, CoordinatorConfig, CoordinatorRequest, Input, Output,
};
use megastore_lock::{LockReply, LockResponse, Sequencer, SessionId};
use megastore_types::{ClientId, EgId, Epoch, LockNodeId, NodeId, Position, ReplicaId, Time};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// Counts every allocation of this test binary (it holds this one test only).
#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const GROUPS: u32 = 100_000;
const KEY_BYTES: usize = 20;

fn serving() -> Coordinator {
    let mut c = Coordinator::new(CoordinatorConfig {
        replica: ReplicaId(1),
        lock_nodes: vec![LockNodeId(0)],
        lock_attempt_timeout: Duration::from_secs(1),
        keepalive_interval: Duration::from_secs(3),
        max_clock_drift_ppm: 0,
        lease_margin: Duration::ZERO,
        retry_delay: Duration::from_secs(1),
        first_request_id: 1,
        valid_max: usize::MAX,
        invalid_max: usize::MAX,
        bugs: CoordinatorBugs::NONE,
    });
    let answer = |c: &mut Coordinator, out: Vec<Output>, result| {
        let id = out
            .iter()
            .find_map(|o| match o {
                Output::Lock(send) => Some(send.request.id),
                _ => None,
            })
            .expect("a lock request");
        c.step(
            Time::ZERO,
            Input::Lock {
                from: LockNodeId(0),
                response: LockResponse { id, result },
            },
        )
    };
    let out = c.step(Time::ZERO, Input::Start);
    let out = answer(
        &mut c,
        out,
        Ok(LockReply::Session {
            session: SessionId(1),
            lease: Duration::from_secs(3600),
        }),
    );
    answer(
        &mut c,
        out,
        Ok(LockReply::Acquired {
            sequencer: Sequencer(7),
        }),
    );
    assert_eq!(c.epoch(), Some(Epoch(7)));
    c
}

/// Group `n`'s key: `KEY_BYTES` long, spread as hashed keys are.
fn key(n: u32) -> EgId {
    let mut bytes = format!("{:08x}", n.wrapping_mul(2_654_435_761)).into_bytes();
    bytes.resize(KEY_BYTES, b'k');
    EgId(bytes)
}

/// Bytes per remembered group beyond its key, after `request` for every group.
fn bytes_per_group(request: impl Fn(u32) -> CoordinatorRequest) -> f64 {
    let mut c = serving();
    let region = Region::new(ALLOCATOR);
    for n in 0..GROUPS {
        c.step(
            Time::ZERO,
            Input::Request {
                from: NodeId::Client(ClientId(1)),
                request: request(n),
            },
        );
    }
    let change = region.change();
    let (valid, invalid) = c.tracked();
    assert_eq!(valid + invalid, GROUPS as usize);
    let live = change.bytes_allocated as f64 - change.bytes_deallocated as f64
        + change.bytes_reallocated as f64;
    live / f64::from(GROUPS) - KEY_BYTES as f64
}

/// The same keys in the map the coordinator used before: `EgId` → `GroupState`.
fn bytes_per_group_before() -> f64 {
    let region = Region::new(ALLOCATOR);
    // One by one, as the coordinator inserts (collecting would build it densely).
    let mut map = std::collections::BTreeMap::new();
    for n in 0..GROUPS {
        let through = Position(u64::from(n));
        map.insert(key(n), megastore_coordinator::GroupState::Valid { through });
    }
    let change = region.change();
    assert_eq!(map.len(), GROUPS as usize);
    let live = change.bytes_allocated as f64 - change.bytes_deallocated as f64
        + change.bytes_reallocated as f64;
    live / f64::from(GROUPS) - KEY_BYTES as f64
}

#[test]
#[allow(clippy::print_stdout)] // the measurement is worth seeing
fn a_remembered_group_costs_at_most_48_bytes_beside_its_key() {
    let valid = bytes_per_group(|n| CoordinatorRequest::Validate {
        eg: key(n),
        position: Position(u64::from(n)),
        epoch: Epoch(7),
    });
    let invalid = bytes_per_group(|n| CoordinatorRequest::Invalidate {
        id: u64::from(n),
        eg: key(n),
        position: Position(u64::from(n)),
    });
    let before = bytes_per_group_before();
    println!(
        "bytes per group beside its {KEY_BYTES}-byte key: valid {valid:.1}, invalid {invalid:.1} (the map before: {before:.1})"
    );
    assert!(valid < before, "{valid:.1} is no better than {before:.1}");
    assert!(valid <= 48.0, "a valid group costs {valid:.1} bytes");
    assert!(invalid <= 48.0, "an invalid group costs {invalid:.1} bytes");
}
