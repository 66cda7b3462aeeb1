//! Where nodes are, how long messages take, and which links are cut.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use megastore_types::{NodeId, SiteId};

use crate::config::SimConfig;
use crate::rng::Rng;

/// The simulated network: latencies by site, per-message faults, and partitions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Network {
    /// Directed links that drop everything (`from`, `to`).
    blocked: BTreeSet<(NodeId, NodeId)>,
    /// Nodes whose incoming messages from other sites crawl: extra delay (ms).
    slow: BTreeMap<NodeId, u32>,
    /// Whether per-message faults (drop, duplicate, reorder) are on.
    pub lossy: bool,
}

/// What happens to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Lost.
    Dropped,
    /// Arrives after each of these delays (twice when duplicated).
    After(Vec<Duration>),
}

impl Network {
    /// A network with no partitions and per-message faults on.
    pub(crate) fn lossy() -> Self {
        Self {
            blocked: BTreeSet::new(),
            slow: BTreeMap::new(),
            lossy: true,
        }
    }

    /// Cuts the link from `a` to `b` (one way).
    pub(crate) fn block(&mut self, a: NodeId, b: NodeId) {
        if a != b {
            self.blocked.insert((a, b));
        }
    }

    /// Slows every message reaching `node` from another site by `extra_ms`.
    pub(crate) fn slow_down(&mut self, node: NodeId, extra_ms: u32) {
        self.slow.insert(node, extra_ms);
    }

    /// Heals every partition and slow link.
    pub(crate) fn heal(&mut self) {
        self.blocked.clear();
        self.slow.clear();
    }

    /// Whether `a` can send to `b`.
    pub(crate) fn reachable(&self, a: NodeId, b: NodeId) -> bool {
        !self.blocked.contains(&(a, b))
    }

    /// Decides the fate of a message from `a` (at `site_a`) to `b` (at `site_b`).
    pub(crate) fn deliver(
        &self,
        config: &SimConfig,
        rng: &mut Rng,
        (a, site_a): (NodeId, SiteId),
        (b, site_b): (NodeId, SiteId),
    ) -> Delivery {
        if !self.reachable(a, b) || (self.lossy && rng.chance(config.drop)) {
            return Delivery::Dropped;
        }
        let mut base = config.latency_ms[site_a.0 as usize][site_b.0 as usize];
        if site_a != site_b {
            base += self.slow.get(&b).copied().unwrap_or(0);
        }
        let base_us = u64::from(base) * 1000;
        let lossy = self.lossy;
        let delay = |rng: &mut Rng| {
            let jitter = (base_us as f64 * config.jitter) as u64;
            let mut us = base_us + rng.below(jitter + 1);
            if lossy && config.reorder_ms > 0 {
                us += rng.below(u64::from(config.reorder_ms) * 1000);
            }
            // Now and then a message is held up for a long time (a retransmission stall).
            if lossy && rng.chance(config.long_delay) {
                let max_us = u64::try_from(config.long_delay_max.as_micros()).unwrap_or(u64::MAX);
                us += 300_000 + rng.below(max_us.saturating_sub(300_000));
            }
            Duration::from_micros(us.max(50))
        };
        let mut delays = vec![delay(rng)];
        if lossy && rng.chance(config.duplicate) {
            delays.push(delay(rng));
        }
        Delivery::After(delays)
    }
}
