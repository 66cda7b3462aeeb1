//! Typed entities of the paper's photo schema through the client library, against a
//! real cluster: local indexes kept with their entities, scans, read-your-writes, and
//! no phantoms.

use std::time::{Duration, Instant};

use megastore_client::{Attempt, ClientError, IndexQuery, entity_group};
use megastore_config::ClusterConfig;
use megastore_e2e::{LocalCluster, repo_root};
use megastore_schema::{Catalog, Entity, Value};

use crate::support::connect;

fn photo(user: i64, id: i32, time: i64) -> Entity {
    Entity::new("Photo")
        .set("user_id", user)
        .set("photo_id", id)
        .set("time", time)
        .set(
            "full_url",
            format!("https://photos.example/{user}/{id}.jpg"),
        )
        .set_repeated("tag", ["beach"])
}

fn photo_ids(photos: &[Entity]) -> Vec<i32> {
    photos
        .iter()
        .map(|p| match p.value("photo_id") {
            Some(Value::Int32(id)) => *id,
            other => panic!("photo_id is {other:?}"),
        })
        .collect()
}

#[test]
fn photo_schema_entities_indexes_and_scans_without_phantoms() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let text = std::fs::read_to_string(repo_root().join("schema/photos.msdl")).unwrap();
    let catalog: Catalog = megastore_schema::compile("photos.msdl", &text, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _cluster = LocalCluster::start(dir.path());
    let config = ClusterConfig::load(&dir.path().join("cluster.toml")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let at_a = connect(&config, "A").await;
        let at_b = connect(&config, "B").await;
        let user = [Value::from(7i64)];
        let eg = entity_group(&catalog, "User", &user).unwrap();

        // A user and three photos in one transaction (retried while the cluster starts).
        let started = Instant::now();
        loop {
            let attempt = at_a
                .transaction(&eg, async |txn| {
                    let ann = Entity::new("User").set("user_id", 7i64).set("name", "ann");
                    txn.put_entity(&catalog, &ann).await?;
                    for (id, time) in [(1, 300), (2, 100), (3, 200)] {
                        txn.put_entity(&catalog, &photo(7, id, time)).await?;
                    }
                    // Read-your-writes, by key and by scan.
                    let seen = txn.get_entity(&catalog, "Photo", &[7i64.into(), 2i32.into()]).await?;
                    assert_eq!(seen.and_then(|p| p.value("time").cloned()), Some(Value::Int64(100)));
                    assert_eq!(photo_ids(&txn.scan_table(&catalog, "Photo", &user, None).await?), vec![1, 2, 3]);
                    Ok(())
                })
                .await;
            match attempt {
                Ok(_) => break,
                Err(e) => {
                    assert!(started.elapsed() < Duration::from_secs(20), "no first commit: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }

        // From the other site: the local index orders photos by time.
        let (by_time, _) = at_b
            .transaction(&eg, async |txn| txn.scan_index(&catalog, &IndexQuery::new("PhotosByTime").equal(user.clone())).await)
            .await
            .unwrap();
        let ids: Vec<Value> = by_time.entries.iter().map(|e| e.primary_key[1].clone()).collect();
        assert_eq!(ids, vec![Value::Int32(2), Value::Int32(3), Value::Int32(1)]);

        // Moving a photo in time moves its index entry; deleting one removes both.
        at_b.transaction(&eg, async |txn| {
            txn.put_entity(&catalog, &photo(7, 1, 50)).await?;
            assert!(txn.delete_entity(&catalog, "Photo", &[7i64.into(), 3i32.into()]).await?);
            Ok(())
        })
        .await
        .unwrap();
        let ((photos, by_time), _) = at_a
            .transaction(&eg, async |txn| {
                let photos = txn.scan_table(&catalog, "Photo", &user, None).await?;
                let by_time = txn.scan_index(&catalog, &IndexQuery::new("PhotosByTime").equal(user.clone())).await?;
                Ok((photos, by_time))
            })
            .await
            .unwrap();
        assert_eq!(photo_ids(&photos), vec![1, 2]);
        let times: Vec<Value> = by_time.entries.iter().map(|e| e.values[1].clone()).collect();
        assert_eq!(times, vec![Value::Int64(50), Value::Int64(100)]);

        // Outside transactions: a snapshot read of a photo at the read-only replica.
        let at_d = connect(&config, "D").await;
        let started = Instant::now();
        loop {
            let read = at_d
                .read_entity(&catalog, megastore_paxos::ReadMode::Snapshot, "Photo", &[7i64.into(), 1i32.into()])
                .await
                .unwrap();
            if read.entity.as_ref().and_then(|p| p.value("time")) == Some(&Value::Int64(50)) {
                assert_eq!(read.replica, megastore_types::ReplicaId(4), "served by the read-only replica");
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "never saw the moved photo: {read:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // No phantoms: a transaction that counted the photos conflicts with one that
        // added a photo meanwhile, naming the new row.
        let mut counting = at_a.begin(&eg);
        let count = counting.scan_table(&catalog, "Photo", &user, None).await.unwrap().len();
        let ann = Entity::new("User").set("user_id", 7i64).set("name", format!("ann ({count} photos)"));
        counting.put_entity(&catalog, &ann).await.unwrap();
        at_b.transaction(&eg, async |txn| txn.put_entity(&catalog, &photo(7, 9, 900)).await)
            .await
            .unwrap();
        match counting.commit().await.unwrap() {
            Attempt::Retry { keys, .. } => {
                let t = catalog.table("Photo").unwrap();
                let new_row = catalog.entity_row_key(t, &[7i64.into(), 9i32.into()]).unwrap();
                assert!(keys.contains(&new_row), "the conflict names the new photo: {keys:?}");
            }
            Attempt::Done(outcome) => panic!("a phantom slipped through: {outcome:?}"),
        }

        // Nor through an index range: a transaction that read the photos taken at 950
        // or later conflicts with one that added such a photo, naming its entry.
        let mut late = at_a.begin(&eg);
        let recent = IndexQuery::new("PhotosByTime").equal(user.clone()).at_least(950i64);
        assert!(late.scan_index(&catalog, &recent).await.unwrap().entries.is_empty());
        late.put_entity(&catalog, &Entity::new("User").set("user_id", 7i64).set("name", "ann (none late)"))
            .await
            .unwrap();
        at_b.transaction(&eg, async |txn| txn.put_entity(&catalog, &photo(7, 10, 1000)).await)
            .await
            .unwrap();
        match late.commit().await.unwrap() {
            Attempt::Retry { keys, .. } => {
                let i = catalog.index("PhotosByTime").unwrap();
                let entry = catalog
                    .index_entry_key(i, &[7i64.into(), 1000i64.into()], &[7i64.into(), 10i32.into()])
                    .unwrap();
                assert!(keys.contains(&entry), "the conflict names the new entry: {keys:?}");
            }
            Attempt::Done(outcome) => panic!("a phantom slipped through the index range: {outcome:?}"),
        }

        // An entity of another group is refused, naming why.
        let mut txn = at_a.begin(&eg);
        let wrong = txn.put_entity(&catalog, &photo(8, 1, 1)).await.unwrap_err();
        assert!(
            matches!(&wrong, ClientError::Schema(m)
                if m.contains("Photo(8, 1) lives in the entity group of User(8), not in this transaction's, User(7)")),
            "{wrong}"
        );
        let bad = txn
            .put_entity(&catalog, &Entity::new("Photo").set("user_id", 7i64))
            .await
            .unwrap_err();
        assert!(matches!(bad, ClientError::Schema(_)), "{bad}");
    });
}
