//! `megastore lock NAME [-- COMMAND…]`: hold an application lock under a lease kept
//! alive, and run a command while holding it (as `etcdctl lock` does) — or hold it
//! until interrupted. The command sees the lock's fencing token in its environment, to
//! carry into its writes (`Assert::Fence`).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use indicatif::ProgressBar;
use megastore_client::{Client, ClientError, FencingToken, Lease, LeaseError};

use crate::cluster_arg::ClusterArg;
use crate::signals::Interrupts;

/// Hold a lock under a lease, running a command while it is held.
#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The lock's name.
    name: String,
    /// The lease's ttl: the lock outlives this process by at most this if it dies.
    #[arg(long, default_value_t = 5_000)]
    ttl_ms: u64,
    /// Give up waiting for the lock after this many seconds (default: wait until
    /// interrupted).
    #[arg(long)]
    wait_secs: Option<u64>,
    /// The site to act from (default: the first full replica's).
    #[arg(long)]
    site: Option<String>,
    /// The command to run while the lock is held, with MEGASTORE_LOCK,
    /// MEGASTORE_LEASE and MEGASTORE_FENCING_TOKEN set (default: hold until
    /// interrupted).
    #[arg(last = true)]
    command: Vec<String>,
}

/// Takes the lock under `lease`, waiting (with a spinner naming the holder) while
/// another lease holds it, up to `wait` if given.
async fn acquire(
    client: &Client,
    lease: &mut Lease,
    name: &str,
    wait: Option<Duration>,
) -> anyhow::Result<FencingToken> {
    let started = Instant::now();
    let bar = ProgressBar::new_spinner();
    loop {
        match client.lock(lease.id, name).await {
            Ok(token) => {
                bar.finish_and_clear();
                return Ok(token);
            }
            Err(ClientError::Lease(LeaseError::Held { holder, .. })) => {
                if wait.is_some_and(|w| started.elapsed() >= w) {
                    bar.finish_and_clear();
                    bail!(
                        "lock {name:?} is still held by lease {} after {:?}",
                        holder.lease,
                        started.elapsed()
                    );
                }
                bar.set_message(format!(
                    "waiting for lock {name:?}, held by lease {}",
                    holder.lease
                ));
                bar.tick();
                tokio::time::sleep(Duration::from_millis(200)).await;
                // Waiting must not let our own lease lapse.
                client.keep_alive(lease).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

pub(crate) fn run(args: LockArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let site = crate::bench_cmd::site_or_first_full(&config, args.site.as_deref())?;
    crate::logging::init_quiet();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let mut interrupts = Interrupts::listen()?;
        let client = Client::connect(&config, &site)
            .await
            .with_context(|| format!("connecting at site {site}"))?;
        let owner = format!("megastore lock (pid {})", std::process::id());
        let mut lease = client.grant_lease(&owner, Duration::from_millis(args.ttl_ms)).await?;
        let token = acquire(&client, &mut lease, &args.name, args.wait_secs.map(Duration::from_secs)).await?;
        println!("lock {} held: lease {}, fencing token {}", args.name, lease.id, token.0);
        let mut child = match args.command.split_first() {
            Some((program, rest)) => Some(
                tokio::process::Command::new(program)
                    .args(rest)
                    .env("MEGASTORE_LOCK", &args.name)
                    .env("MEGASTORE_LEASE", lease.id.to_string())
                    .env("MEGASTORE_FENCING_TOKEN", token.0.to_string())
                    .kill_on_drop(true)
                    .spawn()
                    .with_context(|| format!("starting {program}"))?,
            ),
            None => None,
        };
        // Renew at a third of the ttl: two renewals can fail before the lease lapses.
        let mut renew = tokio::time::interval(lease.ttl / 3);
        let outcome = loop {
            tokio::select! {
                status = async { child.as_mut().expect("a child").wait().await }, if child.is_some() => {
                    let status = status.context("waiting for the command")?;
                    break Ok(ExitCode::from(status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1))));
                }
                _ = interrupts.until() => break Ok(ExitCode::SUCCESS),
                _ = renew.tick() => {
                    // A renewal still unanswered when the lease may have ended (lockd
                    // unreachable) counts as a failed one: the holder cannot know.
                    let deadline = tokio::time::Instant::from_std(lease.valid_until);
                    let renewed = tokio::time::timeout_at(deadline, client.keep_alive(&mut lease)).await;
                    let failure = match renewed {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(_) => Some("no renewal before the lease could end".to_string()),
                    };
                    if let Some(why) = failure {
                        // The lock may be someone else's now: stop acting on it.
                        if let Some(child) = child.as_mut() {
                            let _ = child.kill().await;
                        }
                        break Err(anyhow::anyhow!("lost lock {}: {why}", args.name));
                    }
                }
            }
        };
        // Give it back at once rather than at the lease's end.
        let _ = client.revoke_lease(lease.id).await;
        outcome
    })
}
