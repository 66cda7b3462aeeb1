//! `megastore bench --plot FILE.svg`: the latency distribution of each operation kind
//! as an HdrHistogram percentile plot — percentiles on a "nines" axis (50 %, 90 %,
//! 99 %, 99.9 % … evenly spaced), latency on a log axis — one line per kind.

use std::path::Path;

use anyhow::Context;
use megastore_bench::Report;
use plotters::prelude::*;

/// The x of quantile `q`: how many nines (`q = 0.99` → 2); the slowest sample, at
/// `q = 1`, is put one step past the last finite point.
fn nines(q: f64, last: f64) -> f64 {
    if q >= 1.0 { last } else { -(1.0 - q).log10() }
}

/// Writes the plot of `report` to `path` (SVG).
pub(crate) fn write_plot(path: &Path, report: &Report) -> anyhow::Result<()> {
    let kinds: Vec<_> = report.kinds.iter().filter(|k| k.count > 0).collect();
    anyhow::ensure!(!kinds.is_empty(), "no operation completed: nothing to plot");
    let samples = kinds.iter().map(|k| k.count).max().unwrap_or(1) as f64;
    // The finest quantile the samples resolve, and one more step for the slowest.
    let last = samples.log10().max(1.0) + 0.5;
    let lowest = kinds
        .iter()
        .flat_map(|k| k.curve.iter().map(|(_, v)| *v))
        .min()
        .unwrap_or(1)
        .max(1) as f64
        / 1000.0;
    let highest = kinds.iter().map(|k| k.max_us).max().unwrap_or(1).max(1) as f64 / 1000.0;
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).context("drawing the plot")?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "megastore bench: {} clients, {} groups, {:.0}% reads ({:.0} s)",
                report.clients,
                report.groups,
                report.read_fraction * 100.0,
                report.elapsed_s
            ),
            ("sans-serif", 18),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..last, (lowest * 0.8..highest * 1.25).log_scale())
        .context("laying out the plot")?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .x_labels(((last.floor() as usize) + 1).min(8))
        .x_label_formatter(&|x| {
            let percent = 100.0 * (1.0 - 10f64.powf(-x));
            format!("{percent:.*}%", (x.floor() as usize).saturating_sub(2))
        })
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .context("drawing the axes")?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (i, kind) in kinds.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<(f64, f64)> = kind
            .curve
            .iter()
            .map(|(q, v)| (nines(*q, last), (*v).max(1) as f64 / 1000.0))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .context("drawing a series")?
            .label(format!(
                "{} (p50 {:.2} ms, p99 {:.2} ms)",
                kind.kind,
                kind.p50_us as f64 / 1000.0,
                kind.p99_us as f64 / 1000.0
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .context("drawing the legend")?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
