//! `megastore range catch-up [RANGE…]`: catches up ranges' voter changes so that each
//! may take its next one (docs/operations.md, "Replacing a witness"): every voter of
//! the range runs the catch-up pass at once, with a spinner while they run, then the
//! change is recorded caught up. The steps are the client library's `voter_catch_up`;
//! this is their display.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget};
use megastore_client::voter_catch_up::catch_up_voters;

use crate::cluster_arg::ClusterArg;
use crate::range_cmd::{parse_range, server_name};

#[derive(Debug, Args)]
pub(crate) struct CatchUpArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The ranges (`3` or `range-3`); none: every range whose voter change is not
    /// caught up yet.
    ranges: Vec<String>,
}

pub(crate) fn run(args: CatchUpArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let ranges = args
        .ranges
        .iter()
        .map(|r| parse_range(r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let bar = ProgressBar::new_spinner();
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_message("every voter of the range runs its catch-up pass");
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let runtime = tokio::runtime::Runtime::new()?;
    let done = runtime.block_on(catch_up_voters(
        &config,
        &ranges,
        |range, server, outcome| {
            let shown = server_name(&config, server);
            let line = match outcome {
                Ok(found) if found.not_held == 0 => format!(
                    "{range}: server {shown}: {} group(s), each held by a majority of the voters",
                    found.held
                ),
                Ok(found) => format!(
                    "{range}: server {shown}: {} group(s) held, {} not yet (first: {})",
                    found.held,
                    found.not_held,
                    found
                        .named
                        .iter()
                        .map(|g| crate::bytes_arg::show_bytes(g))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Err(why) => format!("{range}: server {shown}: no pass: {why}"),
            };
            // Printed on stdout (a hidden bar's `println` would drop it), the spinner
            // out of the way meanwhile.
            bar.suspend(|| println!("{line}"));
        },
    ));
    bar.finish_and_clear();
    let done = done?;
    if done.is_empty() {
        println!("no range has a voter change waiting to be caught up");
        return Ok(ExitCode::SUCCESS);
    }
    let mut all = true;
    for range in &done {
        match (range.changed_at, range.recorded) {
            (None, _) => println!("{}: no voter change waits to be caught up", range.range),
            (Some(at), Some(version)) => println!(
                "{}: the voter change at {at} is caught up (placement {version}): the range may take another",
                range.range
            ),
            (Some(at), None) => {
                all = false;
                println!(
                    "{}: the voter change at {at} is not caught up yet: run `megastore range catch-up {}` again once every voter's server is up",
                    range.range, range.range.0
                );
            }
        }
    }
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
