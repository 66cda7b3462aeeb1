//! Users and operators named by client certificates, with mutual TLS (`users`); such
//! client-only certificates reach the public API and administration, never the
//! protocol's own services.

use std::path::Path;
use std::time::{Duration, Instant};

use megastore_config::ClusterConfig;
use megastore_e2e::run_megastore;
use megastore_rpc::pb::client as pb;
use tonic::Code;

use crate::users::{Extra, cli, refused, start};

/// A channel to `address` over mutual TLS, presenting client certificate `name`
/// (`certs/NAME.pem`, made by `megastore certs --client NAME`).
fn tls_channel(folder: &Path, address: &str, name: &str) -> tonic::transport::Channel {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let read = |file: &str| std::fs::read_to_string(folder.join("certs").join(file)).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .identity(Identity::from_pem(
            read(&format!("{name}.pem")),
            read(&format!("{name}-key.pem")),
        ))
        .domain_name("127.0.0.1");
    tonic::transport::Channel::from_shared(format!("https://{address}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_lazy()
}

#[test]
fn with_mutual_tls_a_client_certificate_names_a_user_or_the_operator() {
    let _alone = megastore_e2e::one_cluster_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().to_path_buf();
    let mut cluster = start(dir.path(), 100, |path| {
        let config = path.to_str().unwrap();
        let made = run_megastore(
            &["certs", "--config", config, "--out", "certs"],
            &folder,
            Duration::from_secs(30),
        );
        assert!(made.status.success(), "{made:?}");
        for name in ["carol", "ops"] {
            let client = run_megastore(
                &[
                    "certs", "--config", config, "--out", "certs", "--client", name,
                ],
                &folder,
                Duration::from_secs(30),
            );
            assert!(client.status.success(), "{client:?}");
        }
        let section = made.stdout.split_once("[tls]").unwrap().1;
        Extra {
            sections: format!("\n[tls]{section}\n"),
            auth: "operator_certificates = [\"ops\"]".into(),
        }
    });
    cluster.wait_for_log("replica-a", "replica serving", Duration::from_secs(30));
    let cfg = cluster.config_path.to_str().unwrap().to_string();
    let config = ClusterConfig::load(&cluster.config_path).unwrap();
    // The operator's commands run over TLS with the cluster certificate and the token.
    cli(dir.path(), &cfg, &["role", "add", "carol-rw"]);
    cli(
        dir.path(),
        &cfg,
        &["role", "grant", "carol-rw", "write", "groups:carol/"],
    );
    let added = cli(
        dir.path(),
        &cfg,
        &[
            "user",
            "add",
            "carol",
            "--certificate",
            "carol",
            "--no-token",
        ],
    );
    assert!(!added.contains("mst_"), "no token was asked for: {added}");
    cli(dir.path(), &cfg, &["user", "grant", "carol", "carol-rw"]);

    let a = config.replica("a").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let read = |eg: &str| pb::ReadRequest {
            eg: eg.into(),
            mode: pb::ReadMode::Current as i32,
            query: Some(pb::RowQuery {
                query: Some(pb::row_query::Query::Range(pb::row_query::Range::default())),
            }),
        };
        let mut carol = pb::megastore_client::MegastoreClient::new(tls_channel(
            dir.path(),
            &a.address,
            "carol",
        ));
        let started = Instant::now();
        while let Err(e) = carol.read(read("carol/1")).await {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "carol's certificate never served: {e:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let versioned = carol
            .versioned_txn(pb::VersionedTxnRequest {
                eg: b"carol/1".to_vec(),
                asserts: vec![],
                mutations: vec![pb::Mutation {
                    key: b"k".to_vec(),
                    change: Some(pb::mutation::Change::Put(b"carol's".to_vec())),
                }],
            })
            .await;
        assert!(versioned.is_ok(), "{versioned:?}");
        refused(
            "carol reading another's group",
            carol.read(read("dave/1")).await,
            Code::PermissionDenied,
        );
        // The operator's certificate, without the token: anything on the public API,
        // and administration.
        let mut ops =
            pb::megastore_client::MegastoreClient::new(tls_channel(dir.path(), &a.address, "ops"));
        assert!(ops.read(read("dave/1")).await.is_ok());
        let admin = |name: &str| {
            megastore_rpc::pb::admin::admin_client::AdminClient::new(tls_channel(
                dir.path(),
                a.admin_endpoint(),
                name,
            ))
        };
        let lag = admin("ops")
            .lag(megastore_rpc::pb::admin::LagRequest {})
            .await;
        assert!(lag.is_ok(), "{lag:?}");
        refused(
            "administration with a user's certificate",
            admin("carol")
                .lag(megastore_rpc::pb::admin::LagRequest {})
                .await,
            Code::PermissionDenied,
        );
        // A client-only certificate (a user's, an operator's) cannot speak the protocol:
        // the replication service and lockd serve cluster members only.
        use megastore_rpc::pb::replication::{ReplicaRequest, replica_request};
        for name in ["carol", "ops"] {
            let probe = ReplicaRequest {
                id: 1,
                eg: b"carol/1".to_vec(),
                request: Some(replica_request::Request::LogState(
                    replica_request::LogState {},
                )),
            };
            let replication =
                megastore_rpc::pb::replication::replication_client::ReplicationClient::new(
                    tls_channel(dir.path(), &a.address, name),
                )
                .call(probe)
                .await;
            refused(
                &format!("{name}'s certificate at the replication service"),
                replication,
                Code::PermissionDenied,
            );
            let lockd = megastore_rpc::pb::lock::lock_client::LockClient::new(tls_channel(
                dir.path(),
                &config.lockd[0].address,
                name,
            ))
            .call(megastore_rpc::pb::lock::LockRequest::default())
            .await;
            refused(
                &format!("{name}'s certificate at lockd"),
                lockd,
                Code::PermissionDenied,
            );
        }
        // The cluster's own certificate is no user, and no operator without the token.
        let node = megastore_rpc::Transport::from_config(&config)
            .unwrap()
            .channel(&a.address, Duration::from_secs(5))
            .unwrap();
        let mut node = pb::megastore_client::MegastoreClient::new(node);
        refused(
            "the cluster certificate, no token",
            node.read(read("carol/1")).await,
            Code::Unauthenticated,
        );
    });
}
