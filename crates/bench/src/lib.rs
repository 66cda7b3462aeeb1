//! `megastore bench`'s workload: closed-loop clients against a running cluster.
//!
//! Responsibility: run a bounded mix of reads and writes over a set of entity groups
//! with a number of concurrent clients, and measure each operation's latency into an
//! hdrhistogram per operation kind (and, if asked, what completed in each interval of a
//! timeline, to see a stall); and time the cross-group queries of the photo
//! schema (global index scans, merge-joins, parallel lookups) one at a time, a queue
//! message's way from its sender's commit to its consumption at another site, and a
//! transaction across two groups next to the same transaction in one, and a committed
//! change's way to a watcher at another site; the task board's claims and completions
//! and leases' keep-alives; the same closed loop through the public gRPC API, as a
//! client in another language drives it; and the same closed loop (and watch, board
//! and leases) against an etcd cluster, for a side-by-side comparison.
//!
//! Invariants:
//! - every run is bounded: it stops at its operation count or its duration, whichever
//!   comes first, and no operation is started after the deadline;
//! - only operations that completed are timed; a failed operation is counted as an
//!   error of its kind (with the first few messages kept), never as a latency sample,
//!   and a write that gave up on conflicts is counted as a conflict, not an error.

mod closed_loop;
mod coordination;
mod etcd;
mod grpc;
mod queries;
mod queues;
mod report;
mod timing;
mod two_phase;
mod watches;
mod workload;

pub use coordination::{
    CoordinationReport, EtcdBackend, run_board, run_etcd_board, run_etcd_leases, run_leases,
};
pub use etcd::run_etcd;
pub use grpc::run_grpc;
pub use queries::{QueryReport, run_queries};
pub use queues::{QueueReport, run_queues};
pub use report::{Interval, KindReport, Report, Timeline};
pub use timing::QueryKind;
pub use two_phase::{HOT_WARM_UP_MAX, HOT_WRITE_ATTEMPTS, TwoPhaseReport, run_two_phase};
pub use watches::{WatchReport, run_etcd_watches, run_watches};
pub use workload::{Spec, SpecError, run};
