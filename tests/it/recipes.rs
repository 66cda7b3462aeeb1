//! The coordination recipes on a real cluster: the contract suite on real entity groups
//! (the same one the in-process backend passes), then claim races between clients at
//! two sites while a replica is SIGKILLed and restarted. Every race must store exactly
//! one claim: generation 1, and the token of the winner if one was told it won. Then
//! the board example's workers, one killed and one paused mid-task.

use std::sync::Arc;
use std::time::Duration;

use megastore_e2e::{Process, example_bin};
use megastore_recipes::{
    Acquired, Action, Board, GroupBackend, Ledger, NewTask, RecipeError, TaskState, contract,
};

use crate::support::{connect, start_cluster};

const RACES: usize = 12;
const CLAIMERS_PER_SITE: usize = 3;

#[test]
fn the_recipes_keep_their_contract_and_claims_race_to_one_winner_under_a_kill() {
    let (_alone, _dir, mut cluster, config, runtime) = start_cluster();
    let (at_a, at_b) =
        runtime.block_on(async { (connect(&config, "A").await, connect(&config, "B").await) });

    runtime.block_on(contract::run_all(|case| {
        let eg = megastore_client::group(format!("recipes-{case}").as_bytes()).unwrap();
        Arc::new(GroupBackend::new(at_a.clone(), eg))
    }));

    let eg = megastore_client::group(b"recipes-board").unwrap();
    let board_a = Board::new(Arc::new(GroupBackend::new(at_a.clone(), eg.clone())));
    let board_b = Board::new(Arc::new(GroupBackend::new(at_b.clone(), eg)));
    let mut won = 0;
    for race in 0..RACES {
        if race == RACES / 3 {
            cluster.process("replica-b").kill();
        }
        if race == 2 * RACES / 3 {
            cluster.start_process("replica-b");
        }
        let id = format!("r{race:02}");
        let task = NewTask {
            id: id.clone(),
            deps: Vec::new(),
            payload: Vec::new(),
        };
        runtime.block_on(async {
            // The add may be retried after an unknown outcome: then it exists.
            for _ in 0..5 {
                match board_a.add(std::slice::from_ref(&task)).await {
                    Ok(()) | Err(RecipeError::TaskExists(_)) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
        let start = Arc::new(tokio::sync::Barrier::new(2 * CLAIMERS_PER_SITE));
        let racers: Vec<_> = (0..2 * CLAIMERS_PER_SITE)
            .map(|i| {
                let board = if i % 2 == 0 {
                    board_a.clone()
                } else {
                    board_b.clone()
                };
                let (start, id) = (Arc::clone(&start), id.clone());
                runtime.spawn(async move {
                    start.wait().await;
                    board
                        .claim(&id, &format!("claimer-{i}"), Duration::from_secs(60))
                        .await
                })
            })
            .collect();
        let results: Vec<_> = runtime
            .block_on(futures::future::join_all(racers))
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert!(
            winners.len() <= 1,
            "race {id}: {} winners: {results:?}",
            winners.len()
        );
        let stored = runtime
            .block_on(board_a.list())
            .unwrap()
            .into_iter()
            .find(|t| t.id == id)
            .unwrap();
        assert_eq!(
            stored.generation, 1,
            "race {id}: exactly one claim applied: {stored:?}"
        );
        if let [winner] = winners.as_slice() {
            assert_eq!(stored.state, winner.task.state, "race {id}");
            assert_eq!(winner.generation, 1);
            won += 1;
        } else {
            // Every claimer failed; one whose outcome was unknown won.
            assert!(
                matches!(stored.state, TaskState::Claimed { .. }),
                "race {id}: a claimer with an unknown outcome won: {stored:?}"
            );
        }
    }
    assert!(
        won >= RACES / 2,
        "only {won} of {RACES} races told their winner it won"
    );
}

/// One worker's events (JSON lines on its stdout).
fn worker_events(worker: &Process) -> Vec<serde_json::Value> {
    worker
        .finished_lines()
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The first event of `kind` a worker printed, waiting up to `limit` for it.
fn wait_for_event(worker: &Process, kind: &str, limit: Duration) -> serde_json::Value {
    let started = std::time::Instant::now();
    loop {
        if let Some(event) = worker_events(worker)
            .into_iter()
            .find(|e| e["event"] == kind)
        {
            return event;
        }
        assert!(
            started.elapsed() < limit,
            "no {kind} event from a worker within {limit:?}:\n{}",
            worker.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const TASKS: usize = 6;

/// The board example (`crates/recipes/examples/board_worker.rs`) as three worker
/// processes at two sites. Worker 1 is SIGKILLed after recording its intent, before
/// its effect. Worker 3 is SIGSTOPped at the same point, and resumed only once worker 2
/// has finished every task. Then every task must be done, each effect must have
/// happened exactly once, the ledger must hold each effect's receipt, the killed
/// worker's effect must have been reconciled, and the paused worker's late write must
/// have been refused by its fence.
#[test]
fn workers_at_two_sites_do_every_effect_once_through_a_kill_and_a_pause() {
    let (_alone, dir, cluster, config, runtime) = start_cluster();
    let worker = example_bin("board_worker");
    let path = cluster.config_path.to_str().unwrap().to_string();
    let start = |name: &str, site: &str, extra: &[&str]| {
        let mut args = vec![path.as_str(), site, name];
        args.extend_from_slice(extra);
        Process::start_program(name, &worker, &args, dir.path())
    };
    let seed = TASKS.to_string();
    let mut killed = start("w1", "A", &["--seed", &seed, "--window", "60000"]);
    let killed_task =
        wait_for_event(&killed, "effect_next", Duration::from_secs(60))["task"].clone();
    killed.kill();
    let paused = start("w3", "A", &["--window", "1000"]);
    let paused_at = wait_for_event(&paused, "effect_next", Duration::from_secs(60));
    paused.signal("STOP");
    let survivor = start("w2", "B", &[]);
    wait_for_event(&survivor, "all_done", Duration::from_secs(90));
    paused.signal("CONT");
    let refused = wait_for_event(&paused, "refused", Duration::from_secs(30));
    assert_eq!(
        (&refused["task"], &refused["generation"]),
        (&paused_at["task"], &paused_at["generation"]),
        "the paused worker's late effect was refused by its fence"
    );
    let survivor_events = worker_events(&survivor);
    let paused_events = worker_events(&paused);
    let reconciled = survivor_events
        .iter()
        .chain(&paused_events)
        .find(|e| e["event"] == "reconciled" && e["task"] == killed_task)
        .unwrap_or_else(|| panic!("nobody reconciled {killed_task}: {survivor_events:?}"));
    assert_eq!(reconciled["settled"], "not_applied", "{reconciled}");

    runtime.block_on(async {
        let client = connect(&config, "A").await;
        let backend = Arc::new(GroupBackend::new(
            client.clone(),
            megastore_client::group(b"board-tasks").unwrap(),
        ));
        let tasks = Board::new(Arc::clone(&backend)).list().await.unwrap();
        assert_eq!(tasks.len(), TASKS);
        let outbox = megastore_client::group(b"board-outbox").unwrap();
        let ledger = Ledger::new(backend);
        for task in &tasks {
            assert!(matches!(task.state, TaskState::Done { .. }), "{task:?}");
            let sent = client
                .snapshot(&outbox, &[format!("sent/{}", task.id).into_bytes()])
                .await
                .unwrap()
                .remove(0);
            assert_eq!(
                sent.version, 1,
                "{}: its effect happened exactly once",
                task.id
            );
            let receipt = sent.value.unwrap();
            // Written by a holder of the task: usually its last one, an earlier one if
            // that holder's claim lapsed after its effect (then the next settled it).
            let generation: u64 = String::from_utf8_lossy(&receipt)
                .rsplit(' ')
                .next()
                .and_then(|g| g.parse().ok())
                .unwrap_or_else(|| panic!("{}: receipt {receipt:?}", task.id));
            assert!(
                (1..=task.generation).contains(&generation),
                "{}: receipt of generation {generation}, task at {}",
                task.id,
                task.generation
            );
            let action = Action {
                key: format!("send/{}", task.id),
                resource: format!("mailbox/{}", task.id),
            };
            assert_eq!(
                ledger
                    .acquire(&action, Duration::from_secs(1))
                    .await
                    .unwrap(),
                Acquired::Done(receipt),
                "{}: the ledger holds the receipt",
                task.id
            );
        }
        let taken_over: Vec<&str> = tasks
            .iter()
            .filter(|t| t.generation > 1)
            .map(|t| t.id.as_str())
            .collect();
        for task in [&killed_task, &paused_at["task"]] {
            assert!(
                taken_over.contains(&task.as_str().unwrap()),
                "{task} was taken over: {taken_over:?}"
            );
        }
    });
}
