//! docker-compose.yml runs what `megastore cluster up` would start from
//! deploy/compose/cluster.toml, and that config is the default topology with three
//! replica servers at sites A and B.
//!
//! There is no Docker engine here: `docker-compose config` (Debian's docker-compose,
//! which `.ci/setup.sh` installs) validates the file and prints it normalized; its YAML
//! is read with the PyYAML that package depends on.

use std::process::{Command, Stdio};
use std::time::Duration;

use megastore_config::ClusterConfig;
use megastore_e2e::{repo_root, run_megastore};
use serde_json::Value;

const CONFIG_IN_CONTAINER: &str = "/etc/megastore/cluster.toml";

fn normalized_compose_file() -> Value {
    let root = repo_root();
    let config = Command::new("docker-compose")
        .args(["-f", "docker-compose.yml", "config"])
        .current_dir(&root)
        .output()
        .expect("docker-compose (Debian package docker-compose; .ci/setup.sh installs it)");
    assert!(
        config.status.success(),
        "docker-compose config rejects docker-compose.yml:\n{}",
        String::from_utf8_lossy(&config.stderr)
    );
    let mut to_json = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, json, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("Debian's python3 (with python3-yaml, a docker-compose dependency)");
    {
        use std::io::Write;
        let mut stdin = to_json.stdin.take().expect("piped");
        stdin.write_all(&config.stdout).expect("write the YAML");
    }
    let json = to_json.wait_with_output().expect("YAML to JSON");
    assert!(
        json.status.success(),
        "PyYAML could not read the normalized file"
    );
    serde_json::from_slice(&json.stdout).expect("JSON")
}

#[test]
fn compose_runs_exactly_the_processes_cluster_up_would_start() {
    let root = repo_root();
    let compose = normalized_compose_file();
    let services = compose["services"].as_object().expect("services");
    let plan = run_megastore(
        &[
            "cluster",
            "plan",
            "--config",
            "deploy/compose/cluster.toml",
            "--json",
        ],
        &root,
        Duration::from_secs(30),
    );
    assert!(plan.status.success(), "{plan:?}");
    let planned: Vec<Value> = plan
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let names: Vec<&str> = planned
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut service_names: Vec<&str> = services.keys().map(String::as_str).collect();
    let mut sorted_names = names.clone();
    sorted_names.sort_unstable();
    service_names.sort_unstable();
    assert_eq!(
        service_names, sorted_names,
        "one service per process, no more"
    );

    for process in &planned {
        let name = process["name"].as_str().unwrap();
        let service = &services[name];
        let command: Vec<&str> = service["command"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: a command list"))
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        let expected = [
            process["subcommand"].as_str().unwrap(),
            "--config",
            CONFIG_IN_CONTAINER,
            "--id",
            process["id"].as_str().unwrap(),
        ];
        assert_eq!(command, expected, "{name}'s command");
        let (host, port) = process["address"]
            .as_str()
            .unwrap()
            .rsplit_once(':')
            .unwrap();
        assert_eq!(host, name, "{name} listens on its own service name");
        let port: u64 = port.parse().unwrap();
        let ports = service["ports"].as_array().expect("ports");
        assert!(
            ports.iter().any(
                |p| p["target"].as_u64() == Some(port) && p["published"].as_u64() == Some(port)
            ),
            "{name}: port {port} is published as itself: {ports:?}"
        );
        // So is its metrics port: a scraper on the host reaches it (docs/operations.md).
        let metrics: u64 = process["metrics_address"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no metrics address in the compose config"))
            .rsplit_once(':')
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert!(
            ports.iter().any(|p| p["target"].as_u64() == Some(metrics)
                && p["published"].as_u64() == Some(metrics)),
            "{name}: metrics port {metrics} is published as itself: {ports:?}"
        );
        let volumes: Vec<String> = service["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .map(|v| v.as_str().expect("short volume syntax").to_string())
            .collect();
        assert!(
            volumes.iter().any(|v| {
                v.ends_with(&format!(
                    "deploy/compose/cluster.toml:{CONFIG_IN_CONTAINER}:ro"
                ))
            }),
            "{name} mounts the config: {volumes:?}"
        );
        if let Some(data_dir) = process["data_dir"].as_str() {
            let volume = format!("{name}-data:{data_dir}");
            // `config` spells out the default mode.
            assert!(
                volumes
                    .iter()
                    .any(|v| v.strip_suffix(":rw").unwrap_or(v) == volume),
                "{name} keeps {data_dir} on a volume: {volumes:?}"
            );
            assert!(
                compose["volumes"].get(format!("{name}-data")).is_some(),
                "the {name}-data volume is declared"
            );
        }
        assert!(service["restart"].as_str().is_some(), "{name} restarts");
    }
}

#[test]
fn the_compose_topology_is_the_dev_topology_with_service_names() {
    let root = repo_root();
    let compose =
        ClusterConfig::load(&root.join("deploy/compose/cluster.toml")).expect("compose config");
    let dev = ClusterConfig::load(&root.join("crates/config/cluster.example.toml"))
        .expect("example config");
    let port = |address: &str| address.rsplit_once(':').map(|(_, p)| p.to_string());
    // What a process is, less where it runs: name, id, site, kind and ports.
    let replicas = |c: &ClusterConfig| -> Vec<String> {
        c.replicas
            .iter()
            .map(|r| {
                let coordinator = r.coordinator_address.as_deref().map(port);
                format!(
                    "{} {} {} {} {:?} {coordinator:?}",
                    r.name,
                    r.id,
                    r.site,
                    r.kind,
                    port(&r.address)
                )
            })
            .collect()
    };
    let lockd = |c: &ClusterConfig| -> Vec<String> {
        c.lockd
            .iter()
            .map(|l| format!("{} {} {} {:?}", l.name, l.id, l.site, port(&l.address)))
            .collect()
    };
    assert_eq!(compose.cluster.name, dev.cluster.name);
    assert_eq!(compose.cluster.sites, dev.cluster.sites);
    assert_eq!(replicas(&compose), replicas(&dev));
    assert_eq!(lockd(&compose), lockd(&dev));
    // Plus two more servers for each full replica, holding nothing until a move.
    let servers: Vec<(&str, u16, &str)> = compose
        .servers
        .iter()
        .map(|s| (s.name.as_str(), s.id, s.replica.as_str()))
        .collect();
    assert_eq!(
        servers,
        [
            ("a2", 11, "a"),
            ("b2", 12, "b"),
            ("a3", 21, "a"),
            ("b3", 22, "b")
        ]
    );
    assert_eq!(
        format!("{:?}", compose.timeouts),
        format!("{:?}", dev.timeouts)
    );
}
