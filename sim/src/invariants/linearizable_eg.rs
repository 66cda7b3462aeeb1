//! Invariant 6, **linearizable-eg**: each group's history of acknowledged writes and
//! current reads is linearizable; once a client observed a position, no later current
//! read misses it. Paper §4.1 ("a read always observes the last acknowledged write";
//! "after a write has been observed, all future reads observe that write").
//!
//! Exact and fast because every operation names its log position: the log order is the
//! linearization, so it suffices that (1) a current read at p returns exactly the state
//! after positions 1..=p, (2) an operation that starts after another finished is pinned
//! at a position no lower (strictly higher, for a write: the transactions of one
//! combined entry were all waiting before any of them finished), and (3) a committed
//! transaction's reads were not written between its read position and its own, nor
//! by a transaction before it in its own combined entry. A timed-out write is
//! "unknown", never "absent": it constrains nothing, but if it is in the log, reads
//! that observed it are pinned past it like any other.

use std::collections::BTreeMap;

use megastore_types::{EgId, Position};

use super::ChosenLog;
use crate::history::{OpKind, OpRecord, Outcome};

/// (1): a current read returned the log's state at its position.
pub(crate) fn check_read_state(
    chosen: &ChosenLog,
    record: &OpRecord,
    found: &mut Vec<(&'static str, String)>,
) {
    if record.kind != OpKind::CurrentRead {
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
    let Some(state) = chosen.state_at(&record.eg, *p) else {
        found.push((
            "linearizable-eg",
            format!(
                "{} read at {p}: a position up to it was never chosen",
                record.eg
            ),
        ));
        return;
    };
    let expected: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
        state.into_iter().filter(|(_, v)| v.is_some()).collect();
    if *values != expected {
        found.push((
            "linearizable-eg",
            format!(
                "{} current read by client {} at {p} from replica {} saw {values:?}, the log says {expected:?}",
                record.eg, record.client.0, replica.0
            ),
        ));
    }
}

/// (2) and (3), over the whole history.
pub(crate) fn check_history(
    chosen: &ChosenLog,
    history: &[OpRecord],
    found: &mut Vec<(&'static str, String)>,
) {
    let mut by_group: BTreeMap<&EgId, Vec<&OpRecord>> = BTreeMap::new();
    for op in history {
        if op.pinned_position().is_some() {
            by_group.entry(&op.eg).or_default().push(op);
        }
        if let Outcome::Committed {
            txn,
            position,
            read_position,
            read_keys,
        } = &op.outcome
        {
            for q in read_position.0 + 1..position.0 {
                let Some(entry) = chosen.get(&op.eg, Position(q)) else {
                    continue;
                };
                if let Some(row) = entry.written_rows().find(|r| read_keys.contains(*r)) {
                    found.push((
                        "linearizable-eg",
                        format!(
                            "{} {txn} committed at {position} after reading at {read_position}, but p{q} wrote its read row {}",
                            op.eg,
                            row.escape_ascii()
                        ),
                    ));
                }
            }
            // In an entry combining transactions, those before it are between its read
            // and its commit too.
            if let Some(entry) = chosen.get(&op.eg, *position) {
                let earlier = entry
                    .transactions()
                    .into_iter()
                    .take_while(|(t, _)| t != txn)
                    .flat_map(|(t, writes)| writes.iter().map(move |w| (t, &w.row)))
                    .find(|(_, row)| read_keys.contains(*row));
                if let Some((other, row)) = earlier {
                    found.push((
                        "linearizable-eg",
                        format!(
                            "{} {txn} committed at {position} after reading at {read_position}, but {other}, before it in the same entry, wrote its read row {}",
                            op.eg,
                            row.escape_ascii()
                        ),
                    ));
                }
            }
        }
    }
    for (eg, ops) in by_group {
        // Sweep in time order: at each start, the highest position of any operation
        // already finished.
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            events.push((op.start, true, i));
            events.push((op.end, false, i));
        }
        // Ends before starts at the same instant: such operations are not concurrent.
        events.sort_by_key(|(t, is_start, i)| (*t, *is_start, *i));
        let mut finished_max: Option<(Position, usize)> = None;
        let mut bar_at_start: BTreeMap<usize, Option<(Position, usize)>> = BTreeMap::new();
        for (_, is_start, i) in events {
            if is_start {
                bar_at_start.insert(i, finished_max);
            } else {
                let p = ops[i]
                    .pinned_position()
                    .expect("only pinned operations are swept");
                if let Some((bar, by)) = bar_at_start[&i] {
                    // A write lands above everything observed before it began (its own
                    // read saw at least that much); a read sees at least that much.
                    let too_low = if ops[i].kind == OpKind::Commit {
                        p <= bar
                    } else {
                        p < bar
                    };
                    if too_low {
                        found.push((
                            "linearizable-eg",
                            format!(
                                "{eg}: client {} {:?} pinned at {p} started after client {} {:?} finished at {bar}",
                                ops[i].client.0, ops[i].kind, ops[by].client.0, ops[by].kind
                            ),
                        ));
                    }
                }
                if finished_max.is_none_or(|(max, _)| p > max) {
                    finished_max = Some((p, i));
                }
            }
        }
    }
}
