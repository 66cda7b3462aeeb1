//! Mutual TLS: with a `[tls]` section every gRPC endpoint, and every metrics endpoint,
//! demands a certificate signed by the cluster CA — clients with it work, plaintext and
//! foreign certificates do not.

use std::path::Path;
use std::time::{Duration, Instant};

use megastore_client::Client;
use megastore_config::ClusterConfig;
use megastore_e2e::{LocalCluster, one_cluster_at_a_time, run_megastore};
use megastore_rpc::Transport;
use megastore_rpc::pb::replication::replication_client::ReplicationClient;
use megastore_rpc::pb::replication::{ReplicaRequest, replica_request};

use crate::support::{connect, eg, first_commit};

/// Runs `megastore certs` for `config` into `out` and returns the `[tls]` section it
/// prints.
fn make_certs(config: &Path, out: &str) -> String {
    let dir = config.parent().expect("a directory");
    let made = run_megastore(
        &["certs", "--config", config.to_str().unwrap(), "--out", out],
        dir,
        Duration::from_secs(30),
    );
    assert!(made.status.success(), "{made:?}");
    let section = made
        .stdout
        .split_once("[tls]")
        .map(|(_, rest)| format!("[tls]{rest}"))
        .expect("a [tls] section");
    assert!(section.contains("node.pem"), "{section}");
    section
}

/// `GET /metrics` over HTTPS with Python's `ssl` (a client that is not ours), trusting
/// the cluster CA, presenting the cluster certificate if `with_certificate`.
fn scrape_over_tls(
    tls: &megastore_config::TlsConfig,
    address: &str,
    with_certificate: bool,
) -> (bool, String) {
    const SCRAPE: &str = "import http.client, ssl, sys\n\
        ca, cert, key, host, port, present = sys.argv[1:]\n\
        ctx = ssl.create_default_context(cafile=ca)\n\
        if present == 'yes':\n    ctx.load_cert_chain(cert, key)\n\
        conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)\n\
        conn.request('GET', '/metrics')\n\
        response = conn.getresponse()\n\
        print(response.status)\n\
        print(response.read().decode())\n";
    let (host, port) = address.rsplit_once(':').expect("host:port");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(SCRAPE)
        .args([&tls.ca_file, &tls.cert_file, &tls.key_file])
        .args([host, port, if with_certificate { "yes" } else { "no" }])
        .output()
        .expect("python3");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// What a plain HTTP `GET /metrics` gets back (empty if the connection is dropped).
fn plain_http_get(address: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    );
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

async fn log_state(transport: &Transport, address: &str) -> Result<(), tonic::Status> {
    let channel = transport
        .channel(address, Duration::from_secs(2))
        .expect("a channel");
    let request = ReplicaRequest {
        id: 1,
        eg: b"tls-probe".to_vec(),
        request: Some(replica_request::Request::LogState(
            replica_request::LogState {},
        )),
    };
    ReplicationClient::new(channel)
        .call(request)
        .await
        .map(|_| ())
}

#[test]
fn mutual_tls_admits_only_the_clusters_certificates() {
    let _alone = one_cluster_at_a_time();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cluster = LocalCluster::start_configured(dir.path(), |config| {
        let section = make_certs(config, "certs");
        let mut text = std::fs::read_to_string(config).expect("the config");
        text.push('\n');
        text.push_str(&section);
        std::fs::write(config, text).expect("write the config");
    });
    let config = ClusterConfig::load(&cluster.config_path).expect("the config");
    assert!(config.tls.is_some());
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let address = config.replica("a").expect("replica a").address.clone();

    runtime.block_on(async {
        // A client of the cluster, over TLS, commits and reads.
        let client = connect(&config, "B").await;
        first_commit(&client, &eg(1)).await;
        let tls = Transport::from_config(&config).expect("the cluster's TLS");
        log_state(&tls, &address)
            .await
            .expect("a TLS call with the cluster's certificate");

        // Plaintext is refused.
        let plain = log_state(&Transport::plain(), &address).await;
        assert!(plain.is_err(), "a plaintext call was served");

        // So is a certificate from another CA, however valid for the host.
        let foreign_section = make_certs(&cluster.config_path, "foreign");
        let mut foreign_text = std::fs::read_to_string(&cluster.config_path).unwrap();
        let cut = foreign_text.find("[tls]").expect("the [tls] section");
        foreign_text.truncate(cut);
        foreign_text.push_str(&foreign_section);
        let foreign_path = dir.path().join("foreign.toml");
        std::fs::write(&foreign_path, foreign_text).unwrap();
        let foreign = ClusterConfig::load(&foreign_path).expect("the foreign config");
        let transport = Transport::from_config(&foreign).expect("the foreign TLS");
        let refused = log_state(&transport, &address).await;
        assert!(refused.is_err(), "a foreign certificate was accepted");
        let started = Instant::now();
        let connected = Client::connect(&foreign, "A").await;
        assert!(
            connected.is_err(),
            "a client with a foreign certificate connected"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
    });

    // Metrics are served over mutual TLS too: HTTPS with the cluster's certificate works;
    // plain HTTP and HTTPS without a client certificate do not.
    let tls = config.tls.clone().expect("[tls]");
    let metrics = config
        .replica("a")
        .and_then(|r| r.metrics_address.clone())
        .expect("replica a's metrics address");
    let (scraped, text) = scrape_over_tls(&tls, &metrics, true);
    assert!(
        scraped && text.starts_with("200\n") && text.contains("megastore_replica_"),
        "{text}"
    );
    let (anonymous, text) = scrape_over_tls(&tls, &metrics, false);
    assert!(!anonymous, "served without a client certificate: {text}");
    assert!(
        !plain_http_get(&metrics).starts_with("HTTP/1.1 200"),
        "metrics served over plain HTTP"
    );

    // The CLI speaks TLS from the same config.
    let status = run_megastore(
        &["status", "--config", cluster.config_path.to_str().unwrap()],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(status.status.success(), "{status:?}");
    assert!(
        status.stdout.contains("lock service: leader"),
        "{}",
        status.stdout
    );
    assert_eq!(
        status.stdout.matches("UNREACHABLE").count(),
        0,
        "{}",
        status.stdout
    );
}

#[test]
fn unreadable_tls_files_are_named() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = megastore_e2e::write_cluster_config(dir.path());
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "\n[tls]\nca_file = \"nope/ca.pem\"\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n",
    );
    std::fs::write(&config, text).unwrap();
    std::fs::write(dir.path().join("c.pem"), "not a certificate").unwrap();
    let out = run_megastore(
        &["replica", "--config", config.to_str().unwrap(), "--id", "a"],
        dir.path(),
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    assert!(out.stderr.contains("nope/ca.pem"), "{}", out.stderr);
}
