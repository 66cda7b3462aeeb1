//! The checks behind [`crate::ClusterConfig::parse`]: each failure names its field.

use std::collections::BTreeMap;
use std::path::PathBuf;

use megastore_types::ReplicaKind;
use megastore_types::limits::TRUNCATE_EVERY;

use crate::{ClusterConfig, ReplicaConfig, check_address};

type Failure = (String, String);

fn fail(field: impl Into<String>, message: impl Into<String>) -> Result<(), Failure> {
    Err((field.into(), message.into()))
}

pub(crate) fn check(config: &ClusterConfig) -> Result<(), Failure> {
    let cluster = &config.cluster;
    if cluster.name.trim().is_empty() {
        return fail("cluster.name", "must not be empty");
    }
    if cluster.sites.is_empty() {
        return fail("cluster.sites", "name at least one site");
    }
    let mut sites = BTreeMap::new();
    for (i, site) in cluster.sites.iter().enumerate() {
        if site.trim().is_empty() {
            return fail(format!("cluster.sites[{i}]"), "must not be empty");
        }
        if let Some(first) = sites.insert(site.as_str(), i) {
            return fail(
                format!("cluster.sites[{i}]"),
                format!("site {site:?} is already cluster.sites[{first}]"),
            );
        }
    }
    let known_site = |field: String, site: &str| {
        if sites.contains_key(site) {
            Ok(())
        } else {
            fail(
                field,
                format!(
                    "unknown site {site:?} (cluster.sites has {})",
                    ClusterConfig::names(cluster.sites.iter().map(String::as_str))
                ),
            )
        }
    };
    check_timeouts(config)?;
    if config.history.kept_positions == 0 {
        return fail(
            "history.kept_positions",
            "must be at least 1 (a transaction reads at the position it began at)",
        );
    }
    if config.history.log_positions > crate::LOG_POSITIONS_MAX {
        return fail(
            "history.log_positions",
            format!(
                "{} is over the limit of {} (each kept entry stays in every replica's memory)",
                config.history.log_positions,
                crate::LOG_POSITIONS_MAX
            ),
        );
    }
    let outage_floor = config.history.outage_log_floor();
    if let Some(bound) = config.history.outage_log_positions
        && bound < outage_floor
    {
        return fail(
            "history.outage_log_positions",
            format!(
                "{bound} is under {outage_floor}, twice history.log_positions + \
                 {TRUNCATE_EVERY} (a replica keeps that many while every replica answers)"
            ),
        );
    }

    if config.replicas.is_empty() {
        return fail("replicas", "declare at least one [[replicas]]");
    }
    let mut names = BTreeMap::new();
    let mut ids = BTreeMap::new();
    let mut seen = Seen::default();
    let mut server_names = BTreeMap::new();
    for (i, r) in config.replicas.iter().enumerate() {
        let at = |field: &str| format!("replicas[{i}].{field}");
        unique(&mut names, r.name.as_str(), i, "replicas", "name")?;
        if r.name.trim().is_empty() {
            return fail(at("name"), "must not be empty");
        }
        unique(&mut ids, r.id, i, "replicas", "id")?;
        known_site(at("site"), &r.site)?;
        check_process(&mut seen, r, &format!("replicas[{i}]"))?;
    }
    let mut server_ids = BTreeMap::new();
    for (i, s) in config.servers.iter().enumerate() {
        let at = |field: &str| format!("servers[{i}].{field}");
        if s.name.trim().is_empty() {
            return fail(at("name"), "must not be empty");
        }
        if let Some(first) = names.get(s.name.as_str()) {
            return fail(
                at("name"),
                format!("{:?} is already used by replicas[{first}]", s.name),
            );
        }
        unique(&mut server_names, s.name.as_str(), i, "servers", "name")?;
        if let Some(first) = ids.get(&s.id) {
            return fail(
                at("id"),
                format!(
                    "{} is replicas[{first}]'s id, which is that replica's first server; give this server an id no replica has",
                    s.id
                ),
            );
        }
        unique(&mut server_ids, s.id, i, "servers", "id")?;
        let Some(replica) = config.replica(&s.replica) else {
            return fail(
                at("replica"),
                format!(
                    "unknown replica {:?} (replicas: {})",
                    s.replica,
                    ClusterConfig::names(config.replicas.iter().map(|r| r.name.as_str()))
                ),
            );
        };
        check_process(&mut seen, &s.process_of(replica), &format!("servers[{i}]"))?;
    }
    let g = &config.gateway;
    if !(1_000..=3_600_000).contains(&g.idle_txn_ms) {
        return fail(
            "gateway.idle_txn_ms",
            "must be between 1000 (a second) and 3600000 (an hour)",
        );
    }
    for (field, value) in [
        ("gateway.open_txns_max", g.open_txns_max),
        (
            "gateway.open_txns_per_connection",
            g.open_txns_per_connection,
        ),
        ("gateway.open_txns_per_user", g.open_txns_per_user),
    ] {
        if value == 0 {
            return fail(field, "must be at least 1");
        }
    }
    if let Some(auth) = &config.auth {
        if auth.operator_certificates.iter().any(String::is_empty) {
            return fail(
                "auth.operator_certificates",
                "give each certificate's common name (one is empty)",
            );
        }
        if !auth.operator_certificates.is_empty() && config.tls.is_none() {
            return fail(
                "auth.operator_certificates",
                "client certificates are seen only with [tls]: add [tls], or rely on the operator token",
            );
        }
    }
    if !config.replicas.iter().any(|r| r.kind == ReplicaKind::Full) {
        return fail("replicas", "at least one replica must be kind = \"full\"");
    }

    if config.lockd.is_empty() {
        return fail("lockd", "declare at least one [[lockd]] node");
    }
    let mut names = BTreeMap::new();
    let mut ids = BTreeMap::new();
    for (i, l) in config.lockd.iter().enumerate() {
        let at = |field: &str| format!("lockd[{i}].{field}");
        if l.name.trim().is_empty() {
            return fail(at("name"), "must not be empty");
        }
        unique(&mut names, l.name.as_str(), i, "lockd", "name")?;
        unique(&mut ids, l.id, i, "lockd", "id")?;
        if l.id == 0 {
            return fail(at("id"), "lockd ids start at 1");
        }
        known_site(at("site"), &l.site)?;
        check_address(&l.address).or_else(|e| fail(at("address"), e))?;
        unique_address(&mut seen.addresses, &l.address, at("address"))?;
        if l.data_dir.as_os_str().is_empty() {
            return fail(at("data_dir"), "must not be empty");
        }
        optional_address(
            &mut seen.addresses,
            &l.metrics_address,
            at("metrics_address"),
        )?;
    }
    let mut links = BTreeMap::new();
    for (i, link) in config.wan.iter().enumerate() {
        let at = |field: &str| format!("wan[{i}].{field}");
        for site in &link.between {
            known_site(at("between"), site)?;
        }
        let [a, b] = &link.between;
        if a == b {
            return fail(
                at("between"),
                "names one site twice; a site has no round trip to itself",
            );
        }
        let pair = if a < b { (a, b) } else { (b, a) };
        if let Some(first) = links.insert(pair, i) {
            return fail(
                at("between"),
                format!("sites {a} and {b} are already linked by wan[{first}]"),
            );
        }
        if link.rtt_ms > 60_000 {
            return fail(at("rtt_ms"), "must be at most 60000 (a minute)");
        }
    }
    if let Some(tls) = &config.tls {
        for (field, path) in [
            ("tls.ca_file", &tls.ca_file),
            ("tls.cert_file", &tls.cert_file),
            ("tls.key_file", &tls.key_file),
        ] {
            if path.as_os_str().is_empty() {
                return fail(field, "must name a PEM file");
            }
        }
    }
    Ok(())
}

