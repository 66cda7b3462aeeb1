//! The task board: tasks claimed atomically, released and completed by token, renewed
//! only by their holder while the claim lives, taken over after it lapses with a
//! generation one higher, and claimable only once every task they depend on is done.
//!
//! Each task is one record, `task/<id>`, so a decision reads that record and its
//! dependencies' — which it learns from the record, then snapshots again with them
//! (the key set is dynamic; `Step::Need`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backend::{Backend, Entry};
use crate::cas::{Step, cas_loop};
use crate::records::{decode, put};
use crate::{Clock, RecipeError, mint_token, system_clock};

const TASKS: &str = "task/";

/// Where a task stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Nobody holds it (never claimed, released, or its claim lapsed and nobody took
    /// it since).
    Open,
    /// Claimed: `agent` holds it with `token` until `until_ms` unless renewed.
    Claimed {
        /// The holder.
        agent: String,
        /// The claim's token, minted by the claim that committed.
        token: String,
        /// When the claim lapses (ms since the epoch, the recipe's clock).
        until_ms: u64,
    },
    /// Completed by `agent`.
    Done {
        /// Who completed it.
        agent: String,
    },
}

/// A task's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// Its id.
    pub id: String,
    /// Tasks that must be done before it can be claimed.
    pub deps: Vec<String>,
    /// What the task is (the application's bytes).
    pub payload: Vec<u8>,
    /// Where it stands.
    pub state: TaskState,
    /// Grants so far: one higher with every claim (*generations-grow*). A holder's
    /// fencing token for its writes elsewhere.
    pub generation: u64,
}

/// A task to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    /// Its id (non-empty, no `/`).
    pub id: String,
    /// Tasks that must be done first.
    pub deps: Vec<String>,
    /// What the task is.
    pub payload: Vec<u8>,
}

/// A granted claim: the holder's proof for renew, release and complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The task as the claim left it.
    pub task: Task,
    /// The claim's token.
    pub token: String,
    /// The claim's generation: a fencing token for writes elsewhere.
    pub generation: u64,
    /// When it lapses unless renewed (ms since the epoch).
    pub until_ms: u64,
}

/// A task board on a backend.
pub struct Board<B> {
    backend: Arc<B>,
    clock: Clock,
}

impl<B> Clone for Board<B> {
    fn clone(&self) -> Self {
        Self {
            backend: Arc::clone(&self.backend),
            clock: Arc::clone(&self.clock),
        }
    }
}

fn task_key(id: &str) -> String {
    format!("{TASKS}{id}")
}

fn check_id(id: &str) -> Result<(), RecipeError> {
    if id.is_empty() || id.contains('/') {
        return Err(RecipeError::InvalidArgument(format!(
            "task id {id:?}: give a non-empty id without '/'"
        )));
    }
    Ok(())
}

fn millis(ttl: Duration) -> Result<u64, RecipeError> {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Err(RecipeError::InvalidArgument(
            "a claim's ttl must be at least 1 ms".into(),
        ));
    }
    Ok(ms)
}

fn task_of(snapshot: &BTreeMap<String, Entry>, id: &str) -> Result<Task, RecipeError> {
    decode(snapshot, &task_key(id))?.ok_or_else(|| RecipeError::NoSuchTask(id.to_string()))
}

/// The claim `token` still holds on `task` at `now`, else why not.
fn held_by<'a>(task: &'a Task, token: &str, now: u64) -> Result<(&'a str, u64), RecipeError> {
    match &task.state {
        TaskState::Claimed {
            agent,
            token: held,
            until_ms,
        } if held == token && *until_ms > now => Ok((agent.as_str(), *until_ms)),
        _ => Err(RecipeError::LeaseLost(task.id.clone())),
    }
}

impl<B: Backend> Board<B> {
    /// A board on `backend`, judging expiry by the system clock.
    pub fn new(backend: Arc<B>) -> Self {
        Self {
            backend,
            clock: system_clock(),
        }
    }

