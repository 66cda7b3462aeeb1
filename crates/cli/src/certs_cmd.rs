//! `megastore certs`: a certificate authority and one certificate for every host of a
//! cluster config, for its `[tls]` section (mutual TLS on every gRPC endpoint).
//!
//! One certificate serves every process and client: each process presents it as a
//! server and as a client, and every process accepts only peers whose certificate the
//! cluster CA signed. (With openssl instead: docs/operations.md.)
//!
//! `--client NAME` instead signs, with the CA already in `--out`, a client certificate
//! whose common name is NAME: for a user (`megastore user add --certificate NAME`) or
//! an operator (`[auth] operator_certificates`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use megastore_config::ClusterConfig;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Make a CA and a certificate for every host of a cluster config.
#[derive(Debug, Args)]
pub(crate) struct CertsArgs {
    /// The cluster description whose hosts the certificate must name.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Where to write ca.pem, ca-key.pem, node.pem and node-key.pem (default: `certs`
    /// beside the config file).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Replace files that are already there.
    #[arg(long)]
    force: bool,
    /// Sign only a client certificate with this common name (NAME.pem, NAME-key.pem),
    /// with the CA already in the output directory.
    #[arg(long, value_name = "NAME")]
    client: Option<String>,
}

/// Every host name or IP a process of `config` is reached at, plus loopback.
fn hosts(config: &ClusterConfig) -> BTreeSet<String> {
    let mut addresses: Vec<&str> = Vec::new();
    let servers = config.server_processes();
    for r in servers.iter().map(|p| &p.process) {
        addresses.push(&r.address);
        addresses.extend(r.coordinator_address.as_deref());
    }
    addresses.extend(config.lockd.iter().map(|l| l.address.as_str()));
    let mut hosts: BTreeSet<String> = addresses
        .iter()
        .filter_map(|a| a.rsplit_once(':').map(|(host, _)| host))
        .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
        .collect();
    hosts.insert("localhost".into());
    hosts.insert("127.0.0.1".into());
    hosts
}

fn write(path: &Path, contents: &str, secret: bool) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn run(args: CertsArgs) -> anyhow::Result<ExitCode> {
    let config = ClusterConfig::load(&args.config)?;
    let out = args
        .out
        .unwrap_or_else(|| args.config.parent().unwrap_or(Path::new(".")).join("certs"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    if let Some(name) = &args.client {
        return client_certificate(&out, name, args.force);
    }

    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("megastore CA for cluster {}", config.cluster.name),
    );
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).context("signing the CA")?;
    let issuer = Issuer::new(ca, ca_key);

    let hosts = hosts(&config);
    let node_key = KeyPair::generate().context("generating the node key")?;
    let mut node = CertificateParams::new(hosts.iter().cloned().collect::<Vec<_>>())
        .context("a host of the config is not a valid DNS name or IP")?;
    node.distinguished_name.push(
        DnType::CommonName,
        format!("megastore cluster {}", config.cluster.name),
    );
    node.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    node.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let node_cert = node
        .signed_by(&node_key, &issuer)
        .context("signing the node certificate")?;

    let files = [
        ("ca.pem", ca_cert.pem(), false),
        ("ca-key.pem", issuer.key().serialize_pem(), true),
        ("node.pem", node_cert.pem(), false),
        ("node-key.pem", node_key.serialize_pem(), true),
    ];
    for (name, _, _) in &files {
        let path = out.join(name);
        if path.exists() && !args.force {
            bail!("{} exists; pass --force to replace it", path.display());
        }
    }
    for (name, contents, secret) in &files {
        write(&out.join(name), contents, *secret)?;
    }
    println!(
        "wrote {} (CA), {} and its key, valid for: {}",
        out.join("ca.pem").display(),
        out.join("node.pem").display(),
        hosts.into_iter().collect::<Vec<_>>().join(", ")
    );
    println!(
        "add to {} (paths are relative to it; every process and client then uses mutual TLS):\n",
        args.config.display()
    );
    let relative = |name: &str| {
        let path = out.join(name);
        let base = args.config.parent().unwrap_or(Path::new(""));
        path.strip_prefix(base)
            .map_or(path.clone(), Path::to_path_buf)
    };
    println!(
        "[tls]\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}",
        relative("ca.pem").display().to_string(),
        relative("node.pem").display().to_string(),
        relative("node-key.pem").display().to_string()
    );
    Ok(ExitCode::SUCCESS)
}

/// Signs a client certificate with common name `name` by the CA in `out`.
fn client_certificate(out: &Path, name: &str, force: bool) -> anyhow::Result<ExitCode> {
    // The name users and operators are known by (`megastore user add --certificate`).
    megastore_access::check_name("--client", name)?;
    let read = |file: &str| {
        let path = out.join(file);
        std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (make the CA first: megastore certs --config FILE)",
                path.display()
            )
        })
    };
    let ca_key = KeyPair::from_pem(&read("ca-key.pem")?).context("ca-key.pem is not a key")?;
    let issuer = Issuer::from_ca_cert_pem(&read("ca.pem")?, ca_key)
        .context("ca.pem is not a CA certificate")?;
    let key = KeyPair::generate().context("generating the client key")?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .context("signing the client certificate")?;
    let files = [
        (format!("{name}.pem"), cert.pem(), false),
        (format!("{name}-key.pem"), key.serialize_pem(), true),
    ];
    for (file, _, _) in &files {
        let path = out.join(file);
        if path.exists() && !force {
            bail!("{} exists; pass --force to replace it", path.display());
        }
    }
    for (file, contents, secret) in &files {
        write(&out.join(file), contents, *secret)?;
    }
    println!(
        "wrote {} and its key: a client certificate with common name {name:?}, signed by {}",
        out.join(format!("{name}.pem")).display(),
        out.join("ca.pem").display()
    );
    Ok(ExitCode::SUCCESS)
}
