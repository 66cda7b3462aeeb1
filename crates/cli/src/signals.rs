//! Waiting for the signal that ends a server process.
//!
//! Listening starts when [`Interrupts::listen`] is called, not when the wait begins: a
//! process that says it is serving and then starts waiting would otherwise die of a
//! SIGINT that arrives in between (its default action), skipping its clean stop.

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGINT and SIGTERM, caught from the moment of [`Interrupts::listen`].
pub(crate) struct Interrupts {
    interrupt: Signal,
    terminate: Signal,
}

impl Interrupts {
    /// Catches SIGINT and SIGTERM from now on (inside a tokio runtime).
    pub(crate) fn listen() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
        })
    }

    /// Returns once SIGINT or SIGTERM has arrived since [`Interrupts::listen`].
    pub(crate) async fn until(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
