//! The run's trace: a hash of every delivered message and noted event (so one seed
//! always gives one hash), and, when reproducing, the readable lines.

use std::fmt::Write as _;
use std::hash::Hasher;

use megastore_paxos::Message;
use megastore_types::NodeId;
use xxhash_rust::xxh3::Xxh3;

/// Feeds formatted text into the hash without allocating.
struct HashWriter<'a>(&'a mut Xxh3);

impl std::fmt::Write for HashWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// The trace of one run.
pub(crate) struct Trace {
    hasher: Xxh3,
    lines: Option<Vec<String>>,
}

impl Trace {
    /// A trace that keeps readable lines only if `readable`.
    pub(crate) fn new(readable: bool) -> Self {
        Self {
            hasher: Xxh3::new(),
            lines: readable.then(Vec::new),
        }
    }

    /// A message was delivered.
    pub(crate) fn record(&mut self, now: u64, from: NodeId, to: NodeId, message: &Message) {
        let _ = write!(
            HashWriter(&mut self.hasher),
            "{now} {from}>{to} {message:?};"
        );
        if let Some(lines) = &mut self.lines {
            lines.push(format!(
                "{:>12.6}s  {from} -> {to}  {message:?}",
                now as f64 / 1e9
            ));
        }
    }

    /// Something else happened (a fault, an operation finishing).
    pub(crate) fn note(&mut self, now: u64, text: &str) {
        let _ = write!(HashWriter(&mut self.hasher), "{now} {text};");
        if let Some(lines) = &mut self.lines {
            lines.push(format!("{:>12.6}s  ** {text}", now as f64 / 1e9));
        }
    }

    /// The hash so far.
    pub(crate) fn hash(&self) -> u64 {
        self.hasher.finish()
    }

    /// The readable lines, if kept.
    pub(crate) fn lines(&self) -> &[String] {
        self.lines.as_deref().unwrap_or(&[])
    }
}
