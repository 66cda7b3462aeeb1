//! A worker of a task board: it claims tasks, does each one's side effect through the
//! side-effect ledger, and completes them — surviving other workers that die or stall
//! mid-task. Run several, at several sites, against one cluster:
//!
//! ```sh
//! megastore dev --data-dir /tmp/ms &
//! cargo run -p megastore-recipes --example board_worker -- /tmp/ms/cluster.toml A w1 --seed 8
//! cargo run -p megastore-recipes --example board_worker -- /tmp/ms/cluster.toml B w2
//! ```
//!
//! Arguments: the cluster's `cluster.toml`, the site to act from, the worker's name;
//! then `--seed N` (add tasks `t01`…`tNN` first), `--window MS` (wait this long between
//! deciding to do an effect and doing it: where a test kills or pauses a worker).
//!
//! Each task's effect is one row in a downstream group, `sent/<task>` of
//! `board-outbox` — think of an email sent. The worker writes it fenced by its claim's
//! generation, so a worker that lost its claim while paused is refused by the store.
//! An effect whose worker died after recording its intent is uncertain; the next
//! worker raises the fence to its own generation, so no late write can land, and only
//! then looks downstream to settle what happened.
//!
//! Prints one JSON line per event. Exits when every task on the board is done.

// An example shows what it does on stdout.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use megastore_client::{Assert, Client, Mutation, TxnResult};
use megastore_config::ClusterConfig;
use megastore_recipes::{
    Acquired, Action, Board, Claim, GroupBackend, Ledger, LedgerLease, NewTask, RecipeError,
    Resolution, Settled, TaskState,
};
use megastore_types::EgId;

/// How long a claim and a ledger attempt live unless renewed.
const TTL: Duration = Duration::from_millis(1_500);
/// How long the worker runs at most.
const RUN_MAX: Duration = Duration::from_secs(120);

fn say(event: serde_json::Value) {
    println!("{event}");
}

struct Worker {
    name: String,
    client: Client,
    board: Board<GroupBackend>,
    ledger: Ledger<GroupBackend>,
    outbox: EgId,
    window: Duration,
}

fn sent_key(task: &str) -> Vec<u8> {
    format!("sent/{task}").into_bytes()
}

fn fence_key(task: &str) -> Vec<u8> {
    format!("fence/{task}").into_bytes()
}

