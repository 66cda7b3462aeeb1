//! `megastore user` and `megastore role`: the public API's users and roles, kept in
//! lockd (`megastore_access`), edited by the operator (the commands send the operator
//! token of `[auth]`). Replicas enforce them with `[auth] require_users`, and see a
//! change within a second.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use megastore_access::{Access, AccessDoc, Grant, Resource};
use megastore_client::access_store::{edit_access, load_access};

use crate::cluster_arg::ClusterArg;

/// Manage the users of the public API.
#[derive(Debug, Subcommand)]
pub(crate) enum UserCommand {
    /// Add a user; prints its token once (keep it: only its digest is stored).
    Add {
        /// The user's name.
        name: String,
        /// Also recognise the user by a client certificate with this common name.
        #[arg(long, value_name = "COMMON_NAME")]
        certificate: Option<String>,
        /// Make no token (the user has a certificate only).
        #[arg(long, requires = "certificate")]
        no_token: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Give a user a role.
    Grant {
        /// The user.
        name: String,
        /// The role.
        role: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Take a role from a user.
    Revoke {
        /// The user.
        name: String,
        /// The role.
        role: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Replace a user's token with a new one (printed once; the old one stops working).
    NewToken {
        /// The user.
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Remove a user.
    Remove {
        /// The user.
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// List the users, their roles and how each is recognised.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

/// Manage the roles users hold.
#[derive(Debug, Subcommand)]
pub(crate) enum RoleCommand {
    /// Add a role (with no grants).
    Add {
        /// The role's name.
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Let the role's holders read, write or administer a resource: `groups:PREFIX`
    /// (untyped groups by name), `table:NAME` (a schema table's entities) or
    /// `locks:PREFIX` (lock and leased-key names).
    Grant {
        /// The role.
        name: String,
        /// read, write or admin (each includes the ones before it).
        access: String,
        /// groups:PREFIX, table:NAME or locks:PREFIX.
        resource: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Take a grant from the role.
    Revoke {
        /// The role.
        name: String,
        /// read, write or admin.
        access: String,
        /// groups:PREFIX, table:NAME or locks:PREFIX.
        resource: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// Remove a role (and take it from every user).
    Remove {
        /// The role.
        name: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
    /// List the roles and their grants.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

/// Runs `edit` on the cluster's document (read, edited, written back with a
/// compare-and-set).
fn edit<T>(
    cluster: &ClusterArg,
    edit: impl FnMut(&mut AccessDoc) -> Result<T, megastore_access::AccessError>,
) -> anyhow::Result<T> {
    on_lockd(cluster, async |lockd| edit_access(lockd, edit).await)
}

fn load(cluster: &ClusterArg) -> anyhow::Result<(AccessDoc, u64)> {
    on_lockd(cluster, async |lockd| load_access(lockd).await)
}

/// Runs `call` against the cluster's lockd (with the operator token of its config).
fn on_lockd<T>(
    cluster: &ClusterArg,
    call: impl AsyncFnOnce(&megastore_rpc::LockdClient) -> Result<T, megastore_client::ClientError>,
) -> anyhow::Result<T> {
    let config = cluster.load()?;
    let runtime = tokio::runtime::Runtime::new()?;
    // The channels are made in the runtime they will run on.
    let _entered = runtime.enter();
    let lockd = megastore_rpc::LockdClient::new(&config).map_err(anyhow::Error::msg)?;
    Ok(runtime.block_on(call(&lockd))?)
}

fn grant(access: &str, resource: &str) -> anyhow::Result<Grant> {
    Ok(Grant {
        access: access.parse::<Access>()?,
        on: resource.parse::<Resource>()?,
    })
}

pub(crate) fn run_user(command: UserCommand) -> anyhow::Result<ExitCode> {
    match command {
        UserCommand::Add {
            name,
            certificate,
            no_token,
            cluster,
        } => {
            let token = edit(&cluster, |doc| {
                doc.add_user(&name, certificate.as_deref(), !no_token)
            })
            .with_context(|| format!("adding user {name}"))?;
            println!("user {name} added (no roles yet: megastore user grant {name} ROLE)");
            if let Some(token) = token {
                println!("token (shown once; send it as `authorization: Bearer <token>`):");
                println!("{token}");
            }
        }
        UserCommand::Grant {
            name,
            role,
            cluster,
        } => {
            edit(&cluster, |doc| doc.grant_role(&name, &role))?;
            println!("user {name} holds role {role}");
        }
        UserCommand::Revoke {
            name,
            role,
            cluster,
        } => {
            let held = edit(&cluster, |doc| doc.revoke_role(&name, &role))?;
            match held {
                true => println!(
                    "user {name} no longer holds role {role} (replicas see it within a second)"
                ),
                false => println!("user {name} did not hold role {role}"),
            }
        }
        UserCommand::NewToken { name, cluster } => {
            let token = edit(&cluster, |doc| doc.new_user_token(&name))?;
            println!("new token of user {name} (shown once; the old one no longer works):");
            println!("{token}");
        }
        UserCommand::Remove { name, cluster } => {
            edit(&cluster, |doc| doc.remove_user(&name))?;
            println!("user {name} removed");
        }
        UserCommand::List { json, cluster } => {
            let (doc, version) = load(&cluster)?;
            if json {
                let users: Vec<_> = doc
                    .users
                    .iter()
                    .map(|(name, u)| {
                        serde_json::json!({
                            "name": name,
                            "token": u.token_sha256.is_some(),
                            "certificate": u.certificate,
                            "roles": u.roles,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"version": version, "users": users})
                );
            } else if doc.users.is_empty() {
                println!("no users (megastore user add NAME)");
            } else {
                for (name, user) in &doc.users {
                    let by = match (&user.token_sha256, &user.certificate) {
                        (Some(_), Some(cn)) => format!("token or certificate {cn:?}"),
                        (Some(_), None) => "token".to_string(),
                        (None, Some(cn)) => format!("certificate {cn:?}"),
                        (None, None) => "nothing".to_string(),
                    };
                    let roles: Vec<&str> = user.roles.iter().map(String::as_str).collect();
                    println!(
                        "{name}: by {by}; roles: {}",
                        if roles.is_empty() {
                            "none".to_string()
                        } else {
                            roles.join(", ")
                        }
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run_role(command: RoleCommand) -> anyhow::Result<ExitCode> {
    match command {
        RoleCommand::Add { name, cluster } => {
            edit(&cluster, |doc| doc.add_role(&name))?;
            println!(
                "role {name} added (no grants yet: megastore role grant {name} ACCESS RESOURCE)"
            );
        }
        RoleCommand::Grant {
            name,
            access,
            resource,
            cluster,
        } => {
            let grant = grant(&access, &resource)?;
            edit(&cluster, |doc| doc.grant(&name, grant.clone()))?;
            println!("role {name} grants {grant}");
        }
        RoleCommand::Revoke {
            name,
            access,
            resource,
            cluster,
        } => {
            let grant = grant(&access, &resource)?;
            match edit(&cluster, |doc| doc.revoke(&name, &grant))? {
                true => println!(
                    "role {name} no longer grants {grant} (replicas see it within a second)"
                ),
                false => println!("role {name} did not grant {grant}"),
            }
        }
        RoleCommand::Remove { name, cluster } => {
            edit(&cluster, |doc| doc.remove_role(&name))?;
            println!("role {name} removed");
        }
        RoleCommand::List { json, cluster } => {
            let (doc, version) = load(&cluster)?;
            if json {
                let roles: Vec<_> = doc
                    .roles
                    .iter()
                    .map(|(name, r)| {
                        let grants: Vec<String> = r.grants.iter().map(Grant::to_string).collect();
                        serde_json::json!({"name": name, "grants": grants})
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"version": version, "roles": roles})
                );
            } else if doc.roles.is_empty() {
                println!("no roles (megastore role add NAME)");
            } else {
                for (name, role) in &doc.roles {
                    let grants: Vec<String> = role.grants.iter().map(Grant::to_string).collect();
                    println!(
                        "{name}: {}",
                        if grants.is_empty() {
                            "no grants".to_string()
                        } else {
                            grants.join(", ")
                        }
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
