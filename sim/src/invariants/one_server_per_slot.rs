//! **one-server-per-slot** (docs/protocol.md, "Placement"): at no moment do two servers
//! serve one slot of one group. A move's source freezes the range before the move can
//! finish, and its target serves only once it reads the finished move, so the two
//! never answer for the same slot at once. Read from what each live server would
//! answer now (its placed core's `served_spans`), as *vouched-is-current* reads what a
//! coordinator would vouch for.

use std::collections::BTreeSet;

use megastore_paxos::span_keys;
use megastore_placement::Span;
use megastore_types::ReplicaId;

use crate::observation::Observation;

/// The pairs of servers already reported (one report per pair is enough).
#[derive(Debug, Default)]
pub(crate) struct Reported {
    pairs: BTreeSet<(ReplicaId, ReplicaId)>,
}

/// Whether two key spans share a key.
fn overlap(a: &Span, b: &Span) -> bool {
    span_keys(a.clone())
        .intersection(&span_keys(b.clone()))
        .is_some()
}

impl Reported {
    pub(crate) fn check(&mut self, obs: &Observation<'_>, found: &mut Vec<(&'static str, String)>) {
        if !obs.has_spares() {
            return;
        }
        for slot in obs.topology.replicas().iter().map(|info| info.id) {
            let serving: Vec<(ReplicaId, Vec<Span>)> = obs
                .servers_of(slot)
                .filter_map(|r| obs.served_spans(r).map(|spans| (r, spans)))
                .collect();
            for (i, (a, a_spans)) in serving.iter().enumerate() {
                for (b, b_spans) in &serving[i + 1..] {
                    let shared = a_spans
                        .iter()
                        .find(|x| b_spans.iter().any(|y| overlap(x, y)));
                    if let Some(shared) = shared
                        && self.pairs.insert((*a, *b))
                    {
                        found.push((
                            "one-server-per-slot",
                            format!(
                                "servers {} and {} both serve slot {} in {:?}..{:?}",
                                a.0, b.0, slot.0, shared.start, shared.end
                            ),
                        ));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: &[u8], end: Option<&[u8]>) -> Span {
        Span {
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn spans_overlap_only_when_they_share_a_key() {
        assert!(overlap(&span(b"", None), &span(b"m", Some(b"n"))));
        assert!(overlap(&span(b"a", Some(b"m")), &span(b"l", None)));
        assert!(!overlap(&span(b"a", Some(b"m")), &span(b"m", None)));
        assert!(!overlap(&span(b"m", None), &span(b"a", Some(b"m"))));
    }
}
