//! Coordination recipes over megastore's versioned primitives (seed `000`): a **task
//! board** (atomic claim, release and completion by token, renewal as an eligibility
//! check, takeover generations that only grow, dependencies between tasks) and a
//! **side-effect ledger** (an intent recorded before an external effect, outcomes that
//! can be *uncertain*, reconciliation that settles them).
//!
//! Responsibility: the recipes' decision logic, once. It is written only against
//! [`Backend`]'s three primitives — a consistent snapshot of several keys, a
//! transaction conditional on per-key versions, listing keys by prefix — so the backend
//! only makes those atomic. [`GroupBackend`] puts them on one megastore entity group.
//!
//! Not here: leases of the lock service (the recipes keep their own expiry in their
//! records, judged by the recipe's clock, as the seed prescribes), and any protocol: a
//! recipe is a client of the store.
//!
//! Invariants:
//! - *decisions-are-asserted*: every key a decision read is asserted at the version it
//!   read, in the transaction that writes the decision; a decision whose keys changed
//!   is taken again on a new snapshot ([`cas`]);
//! - *generations-grow*: a task's generation (and a ledger resource's) moves up by
//!   exactly one with each grant, never down, never reused — it is a fencing token for
//!   the holder's writes elsewhere (`megastore_client::Assert::Fence`);
//! - *tokens-minted-on-commit*: a claim's token is fresh randomness for each attempt,
//!   and only the attempt whose transaction commits has its token stored;
//! - *intents-block*: an action whose intent was recorded is never granted again until
//!   its outcome is settled — completed, abandoned by its holder, or resolved.
//!
//! Expiry is judged by the recipe's clock ([`Clock`], injectable for tests), in
//! milliseconds since the Unix epoch: two processes whose clocks differ by δ disagree
//! about expiry by δ. A takeover δ early is safe for the records — the old holder's
//! token no longer matches, so its completion is refused — and writes elsewhere are
//! safe if they are fenced by the generation.

mod backend;
pub mod board;
pub mod cas;
pub mod contract;
pub mod ledger;
mod ledger_reconcile;
mod records;

use std::sync::Arc;

pub use backend::{Assert, Backend, BackendError, Entry, GroupBackend, MemoryBackend, Mutation};
pub use board::{Board, Claim, NewTask, Task, TaskState, concurrent_claim};
pub use cas::{CAS_ATTEMPTS_MAX, CheckError, concurrent_txn};
pub use ledger::{Acquired, Action, Ledger, LedgerLease};
pub use ledger_reconcile::{Reconcile, Resolution, Settled};

/// Milliseconds since the Unix epoch, as the recipe judges expiry.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    })
}

/// Why a recipe call did not do what was asked. Everything but [`RecipeError::Backend`]
/// and [`RecipeError::TxnConflict`] is a definite answer: nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    /// The backend failed; a write may or may not have happened.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The keys kept changing under the decision; nothing was written by the last
    /// attempt.
    #[error("gave up after {attempts} attempts: the keys kept changing under the decision")]
    TxnConflict {
        /// How many snapshots were decided on.
        attempts: usize,
    },
    /// A key holds bytes this crate did not write.
    #[error("key {key} does not hold a record of this recipe: {why}")]
    Malformed {
        /// The key.
        key: String,
        /// What is wrong.
        why: String,
    },
    /// A request that cannot be served as asked.
    #[error("{0}")]
    InvalidArgument(String),
    /// No task has this id.
    #[error("no task {0}")]
    NoSuchTask(String),
    /// A task with this id exists already.
    #[error("task {0} exists already")]
    TaskExists(String),
    /// The task is done.
    #[error("task {0} is done")]
    TaskDone(String),
    /// Another agent's claim on the task is live.
    #[error("task {id} is claimed by {agent} until {until_ms}")]
    Held {
        /// The task.
        id: String,
        /// Its holder.
        agent: String,
        /// When the claim ends unless renewed (ms since the epoch).
        until_ms: u64,
    },
    /// The task waits on tasks that are not done.
    #[error("task {id} waits on {waiting:?}")]
    Blocked {
        /// The task.
        id: String,
        /// Its dependencies not done yet.
        waiting: Vec<String>,
    },
    /// The claim or lease this token names is no longer the holder's: it expired, or
    /// another took over. Nothing was changed.
    #[error("the lease on {0} is lost: expired, released or taken over")]
    LeaseLost(String),
    /// Another reconciler's claim on the action is live.
    #[error("action {key} is being reconciled by {holder} until {until_ms}")]
    Reconciling {
        /// The action.
        key: String,
        /// Its reconciler.
        holder: String,
        /// When its claim ends.
        until_ms: u64,
    },
    /// The action has no outcome to settle (no intent, or one still live).
    #[error("action {key} has nothing to settle: {why}")]
    NothingToSettle {
        /// The action.
        key: String,
        /// Its state.
        why: String,
    },
}

/// A fresh token: 128 random bits, hex.
pub(crate) fn mint_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}