    /// The same board judging expiry by `clock` (tests make time pass with it).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Adds open tasks, all or none; an id that exists already is refused.
    pub async fn add(&self, tasks: &[NewTask]) -> Result<(), RecipeError> {
        for task in tasks {
            check_id(&task.id)?;
            for dep in &task.deps {
                check_id(dep)?;
            }
        }
        let keys = tasks.iter().map(|t| task_key(&t.id)).collect();
        cas_loop(&*self.backend, keys, |snapshot| {
            let mut writes = Vec::new();
            for new in tasks {
                let key = task_key(&new.id);
                if snapshot.get(&key).is_some_and(|e| e.value.is_some()) {
                    return Err(RecipeError::TaskExists(new.id.clone()));
                }
                let task = Task {
                    id: new.id.clone(),
                    deps: new.deps.clone(),
                    payload: new.payload.clone(),
                    state: TaskState::Open,
                    generation: 0,
                };
                writes.push(put(&key, &task));
            }
            Ok(Step::Write(writes, ()))
        })
        .await
    }

    /// Claims task `id` for `agent` for `ttl`: granted if it is open (or its claim
    /// lapsed) and every dependency is done. The generation moves up by one.
    pub async fn claim(&self, id: &str, agent: &str, ttl: Duration) -> Result<Claim, RecipeError> {
        check_id(id)?;
        let ttl = millis(ttl)?;
        cas_loop(&*self.backend, vec![task_key(id)], |snapshot| {
            let now = (self.clock)();
            let task = task_of(snapshot, id)?;
            let dep_keys: Vec<String> = task.deps.iter().map(|d| task_key(d)).collect();
            if dep_keys.iter().any(|k| !snapshot.contains_key(k)) {
                return Ok(Step::Need(dep_keys));
            }
            match &task.state {
                TaskState::Done { .. } => return Err(RecipeError::TaskDone(id.to_string())),
                TaskState::Claimed {
                    agent, until_ms, ..
                } if *until_ms > now => {
                    return Err(RecipeError::Held {
                        id: id.to_string(),
                        agent: agent.clone(),
                        until_ms: *until_ms,
                    });
                }
                _ => {}
            }
            let mut waiting = Vec::new();
            for dep in &task.deps {
                // A dependency not added yet is waited for like one not done.
                let dep_task: Option<Task> = decode(snapshot, &task_key(dep))?;
                if !dep_task.is_some_and(|t| matches!(t.state, TaskState::Done { .. })) {
                    waiting.push(dep.clone());
                }
            }
            if !waiting.is_empty() {
                return Err(RecipeError::Blocked {
                    id: id.to_string(),
                    waiting,
                });
            }
            // A fresh token for every attempt: only the one that commits is stored.
            let token = mint_token();
            let until_ms = now.saturating_add(ttl);
            let claimed = Task {
                state: TaskState::Claimed {
                    agent: agent.to_string(),
                    token: token.clone(),
                    until_ms,
                },
                generation: task.generation + 1,
                ..task
            };
            let claim = Claim {
                generation: claimed.generation,
                task: claimed.clone(),
                token,
                until_ms,
            };
            Ok(Step::Write(vec![put(&task_key(id), &claimed)], claim))
        })
        .await
    }

    /// Extends the claim `token` holds on `id` by `ttl` from now — only while it still
    /// holds it: renewal is an eligibility check, not a heartbeat. Otherwise
    /// [`RecipeError::LeaseLost`], and nothing changes.
    pub async fn renew(&self, id: &str, token: &str, ttl: Duration) -> Result<Claim, RecipeError> {
        check_id(id)?;
        let ttl = millis(ttl)?;
        cas_loop(&*self.backend, vec![task_key(id)], |snapshot| {
            let now = (self.clock)();
            let task = task_of(snapshot, id)?;
            let (agent, _) = held_by(&task, token, now)?;
            let until_ms = now.saturating_add(ttl);
            let renewed = Task {
                state: TaskState::Claimed {
                    agent: agent.to_string(),
                    token: token.to_string(),
                    until_ms,
                },
                ..task.clone()
            };
            let claim = Claim {
                generation: renewed.generation,
                task: renewed.clone(),
                token: token.to_string(),
                until_ms,
            };
            Ok(Step::Write(vec![put(&task_key(id), &renewed)], claim))
        })
        .await
    }

    /// Gives the claim back: the task is open again (its generation stays, so a later
    /// claim's is higher still).
    pub async fn release(&self, id: &str, token: &str) -> Result<(), RecipeError> {
        check_id(id)?;
        cas_loop(&*self.backend, vec![task_key(id)], |snapshot| {
            let task = task_of(snapshot, id)?;
            held_by(&task, token, (self.clock)())?;
            let open = Task {
                state: TaskState::Open,
                ..task
            };
            Ok(Step::Write(vec![put(&task_key(id), &open)], ()))
        })
        .await
    }