/// The checks every replica server process passes, a replica's first server
/// (`replicas[i]`) or another (`servers[i]`, checked as the process it runs as).
fn check_process(seen: &mut Seen, r: &ReplicaConfig, entry: &str) -> Result<(), Failure> {
    let at = |field: &str| format!("{entry}.{field}");
    check_address(&r.address).or_else(|e| fail(at("address"), e))?;
    if r.cache_groups == Some(0) {
        return fail(
            at("cache_groups"),
            "must be at least 1 (the groups being served stay loaded)",
        );
    }
    unique_address(&mut seen.addresses, &r.address, at("address"))?;
    match (&r.coordinator_address, r.kind) {
        (Some(a), ReplicaKind::Full) => {
            check_address(a).or_else(|e| fail(at("coordinator_address"), e))?;
            unique_address(&mut seen.addresses, a, at("coordinator_address"))?;
        }
        (None, ReplicaKind::Full) => {
            return fail(
                at("coordinator_address"),
                "a full replica's server needs the address of its coordinator",
            );
        }
        (Some(_), kind) => {
            return fail(
                at("coordinator_address"),
                format!("only full replicas have a coordinator (this one is {kind:?})"),
            );
        }
        (None, _) => {}
    }
    if r.data_dir.as_os_str().is_empty() {
        return fail(at("data_dir"), "must not be empty");
    }
    if let Some(first) = seen.data_dirs.insert(r.data_dir.clone(), at("data_dir")) {
        return fail(
            at("data_dir"),
            format!("{} is already {first}", r.data_dir.display()),
        );
    }
    optional_address(
        &mut seen.addresses,
        &r.metrics_address,
        at("metrics_address"),
    )?;
    optional_address(&mut seen.addresses, &r.admin_address, at("admin_address"))?;
    if r.coordinator_metrics_address.is_some() && r.kind != ReplicaKind::Full {
        return fail(
            at("coordinator_metrics_address"),
            format!(
                "only full replicas have a coordinator (this one is {})",
                r.kind
            ),
        );
    }
    optional_address(
        &mut seen.addresses,
        &r.coordinator_metrics_address,
        at("coordinator_metrics_address"),
    )
}

