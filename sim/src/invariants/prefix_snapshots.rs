//! Invariant 7, **prefix-snapshots**: a snapshot read sees exactly a prefix of the
//! group's log — the state after its position and nothing else; apply is idempotent
//! and in log order. Paper §4.2 (snapshot reads "at the timestamp of the last fully
//! applied transaction") and §4.6.1 (apply in log order). A read at a given position —
//! a transaction's reads after its first (paper §3.3: a transaction reads at one
//! timestamp) — is held to the same rule.

use super::ChosenLog;
use crate::history::{OpKind, OpRecord, Outcome};

pub(crate) fn on_op_done(
    chosen: &ChosenLog,
    record: &OpRecord,
    found: &mut Vec<(&'static str, String)>,
) {
    if !matches!(record.kind, OpKind::SnapshotRead | OpKind::AtPositionRead) {
        return;
    }
    let Outcome::Read {
        position: Some(p),
        values,
        replica,
        ..
    } = &record.outcome
    else {
        return;
    };
    let read = if record.kind == OpKind::SnapshotRead {
        "snapshot"
    } else {
        "read at the transaction's position"
    };
    let Some(expected) = chosen.state_at(&record.eg, *p) else {
        found.push((
            "prefix-snapshots",
            format!(
                "{} {read} {p} from replica {}: a position below it was never chosen",
                record.eg, replica.0
            ),
        ));
        return;
    };
    let expected: std::collections::BTreeMap<_, _> = expected
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, Some(v))))
        .collect();
    if *values != expected {
        found.push((
            "prefix-snapshots",
            format!(
                "{} {read} {p} from replica {} saw {values:?}, the log says {expected:?}",
                record.eg, replica.0
            ),
        ));
    }
}
