//! What `megastore top` shows, from its polls: rates per site (commits, conflicts, reads
//! by path), each replica's lag, the hottest groups per site, and a sparkline of the
//! cluster's commits per second. Pure: polls in, a drawn frame out (tested on ratatui's
//! test backend).

use std::collections::VecDeque;
use std::time::Duration;

use megastore_client::activity::ReplicaPoll;
use megastore_client::{GroupCount, HOT_GROUPS_TRACKED};
use megastore_schema::Catalog;
use megastore_types::EgId;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Sparkline, Table};

/// Polls kept for the sparkline.
const HISTORY: usize = 120;

/// Hot groups shown.
const HOT_ROWS: usize = 10;

/// One poll of every replica, and when it was taken (since `top` started).
pub(crate) struct Sample {
    pub(crate) at: Duration,
    pub(crate) polls: Vec<ReplicaPoll>,
}

/// The polls so far, and what to name groups by.
pub(crate) struct TopView {
    cluster: String,
    interval: Duration,
    samples: VecDeque<Sample>,
    catalog: Option<Catalog>,
}

/// One site's rates per second over the last interval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SiteRates {
    pub(crate) site: String,
    pub(crate) commits: f64,
    pub(crate) conflicts: f64,
    pub(crate) reads_local: f64,
    pub(crate) reads_majority: f64,
    pub(crate) reads_other: f64,
}

/// One hot group at one site, over the last interval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HotRow {
    pub(crate) site: String,
    pub(crate) group: EgId,
    pub(crate) commits: f64,
    pub(crate) conflicts: f64,
    /// Estimated commits since its server started.
    pub(crate) commits_total: u64,
}

impl TopView {
    pub(crate) fn new(cluster: String, interval: Duration, catalog: Option<Catalog>) -> Self {
        Self {
            cluster,
            interval,
            samples: VecDeque::new(),
            catalog,
        }
    }

