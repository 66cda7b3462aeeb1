//! Metrics of megastore's processes in the Prometheus text format.
//!
//! Responsibility: the metric families each kind of process keeps ([`ClientMetrics`],
//! [`ReplicaMetrics`], [`CoordinatorMetrics`], [`LockdMetrics`]), one registry per
//! process, and the HTTP endpoint (`GET /metrics` on a process's `metrics_address`;
//! HTTPS with client certificates when the cluster has `[tls]`) that serves them.
//!
//! Invariants:
//! - counters only go up; every family is registered once per registry, under the
//!   `megastore_` prefix;
//! - recording never blocks and never fails (atomics): instrumented code cannot be
//!   slowed or stopped by its metrics; only the scrape encodes.

mod families;
mod server;
mod tls;

pub use families::{
    ClientMetrics, ClientTotals, CoordinatorMetrics, LockdMetrics, ReadPathLabel, ReplicaMetrics,
};
pub use prometheus_client::registry::Registry;
pub use server::{MetricsError, MetricsServer, encode};