impl Worker {
    /// Does `claim`'s task: its effect at most once, then the task is done.
    async fn work(&self, claim: &Claim) -> anyhow::Result<()> {
        let task = claim.task.id.as_str();
        let action = Action {
            key: format!("send/{task}"),
            resource: format!("mailbox/{task}"),
        };
        for _ in 0..50 {
            match self.ledger.acquire(&action, TTL).await? {
                Acquired::Granted(lease) => return self.effect(claim, &lease).await,
                Acquired::Done(receipt) => {
                    self.board.complete(task, &claim.token).await?;
                    let receipt = String::from_utf8_lossy(&receipt).to_string();
                    say(
                        serde_json::json!({"event": "completed", "worker": self.name, "task": task, "receipt": receipt, "by": "earlier"}),
                    );
                    return Ok(());
                }
                Acquired::Uncertain { reason } => self.reconcile(claim, &action, &reason).await?,
                Acquired::InFlight { .. } | Acquired::Contended { .. } => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.board.renew(task, &claim.token, TTL).await?;
                }
            }
        }
        bail!("task {task}: the ledger never granted its effect")
    }

    /// Settles an effect whose attempt died: first fence out every older holder, then
    /// look at what the downstream system has.
    async fn reconcile(&self, claim: &Claim, action: &Action, reason: &str) -> anyhow::Result<()> {
        let task = claim.task.id.as_str();
        let fence = Assert::Fence {
            key: fence_key(task),
            token: claim.generation,
        };
        if let TxnResult::AssertFailed { .. } = self
            .client
            .versioned_txn(&self.outbox, &[fence], &[])
            .await?
        {
            bail!("task {task}: a newer holder fenced this one out");
        }
        let downstream = self
            .client
            .snapshot(&self.outbox, &[sent_key(task)])
            .await?;
        let resolution = match downstream[0].value.clone() {
            Some(receipt) => Resolution::Applied(receipt),
            None => Resolution::NotApplied,
        };
        let settled = match self.ledger.begin_reconcile(&action.key, TTL).await {
            Ok(owned) => {
                self.ledger
                    .resolve_uncertain_owned(&owned, &resolution)
                    .await?
            }
            // Someone else is reconciling it: look again later.
            Err(RecipeError::Reconciling { .. } | RecipeError::NothingToSettle { .. }) => {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let settled = match settled {
            Settled::Done(_) => "applied",
            Settled::Cleared => "not_applied",
        };
        say(
            serde_json::json!({"event": "reconciled", "worker": self.name, "task": task, "reason": reason, "settled": settled, "generation": claim.generation}),
        );
        Ok(())
    }

    async fn effect(&self, claim: &Claim, lease: &LedgerLease) -> anyhow::Result<()> {
        let task = claim.task.id.as_str();
        say(
            serde_json::json!({"event": "effect_next", "worker": self.name, "task": task, "generation": claim.generation}),
        );
        // Where a real worker might stall (a GC pause, a slow disk): after deciding, before acting.
        tokio::time::sleep(self.window).await;
        let receipt = format!("{} generation {}", self.name, claim.generation);
        let written = self
            .client
            .versioned_txn(
                &self.outbox,
                &[Assert::Fence {
                    key: fence_key(task),
                    token: claim.generation,
                }],
                &[Mutation::Put {
                    key: sent_key(task),
                    value: receipt.clone().into_bytes(),
                }],
            )
            .await?;
        if let TxnResult::AssertFailed { .. } = written {
            say(
                serde_json::json!({"event": "refused", "worker": self.name, "task": task, "generation": claim.generation}),
            );
            // The effect did not happen; the attempt is someone else's business now.
            let _ = self.ledger.abandon(lease).await;
            return Ok(());
        }
        self.ledger.complete(lease, receipt.as_bytes()).await?;
        self.board.complete(task, &claim.token).await?;
        say(
            serde_json::json!({"event": "completed", "worker": self.name, "task": task, "receipt": receipt, "by": "this"}),
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [config, site, name, options @ ..] = args.as_slice() else {
        bail!("usage: board_worker CLUSTER_TOML SITE NAME [--seed N] [--window MS]");
    };
    let (mut seed, mut window) = (0usize, Duration::ZERO);
    for pair in options.chunks(2) {
        match pair {
            [flag, n] if flag == "--seed" => seed = n.parse().context("--seed N")?,
            [flag, ms] if flag == "--window" => {
                window = Duration::from_millis(ms.parse().context("--window MS")?)
            }
            other => bail!("unknown option {other:?}"),
        }
    }
    let config = ClusterConfig::load(config.as_ref())?;
    let client = Client::connect(&config, site).await?;
    let backend = Arc::new(GroupBackend::new(
        client.clone(),
        megastore_client::group(b"board-tasks")?,
    ));
    let worker = Worker {
        name: name.clone(),
        client: client.clone(),
        board: Board::new(Arc::clone(&backend)),
        ledger: Ledger::new(backend),
        outbox: megastore_client::group(b"board-outbox")?,
        window,
    };
    if seed > 0 {
        let tasks: Vec<NewTask> = (1..=seed)
            .map(|i| NewTask {
                id: format!("t{i:02}"),
                deps: Vec::new(),
                payload: Vec::new(),
            })
            .collect();
        match worker.board.add(&tasks).await {
            Ok(()) | Err(RecipeError::TaskExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let started = Instant::now();
    while started.elapsed() < RUN_MAX {
        match worker.board.claim_any(name, TTL).await? {
            Some(claim) => {
                say(
                    serde_json::json!({"event": "claimed", "worker": name, "task": claim.task.id, "generation": claim.generation}),
                );
                if let Err(e) = worker.work(&claim).await {
                    say(
                        serde_json::json!({"event": "lost", "worker": name, "task": claim.task.id, "error": e.to_string()}),
                    );
                }
            }
            None => {
                let tasks = worker.board.list().await?;
                if !tasks.is_empty()
                    && tasks
                        .iter()
                        .all(|t| matches!(t.state, TaskState::Done { .. }))
                {
                    say(serde_json::json!({"event": "all_done", "worker": name}));
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    bail!("tasks were still open after {RUN_MAX:?}")
}
