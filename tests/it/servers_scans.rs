//! Global index scans over a replica whose groups lie on several servers
//! (docs/protocol.md, "Global indexes"): a server keeps the global index entries of
//! its own groups only, so a scan asks every server holding the replica's slot and
//! merges. After `megastore range move` hands one range of replica a to server a2, a
//! scan through replica a's gateway — whose client still routes by the placement from
//! before the split and the move, until a server's refusal makes it read the newer
//! one — answers exactly what the acknowledged writes left: no entry missing, none
//! stale, none twice, in index order.

use std::time::Duration;

use megastore_client::entity_group;
use megastore_schema::Value;

use crate::index_queries::{expected, streamed, until_equal, write_round};
use crate::servers::{a_and_a2_hold, cli_of, start_a2, with_servers};
use crate::support::{api_at, apply_schema, connect, start_cluster_edited};

/// `bytes` as `range split --at` takes them: every byte as `\xHH`.
fn escaped(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\x{b:02x}")).collect()
}

/// Photos of users at sites A and B, in two ranges; range-1's slot of replica a moves
/// to a2 while both sites rewrite every photo and replica b is SIGKILLed; then scans
/// through replica a's gateway, as applied and verified, answer exactly the photos
/// left, each once, in order.
#[test]
fn global_index_scans_after_a_move_ask_every_server_of_the_slot() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster_edited(with_servers);
    start_a2(&mut cluster);
    let config_arg = cluster.config_path.to_str().expect("UTF-8").to_string();
    let megastore = cli_of(&cluster, dir.path());
    let catalog = apply_schema(&config_arg, "schema/photos.msdl", dir.path());
    let users_a: Vec<i64> = (1..=4).collect();
    let users_b: Vec<i64> = (101..=104).collect();
    let users: Vec<i64> = users_a.iter().chain(&users_b).copied().collect();

    // Split between the users' groups, so that each range holds some.
    let mut keys: Vec<Vec<u8>> = users
        .iter()
        .map(|&u| {
            entity_group(&catalog, "User", &[Value::from(u)])
                .expect("a user's group")
                .0
        })
        .collect();
    keys.sort();
    let at = escaped(&keys[keys.len() / 2]);
    let out = megastore(&["range", "split", "--at", &at]);
    assert!(out.status.success(), "{out:?}");

    // The gateway at replica a: its client reads the placement now, before the move.
    let mut api = {
        let _in_runtime = runtime.enter();
        api_at(&config.replica("a").expect("replica a").address)
    };
    runtime.block_on(async {
        let (at_a, at_b) = (connect(&config, "A").await, connect(&config, "B").await);
        tokio::join!(
            write_round(&at_a, &catalog, &users_a, 1),
            write_round(&at_b, &catalog, &users_b, 1),
        );
        let before = streamed(&mut api, "all", true)
            .await
            .expect("a scan before the move");
        assert!(!before.is_empty(), "round 1 tags every photo");
    });

    // Round 2 at both sites while range-1 moves to a2; b is killed meanwhile.
    let moved = std::thread::scope(|scope| {
        let writing = scope.spawn(|| {
            runtime.block_on(async {
                let (at_a, at_b) = (connect(&config, "A").await, connect(&config, "B").await);
                tokio::join!(
                    write_round(&at_a, &catalog, &users_a, 2),
                    write_round(&at_b, &catalog, &users_b, 2),
                );
            })
        });
        std::thread::sleep(Duration::from_millis(200));
        let moved = megastore(&["range", "move", "1", "--replica", "a", "--to", "a2"]);
        cluster.process("replica-b").kill();
        writing.join().expect("the writers");
        moved
    });
    assert!(moved.status.success(), "{moved:?}");
    cluster.start_process("replica-b");

    let want = expected(&users);
    let all: Vec<(i64, i32)> = want
        .iter()
        .filter(|(_, tags)| tags.contains(&"all"))
        .map(|(k, _)| *k)
        .collect();
    runtime.block_on(async {
        // Each server holds its range (and a has retired range-1's entries).
        a_and_a2_hold(&config, &[0], &[1]).await;
        // Both ranges hold photos tagged `all`.
        let in_range_1 = all
            .iter()
            .filter(|(user, _)| {
                entity_group(&catalog, "User", &[Value::from(*user)])
                    .is_ok_and(|eg| eg.0 >= keys[keys.len() / 2])
            })
            .count();
        assert!(
            in_range_1 > 0 && in_range_1 < all.len(),
            "{in_range_1} of {} photos in range-1",
            all.len()
        );
        for verify in [true, false] {
            until_equal(
                &format!("photos tagged all after the move (verify {verify})"),
                &all,
                async || streamed(&mut api, "all", verify).await,
            )
            .await;
        }
    });
}
