//! The coordination recipes on a real cluster: the contract suite on real entity groups
//! (the same one the in-process backend passes), then claim races between clients at
//! two sites while a replica is SIGKILLed and restarted. Every race must store exactly
//! one claim: generation 1, and the token of the winner if one was told it won.

use std::sync::Arc;
use std::time::Duration;

use megastore_recipes::{Board, GroupBackend, NewTask, RecipeError, TaskState, contract};

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
