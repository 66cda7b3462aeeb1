//! The e-mail schema (`schema/email.msdl`) end to end through the public gRPC API: a
//! sender's transaction sends each mail to three recipients' Account groups through a
//! queue; each recipient's transaction receives its mail and writes it as a Message
//! entity in its own group. The senders' replica is SIGKILLed and restarted mid-way.
//! Every acknowledged mail must end up exactly once in every recipient's inbox folder.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use megastore_rpc::pb::client as pb;
use megastore_rpc::pb::client::megastore_client::MegastoreClient;
use tonic::transport::Channel;

use crate::support::{api_at, apply_schema, grpc_committed, start_cluster};

const RECIPIENTS: [&str; 3] = ["ann@example.com", "bob@example.com", "cy@example.com"];
const SENDER: &str = "dee@example.com";
const MAILS_MAX: u64 = 30;
const SENDING: Duration = Duration::from_secs(10);
const DRAINING: Duration = Duration::from_secs(60);
const QUEUE: &str = "mail";

fn string(s: &str) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::String(s.into())),
    }
}

fn single(value: pb::Value) -> pb::FieldValue {
    pb::FieldValue {
        value: Some(pb::field_value::Value::Single(value)),
    }
}

fn account(address: &str) -> pb::GroupRoot {
    pb::GroupRoot {
        table: "Account".into(),
        key: vec![string(address)],
    }
}

fn now_micros() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// Mail `n` from the sender to every recipient, in one transaction of the sender's
/// group: whether it committed.
async fn send_mail(api: &mut MegastoreClient<Channel>, n: u64) -> bool {
    let Ok(begun) = api
        .begin(pb::BeginRequest {
            eg: Vec::new(),
            root: Some(account(SENDER)),
            ..Default::default()
        })
        .await
    else {
        return false;
    };
    let txn = begun.into_inner().txn;
    for recipient in RECIPIENTS {
        let message = pb::SendMessageRequest {
            txn,
            to: Vec::new(),
            to_root: Some(account(recipient)),
            queue: QUEUE.into(),
            body: format!("{n}").into_bytes(),
        };
        if api.send_message(message).await.is_err() {
            return false;
        }
    }
    grpc_committed(api.commit(pb::CommitRequest { txn }).await).is_some()
}