/// What the processes checked so far use, which no other may.
#[derive(Default)]
struct Seen {
    /// Address → the field that has it.
    addresses: BTreeMap<String, String>,
    /// Data directory → the field that has it.
    data_dirs: BTreeMap<PathBuf, String>,
}

fn optional_address(
    addresses: &mut BTreeMap<String, String>,
    address: &Option<String>,
    field: String,
) -> Result<(), Failure> {
    if let Some(address) = address {
        check_address(address).or_else(|e| fail(field.clone(), e))?;
        unique_address(addresses, address, field)?;
    }
    Ok(())
}

fn check_timeouts(config: &ClusterConfig) -> Result<(), Failure> {
    let t = &config.timeouts;
    for (field, value) in [
        ("lock_lease_ms", t.lock_lease_ms),
        ("election_timeout_ms", t.election_timeout_ms),
        ("heartbeat_ms", t.heartbeat_ms),
        ("rpc_ms", t.rpc_ms),
        ("sweep_ms", t.sweep_ms),
        ("prepared_ms", t.prepared_ms.unwrap_or(1)),
    ] {
        if value == 0 {
            return fail(format!("timeouts.{field}"), "must be positive");
        }
    }
    let shortest = (t.prepared() * 4).max(t.lock_lease() * 5);
    if t.decision_retention() < shortest {
        return fail(
            "timeouts.decision_retention_ms",
            format!(
                "must be at least four prepared timeouts and five lock leases ({} ms): a client resolves a lost commit's answer by its decision within this window",
                shortest.as_millis()
            ),
        );
    }
    if t.max_clock_drift_ppm >= 100_000 {
        return fail(
            "timeouts.max_clock_drift_ppm",
            "must be below 100000 (10%): real clocks drift by tens of ppm",
        );
    }
    if t.heartbeat_ms >= t.election_timeout_ms {
        return fail(
            "timeouts.heartbeat_ms",
            format!(
                "must be below timeouts.election_timeout_ms ({}), or followers call elections while the leader is healthy",
                t.election_timeout_ms
            ),
        );
    }
    if t.lock_lease_ms <= 2 * t.election_timeout_ms {
        return fail(
            "timeouts.lock_lease_ms",
            format!(
                "must exceed twice timeouts.election_timeout_ms ({}), or every lockd election ends every session",
                t.election_timeout_ms
            ),
        );
    }
    Ok(())
}

fn unique<K: Ord + std::fmt::Debug>(
    seen: &mut BTreeMap<K, usize>,
    key: K,
    i: usize,
    list: &str,
    field: &str,
) -> Result<(), Failure> {
    let shown = format!("{key:?}");
    match seen.insert(key, i) {
        Some(first) => fail(
            format!("{list}[{i}].{field}"),
            format!("{shown} is already used by {list}[{first}]"),
        ),
        None => Ok(()),
    }
}

fn unique_address(
    seen: &mut BTreeMap<String, String>,
    address: &str,
    field: String,
) -> Result<(), Failure> {
    match seen.insert(address.to_string(), field.clone()) {
        Some(first) => fail(field, format!("{address:?} is already {first}")),
        None => Ok(()),
    }
}
