//! Every path of the public API, tried by one user on another's data (`users`): each
//! is refused before it reaches Paxos, and the data stays as its owner left it.

use megastore_rpc::pb::client as pb;
use tonic::Code;

use crate::users::{
    Api, OPERATOR, bearer, int64, put, refused, rows, string, user_root, write_request,
};

/// Alice's data; bob tries to reach it by every path the API has.
pub(crate) async fn every_path_is_refused(api: &mut Api, alice: &str, bob: &str) {
    use pb::assert::Condition;
    let denied = Code::PermissionDenied;
    put(api, alice, "alice/1", "k", "alice's").await.unwrap();
    let versioned = api
        .versioned_txn(bearer(
            pb::VersionedTxnRequest {
                eg: b"alice/1".to_vec(),
                asserts: vec![],
                mutations: vec![pb::Mutation {
                    key: b"vk".to_vec(),
                    change: Some(pb::mutation::Change::Put(b"alice's".to_vec())),
                }],
            },
            alice,
        ))
        .await;
    assert!(versioned.is_ok(), "{versioned:?}");
    // A typed group: User 1 and its photo, tagged.
    let txn = api
        .begin(bearer(
            pb::BeginRequest {
                eg: vec![],
                root: Some(user_root(1)),
                ..Default::default()
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner()
        .txn;
    let entity = |table: &str, fields: Vec<(&str, pb::Value)>| pb::Entity {
        table: table.into(),
        fields: fields
            .into_iter()
            .map(|(name, value)| {
                let value = if name == "tag" {
                    pb::field_value::Value::Repeated(pb::Values {
                        values: vec![value],
                    })
                } else {
                    pb::field_value::Value::Single(value)
                };
                (name.to_string(), pb::FieldValue { value: Some(value) })
            })
            .collect(),
        inline: Default::default(),
    };
    for e in [
        entity(
            "User",
            vec![("user_id", int64(1)), ("name", string("alice"))],
        ),
        entity(
            "Photo",
            vec![
                ("user_id", int64(1)),
                (
                    "photo_id",
                    pb::Value {
                        kind: Some(pb::value::Kind::Int32(1)),
                    },
                ),
                ("time", int64(5)),
                ("full_url", string("u")),
                ("tag", string("secret")),
            ],
        ),
    ] {
        api.put_entity(bearer(
            pb::PutEntityRequest {
                txn,
                entity: Some(e),
            },
            alice,
        ))
        .await
        .unwrap();
    }
    api.commit(bearer(pb::CommitRequest { txn }, alice))
        .await
        .unwrap();

    let range = || pb::RowQuery {
        query: Some(pb::row_query::Query::Range(pb::row_query::Range::default())),
    };
    // Untyped: reads, transactions, the versioned primitives, watches.
    refused(
        "Read",
        api.read(bearer(
            pb::ReadRequest {
                eg: b"alice/1".to_vec(),
                mode: pb::ReadMode::Current as i32,
                query: Some(range()),
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "Read inconsistent",
        api.read(bearer(
            pb::ReadRequest {
                eg: b"alice/1".to_vec(),
                mode: pb::ReadMode::Inconsistent as i32,
                query: Some(range()),
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "Begin",
        api.begin(bearer(
            pb::BeginRequest {
                eg: b"alice/1".to_vec(),
                root: None,
                ..Default::default()
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "Snapshot",
        api.snapshot(bearer(
            pb::SnapshotRequest {
                eg: b"alice/1".to_vec(),
                keys: vec![b"vk".to_vec()],
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "Keys",
        api.keys(bearer(
            pb::KeysRequest {
                eg: b"alice/1".to_vec(),
                prefix: vec![],
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "VersionedTxn put",
        api.versioned_txn(bearer(
            pb::VersionedTxnRequest {
                eg: b"alice/1".to_vec(),
                asserts: vec![],
                mutations: vec![pb::Mutation {
                    key: b"vk".to_vec(),
                    change: Some(pb::mutation::Change::Put(b"bob's".to_vec())),
                }],
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "VersionedTxn assert",
        api.versioned_txn(bearer(
            pb::VersionedTxnRequest {
                eg: b"alice/1".to_vec(),
                asserts: vec![pb::Assert {
                    key: b"vk".to_vec(),
                    condition: Some(Condition::Version(1)),
                }],
                mutations: vec![],
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "Watch",
        api.watch(bearer(
            pb::WatchRequest {
                eg: b"alice/1".to_vec(),
                from_position: 0,
                keys: Some(pb::watch_request::Keys::KeyPrefix(vec![])),
            },
            bob,
        ))
        .await
        .map(|_| ()),
        denied,
    );
    refused(
        "Resolve",
        api.resolve(bearer(
            pb::ResolveRequest {
                eg: b"alice/1".to_vec(),
                root: None,
                id: None,
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "ResolveMulti",
        api.resolve_multi(bearer(
            pb::ResolveRequest {
                eg: b"alice/1".to_vec(),
                root: None,
                id: None,
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "SettlePrepared",
        api.settle_prepared(bearer(
            pb::SettlePreparedRequest {
                eg: b"alice/1".to_vec(),
                root: None,
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "Deliver",
        api.deliver(bearer(
            pb::DeliverRequest {
                sender: b"alice/1".to_vec(),
                sender_root: None,
            },
            bob,
        ))
        .await,
        denied,
    );
    // Writing into alice's group from bob's own transaction: a queue send.
    let own = api
        .begin(bearer(
            pb::BeginRequest {
                eg: b"bob/1".to_vec(),
                root: None,
                ..Default::default()
            },
            bob,
        ))
        .await
        .unwrap()
        .into_inner()
        .txn;
    refused(
        "SendMessage",
        api.send_message(bearer(
            pb::SendMessageRequest {
                txn: own,
                to: b"alice/1".to_vec(),
                to_root: None,
                queue: "q".into(),
                body: b"x".to_vec(),
            },
            bob,
        ))
        .await,
        denied,
    );
    // Typed: entities, scans, index queries (bob has no table grant).
    refused(
        "Begin typed",
        api.begin(bearer(
            pb::BeginRequest {
                eg: vec![],
                root: Some(user_root(1)),
                ..Default::default()
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "GetEntity",
        api.get_entity(bearer(
            pb::GetEntityRequest {
                txn: own,
                table: "User".into(),
                key: vec![int64(1)],
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "PutEntity",
        api.put_entity(bearer(
            pb::PutEntityRequest {
                txn: own,
                entity: Some(entity(
                    "User",
                    vec![("user_id", int64(1)), ("name", string("bob"))],
                )),
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "DeleteEntity",
        api.delete_entity(bearer(
            pb::DeleteEntityRequest {
                txn: own,
                table: "User".into(),
                key: vec![int64(1)],
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "ScanTable",
        api.scan_table(bearer(
            pb::ScanTableRequest {
                txn: own,
                table: "Photo".into(),
                root_key: vec![int64(1)],
                limit: 0,
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "ScanIndex",
        api.scan_index(bearer(
            pb::ScanIndexRequest {
                txn: own,
                index: "PhotosByTime".into(),
                ..Default::default()
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "ReadEntity",
        api.read_entity(bearer(
            pb::ReadEntityRequest {
                table: "User".into(),
                key: vec![int64(1)],
                mode: pb::ReadMode::Current as i32,
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "ReadEntities",
        api.read_entities(bearer(
            pb::ReadEntitiesRequest {
                table: "Photo".into(),
                keys: vec![pb::EntityKey {
                    key: vec![
                        int64(1),
                        pb::Value {
                            kind: Some(pb::value::Kind::Int32(1)),
                        },
                    ],
                }],
                mode: pb::ReadMode::Current as i32,
                in_flight: 0,
            },
            bob,
        ))
        .await,
        denied,
    );
    let tag = pb::ScanGlobalIndexRequest {
        index: "PhotosByTag".into(),
        leading: vec![string("secret")],
        ..Default::default()
    };
    refused(
        "ScanGlobalIndex",
        api.scan_global_index(bearer(tag.clone(), bob)).await,
        denied,
    );
    refused(
        "StreamGlobalIndex",
        api.stream_global_index(bearer(tag, bob)).await.map(|_| ()),
        denied,
    );
    refused(
        "MergeJoin",
        api.merge_join(bearer(
            pb::MergeJoinRequest {
                queries: vec![pb::JoinQuery {
                    index: "PhotosByTag".into(),
                    equal: vec![string("secret")],
                }],
                ..Default::default()
            },
            bob,
        ))
        .await,
        denied,
    );
    // Alice's lease: bob, knowing its id, can neither keep it alive nor end it.
    let alices = api
        .lease_grant(bearer(
            pb::LeaseGrantRequest {
                owner: "worker".into(),
                ttl_ms: 10_000,
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner()
        .lease;
    api.lock(bearer(
        pb::LockRequest {
            lease: alices,
            name: "alice/lock".into(),
        },
        alice,
    ))
    .await
    .unwrap();
    refused(
        "LeaseKeepAlive of another's lease",
        api.lease_keep_alive(bearer(pb::LeaseKeepAliveRequest { lease: alices }, bob))
            .await,
        Code::NotFound,
    );
    refused(
        "LeaseRevoke of another's lease",
        api.lease_revoke(bearer(pb::LeaseRevokeRequest { lease: alices }, bob))
            .await,
        Code::NotFound,
    );
    let holder = api
        .lock_holder(bearer(
            pb::LockHolderRequest {
                name: "alice/lock".into(),
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner()
        .holder;
    assert_eq!(
        holder.map(|h| h.lease),
        Some(alices),
        "alice's lock survived"
    );
    assert!(
        api.lease_keep_alive(bearer(pb::LeaseKeepAliveRequest { lease: alices }, alice))
            .await
            .is_ok()
    );
    // Locks and leased keys under alice's prefix.
    let lease = api
        .lease_grant(bearer(
            pb::LeaseGrantRequest {
                owner: "bob".into(),
                ttl_ms: 10_000,
            },
            bob,
        ))
        .await
        .unwrap()
        .into_inner()
        .lease;
    refused(
        "Lock",
        api.lock(bearer(
            pb::LockRequest {
                lease,
                name: "alice/lock".into(),
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "Unlock",
        api.unlock(bearer(
            pb::UnlockRequest {
                lease,
                name: "alice/lock".into(),
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "LockHolder",
        api.lock_holder(bearer(
            pb::LockHolderRequest {
                name: "alice/lock".into(),
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "PutLeased",
        api.put_leased(bearer(
            pb::PutLeasedRequest {
                lease,
                name: "alice/k".into(),
                value: vec![],
            },
            bob,
        ))
        .await,
        denied,
    );
    refused(
        "LeasedKeys",
        api.leased_keys(bearer(
            pb::LeasedKeysRequest {
                prefix: String::new(),
            },
            bob,
        ))
        .await,
        denied,
    );
    assert!(
        api.lock(bearer(
            pb::LockRequest {
                lease,
                name: "bob/lock".into()
            },
            bob
        ))
        .await
        .is_ok()
    );
    // Alice's transaction handle does not exist for bob.
    let handle = api
        .begin(bearer(
            pb::BeginRequest {
                eg: b"alice/1".to_vec(),
                root: None,
                ..Default::default()
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner()
        .txn;
    refused(
        "TxnRead of another's handle",
        api.txn_read(bearer(
            pb::TxnReadRequest {
                txn: handle,
                keys: vec![b"k".to_vec()],
            },
            bob,
        ))
        .await,
        Code::NotFound,
    );
    refused(
        "Write to another's handle",
        api.write(bearer(write_request(handle, "k", "bob's"), bob))
            .await,
        Code::NotFound,
    );
    refused(
        "Commit of another's handle",
        api.commit(bearer(pb::CommitRequest { txn: handle }, bob))
            .await,
        Code::NotFound,
    );
    refused(
        "CommitMulti of another's handle",
        api.commit_multi(bearer(
            pb::CommitMultiRequest {
                txns: vec![own, handle],
            },
            bob,
        ))
        .await,
        Code::NotFound,
    );
    let _ = api
        .abort(bearer(pb::AbortRequest { txn: handle }, bob))
        .await;
    let read = api
        .txn_read(bearer(
            pb::TxnReadRequest {
                txn: handle,
                keys: vec![b"k".to_vec()],
            },
            alice,
        ))
        .await;
    assert!(
        read.is_ok(),
        "bob's Abort ended alice's transaction: {read:?}"
    );

    // Alice's data is as she left it; the operator reads everything.
    let stored = rows(api, OPERATOR, "alice/1").await.unwrap();
    assert!(
        stored.contains(&("k".into(), "alice's".into())),
        "{stored:?}"
    );
    let snapshot = api
        .snapshot(bearer(
            pb::SnapshotRequest {
                eg: b"alice/1".to_vec(),
                keys: vec![b"vk".to_vec()],
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(snapshot.entries[0].value.as_deref(), Some(&b"alice's"[..]));
    let user = api
        .read_entity(bearer(
            pb::ReadEntityRequest {
                table: "User".into(),
                key: vec![int64(1)],
                mode: pb::ReadMode::Current as i32,
            },
            alice,
        ))
        .await
        .unwrap()
        .into_inner();
    let name = user
        .entity
        .expect("User 1")
        .fields
        .remove("name")
        .and_then(|f| f.value);
    assert_eq!(name, Some(pb::field_value::Value::Single(string("alice"))));
}