    pub(crate) fn push(&mut self, sample: Sample) {
        if self.samples.len() == HISTORY {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The last two samples and the seconds between them.
    fn last_two(&self) -> Option<(&Sample, &Sample, f64)> {
        let n = self.samples.len();
        let (prev, now) = (
            self.samples.get(n.checked_sub(2)?)?,
            self.samples.get(n - 1)?,
        );
        let seconds = now.at.saturating_sub(prev.at).as_secs_f64();
        (seconds > 0.0).then_some((prev, now, seconds))
    }

    /// Rates per site over the last interval, sites in config order (none before the
    /// second poll). A replica that did not answer either time counts nothing; one that
    /// restarted (its counters went down) counts from zero.
    pub(crate) fn site_rates(&self) -> Vec<SiteRates> {
        let Some((prev, now, seconds)) = self.last_two() else {
            return Vec::new();
        };
        let mut sites: Vec<SiteRates> = Vec::new();
        for (i, poll) in now.polls.iter().enumerate() {
            let at = match sites.iter().position(|s| s.site == poll.site) {
                Some(at) => at,
                None => {
                    sites.push(SiteRates {
                        site: poll.site.clone(),
                        commits: 0.0,
                        conflicts: 0.0,
                        reads_local: 0.0,
                        reads_majority: 0.0,
                        reads_other: 0.0,
                    });
                    sites.len() - 1
                }
            };
            let (Some(new), Some(old)) = (
                poll.activity.as_ref(),
                prev.polls.get(i).and_then(|p| p.activity.as_ref()),
            ) else {
                continue;
            };
            let (n, o) = (new.totals, old.totals);
            let rate = |new: u64, old: u64| {
                let delta = if new >= old { new - old } else { new };
                delta as f64 / seconds
            };
            let site = &mut sites[at];
            site.commits += rate(n.commits, o.commits);
            site.conflicts += rate(n.conflicts, o.conflicts);
            site.reads_local += rate(n.reads_local, o.reads_local);
            site.reads_majority += rate(n.reads_majority, o.reads_majority);
            site.reads_other += rate(n.reads_other, o.reads_other);
        }
        sites
    }

    /// The cluster's commits per second between each pair of polls kept.
    pub(crate) fn commit_history(&self) -> Vec<u64> {
        let total = |s: &Sample| -> u64 {
            s.polls
                .iter()
                .filter_map(|p| p.activity.as_ref())
                .map(|a| a.totals.commits)
                .sum()
        };
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .map(|(prev, now)| {
                let seconds = now.at.saturating_sub(prev.at).as_secs_f64().max(1e-3);
                (total(now).saturating_sub(total(prev)) as f64 / seconds).round() as u64
            })
            .collect()
    }

    /// The hottest groups over the last interval, per site, by commits plus conflicts
    /// per second, most first. A group the previous poll did not list counts from the
    /// least count that poll listed if its list was full (a space-saving top-k's bound
    /// on anything it does not track), else from zero.
    pub(crate) fn hot_rows(&self) -> Vec<HotRow> {
        let Some((prev, now, seconds)) = self.last_two() else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        for (i, poll) in now.polls.iter().enumerate() {
            let Some(new) = &poll.activity else { continue };
            let old = prev.polls.get(i).and_then(|p| p.activity.as_ref());
            let rate = |now: &[GroupCount], before: Option<&[GroupCount]>, group: &EgId| {
                let Some(count) = now.iter().find(|c| &c.group == group).map(|c| c.count) else {
                    return 0.0;
                };
                let before =
                    before.map_or(0, |list| match list.iter().find(|c| &c.group == group) {
                        Some(c) => c.count,
                        None if list.len() >= HOT_GROUPS_TRACKED => {
                            list.iter().map(|c| c.count).min().unwrap_or(0)
                        }
                        None => 0,
                    });
                count.saturating_sub(before) as f64 / seconds
            };
            let mut groups: Vec<&EgId> = new.hot.commits.iter().map(|c| &c.group).collect();
            for c in &new.hot.conflicts {
                if !groups.contains(&&c.group) {
                    groups.push(&c.group);
                }
            }
            for group in groups {
                let commits = rate(
                    &new.hot.commits,
                    old.map(|o| o.hot.commits.as_slice()),
                    group,
                );
                let conflicts = rate(
                    &new.hot.conflicts,
                    old.map(|o| o.hot.conflicts.as_slice()),
                    group,
                );
                if commits + conflicts == 0.0 {
                    continue;
                }
                let commits_total = new
                    .hot
                    .commits
                    .iter()
                    .find(|c| &c.group == group)
                    .map_or(0, |c| c.count);
                rows.push(HotRow {
                    site: poll.site.clone(),
                    group: group.clone(),
                    commits,
                    conflicts,
                    commits_total,
                });
            }
        }
        rows.sort_by(|a, b| {
            (b.commits + b.conflicts)
                .total_cmp(&(a.commits + a.conflicts))
                .then_with(|| a.group.cmp(&b.group))
        });
        rows.truncate(HOT_ROWS);
        rows
    }

    /// Draws the whole view into `frame`.
    pub(crate) fn draw(&self, frame: &mut Frame<'_>) {
        let (sites_rows, replica_rows, hot_rows) = (
            self.sites_rows(),
            self.replica_rows(),
            self.hot_table_rows(),
        );
        // Borders and a header around each table's rows; the hot groups take the rest.
        let height = |rows: &[Vec<String>]| u16::try_from(rows.len() + 3).unwrap_or(u16::MAX);
        let [title, sparkline, sites, replicas, hot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(5),
            Constraint::Length(height(&sites_rows)),
            Constraint::Length(height(&replica_rows)),
            Constraint::Min(4),
        ])
        .areas(frame.area());
        frame.render_widget(
            Paragraph::new(format!(
                "megastore top · cluster {} · every {:.1} s · q quits",
                self.cluster,
                self.interval.as_secs_f64()
            ))
            .style(Style::new().add_modifier(Modifier::BOLD)),
            title,
        );
        let history = self.commit_history();
        let now = history.last().copied().unwrap_or(0);
        frame.render_widget(
            Sparkline::default()
                .block(block(&format!("commits/s, whole cluster (now {now})")))
                .data(&history),
            sparkline,
        );
        let sites_header = [
            "site",
            "commits/s",
            "conflicts/s",
            "conflicts",
            "local reads/s",
            "majority reads/s",
            "local",
            "other reads/s",
        ];
        let sites_title = "per site (each site's public API)";
        frame.render_widget(table(&sites_header, None, sites_rows, sites_title), sites);
        let replicas_header = ["replica", "site", "kind", "state", "behind"];
        frame.render_widget(
            table(&replicas_header, Some(4), replica_rows, "replicas"),
            replicas,
        );
        let hot_header = [
            "site",
            "group",
            "commits/s",
            "conflicts/s",
            "commits (total)",
        ];
        let hot_title = "hottest groups (by commits + conflicts per second)";
        frame.render_widget(table(&hot_header, Some(1), hot_rows, hot_title), hot);
    }

    fn sites_rows(&self) -> Vec<Vec<String>> {
        let share = |part: f64, whole: f64| {
            if whole > 0.0 {
                format!("{:.0} %", 100.0 * part / whole)
            } else {
                "-".into()
            }
        };
        self.site_rates()
            .into_iter()
            .map(|s| {
                let local = share(s.reads_local, s.reads_local + s.reads_majority);
                let conflicts = share(s.conflicts, s.commits + s.conflicts);
                vec![
                    s.site,
                    rate(s.commits),
                    rate(s.conflicts),
                    conflicts,
                    rate(s.reads_local),
                    rate(s.reads_majority),
                    local,
                    rate(s.reads_other),
                ]
            })
            .collect()
    }

    fn replica_rows(&self) -> Vec<Vec<String>> {
        let polls = self.samples.back().into_iter().flat_map(|s| &s.polls);
        polls
            .map(|p| {
                let (state, behind) = match &p.activity {
                    Some(a) => (
                        "serving".to_string(),
                        format!(
                            "{} / {}",
                            counted(a.lag.groups, "group"),
                            counted(a.lag.positions, "position")
                        ),
                    ),
                    None => ("unreachable".to_string(), "-".to_string()),
                };
                vec![
                    p.name.clone(),
                    p.site.clone(),
                    p.kind.to_string(),
                    state,
                    behind,
                ]
            })
            .collect()
    }

    fn hot_table_rows(&self) -> Vec<Vec<String>> {
        self.hot_rows()
            .into_iter()
            .map(|h| {
                vec![
                    h.site,
                    megastore_client::describe_group(self.catalog.as_ref(), &h.group),
                    rate(h.commits),
                    rate(h.conflicts),
                    h.commits_total.to_string(),
                ]
            })
            .collect()
    }
}

/// `n thing`, plural when `n` is not 1.
fn counted(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

fn rate(per_second: f64) -> String {
    if per_second >= 10.0 {
        format!("{per_second:.0}")
    } else {
        format!("{per_second:.1}")
    }
}

fn block(title: &str) -> Block<'static> {
    Block::default()
        .borders(Borders::ALL)
        .title(Line::from(title.to_string()))
}

/// A table with a bold header, each column as wide as its widest cell, but the
/// `wide` one, which takes what is left.
fn table(
    header: &[&'static str],
    wide: Option<usize>,
    rows: Vec<Vec<String>>,
    title: &str,
) -> Table<'static> {
    let widths: Vec<Constraint> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let widest = rows
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0);
            let widest = u16::try_from(widest).unwrap_or(u16::MAX);
            match wide {
                Some(w) if w == i => Constraint::Min(widest.max(24)),
                _ => Constraint::Length(widest),
            }
        })
        .collect();
    let header = Row::new(header.iter().map(|h| Cell::from(*h)))
        .style(Style::new().add_modifier(Modifier::BOLD));
    Table::new(rows.into_iter().map(Row::new), widths)
        .header(header)
        .block(block(title))
}

/// A drawn frame as text, one line per row, trailing blanks trimmed.
pub(crate) fn frame_text(buffer: &ratatui::buffer::Buffer) -> String {
    let area = buffer.area;
    let mut out = String::new();
    for y in area.top()..area.bottom() {
        let line: String = (area.left()..area.right())
            .map(|x| buffer[(x, y)].symbol())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
