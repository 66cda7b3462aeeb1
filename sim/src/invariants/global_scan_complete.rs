//! Liveness, **global-scan-complete**: once faults are healed, writes have stopped and
//! every replica has converged, a scan of the whole global index (as applied) returns
//! exactly the entries the groups' mirrors hold as chosen — every one once, none
//! other — whichever client asks and however old the placement it routes by (docs/
//! protocol.md, "Global indexes", *scan-asks-every-holder*). A replica whose ranges lie
//! on several servers (a home and its spare) has its index split among them, so a scan
//! that asks only some of them misses entries. Catches a scan that asks one server of
//! a slot (`scan-first-server-only`), or that keeps routing by a placement from
//! before a move.

use std::collections::BTreeMap;

use megastore_paxos::mirrored_global_row;
use megastore_types::ClientId;

use super::ChosenLog;

/// What one client's scan of the whole global index found: each entry's row and
/// value, or why it failed.
pub(crate) type FinalScan = Result<Vec<(Vec<u8>, Option<Vec<u8>>)>, String>;

pub(crate) fn check(
    chosen: &ChosenLog,
    scans: &[(ClientId, &FinalScan)],
    found: &mut Vec<(&'static str, String)>,
) {
    if scans.is_empty() {
        return;
    }
    let mut want: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for (eg, position) in chosen.groups() {
        let Some(mirror) = chosen.mirror_at(eg, position) else {
            continue;
        };
        for (row, value) in mirror {
            if let (Some(global), Some(value)) = (mirrored_global_row(eg, &row), value) {
                want.insert(global.to_vec(), Some(value));
            }
        }
    }
    for (client, scan) in scans {
        let got: BTreeMap<Vec<u8>, Option<Vec<u8>>> = match scan {
            Ok(rows) => rows.iter().cloned().collect(),
            Err(why) => {
                found.push((
                    "global-scan-complete",
                    format!(
                        "client {}'s scan of the global index after the run failed: {why}",
                        client.0
                    ),
                ));
                continue;
            }
        };
        let repeated = got.len() != scan.as_ref().map_or(0, Vec::len);
        if got != want || repeated {
            let missing = want.iter().find(|(k, v)| got.get(*k) != Some(v));
            let extra = got.iter().find(|(k, v)| want.get(*k) != Some(v));
            found.push((
                "global-scan-complete",
                format!(
                    "client {}'s scan of the global index after the run found {} entries{}, the mirrors hold {}; first missing {:?}, first not in a mirror {:?}",
                    client.0,
                    got.len(),
                    if repeated { " (some twice)" } else { "" },
                    want.len(),
                    missing.map(|(k, _)| k.escape_ascii().to_string()),
                    extra.map(|(k, _)| k.escape_ascii().to_string()),
                ),
            ));
        }
    }
}
