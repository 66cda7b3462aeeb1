//! Structured logs on stderr; `RUST_LOG` chooses what (default: info, openraft warn).

use std::io::IsTerminal;

/// Installs the log subscriber (once; later calls do nothing).
pub(crate) fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: log files stay plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Installs a log subscriber that shows only warnings and errors (unless `RUST_LOG`
/// says otherwise), for commands whose own output is the point.
pub(crate) fn init_quiet() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,openraft=off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: log files stay plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