/// One transaction of a recipient: receives its mail and files each as a Message in
/// its inbox folder. How many it filed.
async fn file_mail(api: &mut MegastoreClient<Channel>, address: &str) -> Option<usize> {
    let begun = api
        .begin(pb::BeginRequest {
            eg: Vec::new(),
            root: Some(account(address)),
            ..Default::default()
        })
        .await
        .ok()?;
    let txn = begun.into_inner().txn;
    let mails = api
        .receive(pb::ReceiveRequest {
            txn,
            queue: QUEUE.into(),
            limit: 10,
        })
        .await
        .ok()?
        .into_inner()
        .messages;
    if mails.is_empty() {
        let _ = api.abort(pb::AbortRequest { txn }).await;
        return Some(0);
    }
    for mail in &mails {
        let n: u64 = String::from_utf8(mail.body.clone()).ok()?.parse().ok()?;
        let fields = [
            ("address", single(string(address))),
            ("folder", single(string("inbox"))),
            (
                "received",
                single(pb::Value {
                    // Filed now: a mail filed twice would be two Messages.
                    kind: Some(pb::value::Kind::TimestampMicros(now_micros())),
                }),
            ),
            (
                "message_id",
                single(pb::Value {
                    kind: Some(pb::value::Kind::Uint64(n)),
                }),
            ),
            ("sender", single(string(SENDER))),
            ("subject", single(string(&format!("mail {n}")))),
            (
                "seen",
                single(pb::Value {
                    kind: Some(pb::value::Kind::Bool(false)),
                }),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let entity = pb::Entity {
            table: "Message".into(),
            fields,
            inline: Default::default(),
        };
        api.put_entity(pb::PutEntityRequest {
            txn,
            entity: Some(entity),
        })
        .await
        .ok()?;
    }
    grpc_committed(api.commit(pb::CommitRequest { txn }).await)
        .is_some()
        .then_some(mails.len())
}

/// The message ids in a recipient's inbox folder (a current read).
async fn inbox(api: &mut MegastoreClient<Channel>, address: &str) -> Vec<u64> {
    let txn = api
        .begin(pb::BeginRequest {
            eg: Vec::new(),
            root: Some(account(address)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .txn;
    let entities = api
        .scan_table(pb::ScanTableRequest {
            txn,
            table: "Message".into(),
            root_key: vec![string(address)],
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .entities;
    let _ = api.abort(pb::AbortRequest { txn }).await;
    entities
        .iter()
        .map(|e| match e.fields["message_id"].value.as_ref() {
            Some(pb::field_value::Value::Single(pb::Value {
                kind: Some(pb::value::Kind::Uint64(n)),
            })) => *n,
            other => panic!("message_id: {other:?}"),
        })
        .collect()
}

#[test]
fn mail_to_three_recipients_is_filed_once_in_each_mailbox_through_a_replica_crash() {
    let (_alone, dir, mut cluster, config, runtime) = start_cluster();
    let config_arg = cluster.config_path.to_str().unwrap().to_string();
    apply_schema(&config_arg, "schema/email.msdl", dir.path());
    let address = |name: &str| {
        config
            .replicas
            .iter()
            .find(|r| r.name == name)
            .unwrap()
            .address
            .clone()
    };
    let (a, b) = (address("a"), address("b"));
    let acked: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let started = Instant::now();
    let sender = {
        let (a, acked) = (a.clone(), Arc::clone(&acked));
        runtime.spawn(async move {
            let mut api = api_at(&a);
            for n in 0..MAILS_MAX {
                if started.elapsed() > SENDING {
                    break;
                }
                if send_mail(&mut api, n).await {
                    acked.lock().unwrap().insert(n);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let filers: Vec<_> = RECIPIENTS
        .iter()
        .map(|r| {
            let (b, stop) = (b.clone(), Arc::clone(&stop));
            runtime.spawn(async move {
                let mut api = api_at(&b);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if file_mail(&mut api, r).await.unwrap_or(0) == 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    cluster.process("replica-a").kill();
    std::thread::sleep(Duration::from_secs(2));
    cluster.start_process("replica-a");
    runtime.block_on(sender).unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 5,
        "too few mails acknowledged: {}",
        acked.len()
    );
    let drained = Instant::now();
    loop {
        let filed: Vec<Vec<u64>> = runtime.block_on(async {
            let mut api = api_at(&b);
            let mut all = Vec::new();
            for r in RECIPIENTS {
                all.push(inbox(&mut api, r).await);
            }
            all
        });
        let complete = filed
            .iter()
            .all(|ids| acked.is_subset(&ids.iter().copied().collect::<BTreeSet<_>>()));
        if complete {
            // A little longer: a mail filed twice would show now.
            std::thread::sleep(Duration::from_secs(2));
            break;
        }
        assert!(
            drained.elapsed() < DRAINING,
            "not every acknowledged mail was filed within {DRAINING:?}: {filed:?} of {acked:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    runtime.block_on(async {
        for filer in filers {
            filer.await.unwrap();
        }
    });
    let final_inboxes: Vec<Vec<u64>> = runtime.block_on(async {
        let mut api = api_at(&b);
        let mut all = Vec::new();
        for r in RECIPIENTS {
            all.push(inbox(&mut api, r).await);
        }
        all
    });
    for (r, ids) in RECIPIENTS.iter().zip(&final_inboxes) {
        let distinct: BTreeSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len(), "{r} has a mail twice: {ids:?}");
        assert!(
            acked.is_subset(&distinct),
            "{r} lacks mail: {ids:?} of {acked:?}"
        );
    }
}
