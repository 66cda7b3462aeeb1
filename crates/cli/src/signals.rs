//! Waiting for the signal that ends a server process.

use anyhow::Context;

/// Returns when the process gets SIGINT or SIGTERM.
pub(crate) async fn until_interrupted() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.context("listening for SIGINT")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