    /// Marks the task done, if `token`'s claim still holds it.
    pub async fn complete(&self, id: &str, token: &str) -> Result<(), RecipeError> {
        check_id(id)?;
        cas_loop(&*self.backend, vec![task_key(id)], |snapshot| {
            let task = task_of(snapshot, id)?;
            let (agent, _) = held_by(&task, token, (self.clock)())?;
            let done = Task {
                state: TaskState::Done {
                    agent: agent.to_string(),
                },
                ..task.clone()
            };
            Ok(Step::Write(vec![put(&task_key(id), &done)], ()))
        })
        .await
    }

    /// Every task, in id order, from one snapshot.
    pub async fn list(&self) -> Result<Vec<Task>, RecipeError> {
        let keys = self.backend.keys(TASKS).await?;
        let snapshot = self.backend.snapshot(&keys).await?;
        let mut tasks = Vec::new();
        for key in &keys {
            // A task listed, then gone by the snapshot, is skipped: tasks are never
            // deleted by this crate, so that only happens to foreign keys.
            if let Some(task) = decode::<Task>(&snapshot, key)? {
                tasks.push(task);
            }
        }
        Ok(tasks)
    }

    /// Claims the first task (in id order) that can be claimed now, if any.
    pub async fn claim_any(
        &self,
        agent: &str,
        ttl: Duration,
    ) -> Result<Option<Claim>, RecipeError> {
        let now = (self.clock)();
        let tasks = self.list().await?;
        let done: Vec<&str> = tasks
            .iter()
            .filter(|t| matches!(t.state, TaskState::Done { .. }))
            .map(|t| t.id.as_str())
            .collect();
        for task in &tasks {
            let free = match &task.state {
                TaskState::Open => true,
                TaskState::Claimed { until_ms, .. } => *until_ms <= now,
                TaskState::Done { .. } => false,
            };
            if !free || !task.deps.iter().all(|d| done.contains(&d.as_str())) {
                continue;
            }
            match self.claim(&task.id, agent, ttl).await {
                Ok(claim) => return Ok(Some(claim)),
                // Someone was quicker, or it changed since the listing: try the next.
                Err(
                    RecipeError::Held { .. }
                    | RecipeError::TaskDone(_)
                    | RecipeError::Blocked { .. },
                ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

/// The claim-race check of seed `000` (`ConcurrentClaim`): `claimers` agents claim
/// task `id` at once, each for `ttl`. Exactly one must win, every other must be told it is held, and
/// the task's generation must move up by exactly one.
pub async fn concurrent_claim<B: Backend + 'static>(
    board: &Board<B>,
    id: &str,
    claimers: usize,
    ttl: Duration,
) -> Result<Claim, crate::cas::CheckError> {
    use crate::cas::CheckError;
    let before = board
        .list()
        .await
        .map_err(|e| CheckError::Backend(e.to_string()))?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| CheckError::Broken(format!("no task {id} to race for")))?;
    let start = Arc::new(tokio::sync::Barrier::new(claimers));
    let racers: Vec<_> = (0..claimers)
        .map(|i| {
            let (board, start, id) = (board.clone(), Arc::clone(&start), id.to_string());
            tokio::spawn(async move {
                start.wait().await;
                board.claim(&id, &format!("claimer-{i}"), ttl).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for racer in futures::future::join_all(racers).await {
        match racer {
            Ok(Ok(claim)) => winners.push(claim),
            Ok(Err(RecipeError::Held { .. })) => {}
            Ok(Err(e)) => return Err(CheckError::Backend(e.to_string())),
            Err(e) => return Err(CheckError::Backend(format!("a claimer panicked: {e}"))),
        }
    }
    let [winner] = winners.as_slice() else {
        return Err(CheckError::Broken(format!(
            "{} of {claimers} claimers won; exactly one must",
            winners.len()
        )));
    };
    let after = board
        .list()
        .await
        .map_err(|e| CheckError::Backend(e.to_string()))?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or_else(|| CheckError::Broken(format!("task {id} vanished")))?;
    if after.generation != before.generation + 1 || winner.generation != after.generation {
        return Err(CheckError::Broken(format!(
            "the generation went from {} to {} (the winner was told {}); one claim moves it by exactly one",
            before.generation, after.generation, winner.generation
        )));
    }
    if after.state != winner.task.state {
        return Err(CheckError::Broken(format!(
            "the stored claim {:?} is not the winner's {:?}",
            after.state, winner.task.state
        )));
    }
    Ok(winner.clone())
}
