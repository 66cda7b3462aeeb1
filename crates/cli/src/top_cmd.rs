//! `megastore top`: a live terminal view of a running cluster — commits, conflicts and
//! reads per site, each replica's lag, and the hottest entity groups — polled from
//! every replica server's `Admin.Activity` (docs/operations.md, "Watching a cluster").
//! `--frames N` prints frames as text instead, for scripts, logs and tests.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use megastore_client::HOT_GROUPS_TRACKED;
use megastore_client::activity::poll_activity;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::cluster_arg::ClusterArg;
use crate::top_view::{Sample, TopView, frame_text};

/// Watch a running cluster live: commits, conflicts and reads per site, each replica's
/// lag, and the hottest entity groups (q quits).
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// Seconds between polls (0.1 to 60).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    interval: f64,
    /// Print this many frames as text, one per poll after the first, and exit: no
    /// terminal needed (scripts, logs).
    #[arg(long, value_name = "N")]
    frames: Option<u32>,
    /// The size of a printed frame, COLUMNSxROWS (with --frames).
    #[arg(long, default_value = "120x40", value_name = "COLUMNSxROWS")]
    size: String,
}

pub(crate) fn run(args: TopArgs) -> anyhow::Result<ExitCode> {
    if !(0.1..=60.0).contains(&args.interval) {
        bail!(
            "--interval: between 0.1 and 60 seconds, not {}",
            args.interval
        );
    }
    let interval = Duration::from_secs_f64(args.interval);
    let size = parse_size(&args.size)?;
    let config = args.cluster.load()?;
    crate::logging::init_quiet();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    // Groups are named by their root entity when the schema is at hand; without it
    // (lockd unreachable: asked for one RPC timeout only) by their key.
    let catalog = runtime.block_on(async {
        let lockd = megastore_rpc::LockdClient::new(&config).ok()?;
        let load = megastore_client::schema_store::load_catalog(&lockd);
        tokio::time::timeout(config.timeouts.rpc(), load)
            .await
            .ok()?
            .ok()
            .flatten()
            .map(|(catalog, _)| catalog)
    });
    let mut view = TopView::new(config.cluster.name.clone(), interval, catalog);
    let started = Instant::now();
    let poll = || {
        let polls = runtime.block_on(poll_activity(&config, HOT_GROUPS_TRACKED as u32));
        Sample {
            at: started.elapsed(),
            polls,
        }
    };
    match args.frames {
        Some(frames) => {
            let mut terminal = Terminal::new(TestBackend::new(size.0, size.1))?;
            view.push(poll());
            for frame in 1..=frames {
                std::thread::sleep(interval);
                view.push(poll());
                terminal.draw(|f| view.draw(f))?;
                println!("--- frame {frame} of {frames}");
                print!("{}", frame_text(terminal.backend().buffer()));
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            if !std::io::stdout().is_terminal() {
                bail!("megastore top draws on a terminal: give --frames N to print frames as text");
            }
            let mut terminal = ratatui::init();
            let result = (|| -> anyhow::Result<()> {
                loop {
                    view.push(poll());
                    terminal.draw(|f| view.draw(f))?;
                    if quit_within(interval)? {
                        return Ok(());
                    }
                }
            })();
            ratatui::restore();
            result.map(|()| ExitCode::SUCCESS)
        }
    }
}

/// Waits up to `wait` for a key: whether it asked to quit (q, Esc, Ctrl-C).
fn quit_within(wait: Duration) -> anyhow::Result<bool> {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || !event::poll(left)? {
            return Ok(false);
        }
        if let Event::Key(key) = event::read()? {
            let ctrl_c =
                key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
            if key.kind == KeyEventKind::Press
                && (matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c)
            {
                return Ok(true);
            }
        }
    }
}

/// `COLUMNSxROWS`, at least 80x24 and at most 1000x1000.
fn parse_size(text: &str) -> anyhow::Result<(u16, u16)> {
    let parsed = text
        .split_once('x')
        .and_then(|(c, r)| Some((c.parse::<u16>().ok()?, r.parse::<u16>().ok()?)));
    match parsed {
        Some((c, r)) if (80..=1000).contains(&c) && (24..=1000).contains(&r) => Ok((c, r)),
        _ => bail!("--size: COLUMNSxROWS, at least 80x24 and at most 1000x1000, not {text:?}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_frame_size_is_columns_by_rows_within_bounds() {
        assert_eq!(super::parse_size("120x40").unwrap(), (120, 40));
        for bad in ["120", "x40", "79x40", "120x23", "abcx40", "2000x40"] {
            let e = super::parse_size(bad).unwrap_err().to_string();
            assert!(e.contains("--size") && e.contains(bad), "{e}");
        }
    }
}
