//! Safety and liveness, **queue-exactly-once-in-order**: every queue message delivered
//! into a receiver's inbox was sent — chosen in its sender's log, to that receiver, with
//! that body — and is delivered at most once; deliveries from one sender to one
//! receiver come in the order the sender's log chose the messages; a message is
//! consumed (its inbox row deleted) at most once; and every message a complete delivery
//! found in the sender's outbox, or that was trimmed from it, is delivered.
//! (docs/protocol.md, "Queues".) Judged from the chosen logs alone: the sends are the
//! chosen outbox writes, the deliveries and consumptions the chosen inbox writes.
//! Catches a deliverer that ignores the receiver's mark (`deliver-without-dedup`) and a
//! consumer that does not declare what it consumed (`consume-outside-txn`).

use std::collections::{BTreeMap, BTreeSet};

use megastore_paxos::queue::{self, Place};
use megastore_paxos::{CellWrite, LogEntry};

use megastore_types::{EgId, Position};

use super::ChosenLog;
use crate::history::{OpKind, OpRecord, Outcome};

/// A sent message: its receiver, queue and body.
type Sent = (EgId, String, Vec<u8>);

/// The outbox rows `entry` (chosen at `p` in `eg`) sets, as messages (stamped with
/// `p`, as every replica applies them).
fn sends_of(eg: &EgId, p: Position, entry: &LogEntry) -> Vec<queue::Outgoing> {
    queue::stamped_entry(eg, entry, p)
        .iter()
        .filter_map(|w| queue::outgoing(eg, &w.as_row(p.0)))
        .collect()
}

pub(crate) fn check(
    chosen: &ChosenLog,
    history: &[OpRecord],
    found: &mut Vec<(&'static str, String)>,
) {
    let mut violation = |detail: String| found.push(("queue-exactly-once-in-order", detail));
    let groups: Vec<EgId> = chosen.groups().map(|(eg, _)| eg.clone()).collect();
    let mut sent: BTreeMap<(EgId, Place), Sent> = BTreeMap::new();
    for eg in &groups {
        for (p, entry) in chosen.entries(eg) {
            for m in sends_of(eg, p, entry) {
                sent.insert((eg.clone(), m.place), (m.to, m.queue, m.body));
            }
        }
    }
    // Per message, where it was delivered; per (sender, receiver), the last place.
    let mut delivered: BTreeMap<(EgId, Place), (EgId, Position)> = BTreeMap::new();
    let mut consumed: BTreeSet<(EgId, EgId, Place)> = BTreeSet::new();
    for receiver in &groups {
        let mut last: BTreeMap<EgId, Place> = BTreeMap::new();
        for (p, entry) in chosen.entries(receiver) {
            for write in &entry.writes {
                let Some((queue_name, sender, place)) =
                    queue::parse_inbox_row(receiver, &write.row)
                else {
                    continue;
                };
                // A row write is one delivery (its body set) or one consumption (its
                // body deleted); its other cells go with it.
                let body = write.cells.iter().find(|c| c.column() == queue::BODY);
                if let Some(cell) = body {
                    match cell {
                        CellWrite::Set { value, .. } => {
                            match sent.get(&(sender.clone(), place)) {
                                Some((to, q, body))
                                    if to == receiver && *q == queue_name && body == value => {}
                                other => violation(format!(
                                    "{receiver} {p}: delivered a message of {sender} at {place:?} that {} ",
                                    match other {
                                        None => "was never sent".to_string(),
                                        Some((to, q, _)) =>
                                            format!("was sent to {to}'s queue {q:?} otherwise"),
                                    }
                                )),
                            }
                            if let Some((first, at)) = delivered.get(&(sender.clone(), place)) {
                                violation(format!(
                                    "{receiver} {p}: delivered the message of {sender} at {place:?} again (first into {first} at {at})"
                                ));
                            }
                            delivered.insert((sender.clone(), place), (receiver.clone(), p));
                            if let Some(before) = last.get(&sender)
                                && place <= *before
                            {
                                violation(format!(
                                    "{receiver} {p}: delivered {sender}'s message at {place:?} after its message at {before:?}"
                                ));
                            }
                            last.insert(sender.clone(), place);
                        }
                        CellWrite::Delete { .. } => {
                            if !consumed.insert((receiver.clone(), sender.clone(), place)) {
                                violation(format!(
                                    "{receiver} {p}: consumed the message of {sender} at {place:?} a second time"
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    // Liveness: a complete delivery leaves nothing it read, or anything before it,
    // undelivered.
    let mut read_through: BTreeMap<&EgId, Position> = BTreeMap::new();
    for op in history {
        if let (
            OpKind::Deliver,
            Outcome::Delivered {
                read_at: Some(at),
                complete: true,
                ..
            },
        ) = (op.kind, &op.outcome)
        {
            let through = read_through.entry(&op.eg).or_insert(*at);
            *through = (*through).max(*at);
        }
    }
    for ((sender, place), (to, _, _)) in &sent {
        let covered = read_through
            .get(sender)
            .is_some_and(|through| place.position <= *through);
        if covered && !delivered.contains_key(&(sender.clone(), *place)) {
            violation(format!(
                "{sender}'s message at {place:?} to {to} was never delivered, though a complete delivery read {sender} at {}",
                read_through[sender]
            ));
        }
    }
}
