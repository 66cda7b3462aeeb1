//! Safety, **verified-scan**: a global index scan with verification returns an entry
//! only if the entry's group, at the position its verification read, still holds it —
//! and drops it only if not (docs/protocol.md, "Global indexes"). That the position
//! read is current (no lower than any write acknowledged, or position observed,
//! before the scan began) is linearizable-eg's sweep, which counts each group's check
//! as a current read. Catches a verification that trusts the scanned replica, or
//! compares with anything but the group's mirror as chosen.

use megastore_paxos::mirror_row_of;

use super::ChosenLog;
use crate::history::{OpKind, OpRecord, Outcome};

/// When a verified scan's check of one group finished.
pub(crate) fn on_op_done(
    chosen: &ChosenLog,
    record: &OpRecord,
    found: &mut Vec<(&'static str, String)>,
) {
    if record.kind != OpKind::VerifiedScan {
        return;
    }
    let Outcome::Verified { position, hits } = &record.outcome else {
        return;
    };
    let Some(mirror) = chosen.mirror_at(&record.eg, *position) else {
        found.push((
            "verified-scan",
            format!(
                "{} verified at {position}: a position up to it was never chosen",
                record.eg
            ),
        ));
        return;
    };
    for hit in hits {
        let held = mirror
            .get(&mirror_row_of(&record.eg, &hit.row))
            .cloned()
            .flatten();
        let current = hit.value.is_some() && held == hit.value;
        if hit.kept != current {
            found.push((
                "verified-scan",
                format!(
                    "client {} {} the global entry {} = {:?} of {} checked at {position}, where its mirror holds {:?}",
                    record.client.0,
                    if hit.kept { "kept" } else { "dropped" },
                    hit.row.escape_ascii(),
                    hit.value.as_deref().map(<[u8]>::escape_ascii).map(|v| v.to_string()),
                    record.eg,
                    held.as_deref().map(<[u8]>::escape_ascii).map(|v| v.to_string()),
                ),
            ));
        }
    }
}
