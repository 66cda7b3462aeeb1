//! A move's short final copy, over real replica cores (docs/protocol.md, "A short
//! freeze"): the source tracks the groups it changed since the bulk copy's first page,
//! the target keeps the token its pages came under, and the final copy copies only the
//! changed groups when the target's bulk copy is a clean base for a token the source
//! still tracks (*delta-on-a-clean-base*) — the whole range otherwise. After each
//! final copy the target's store must hold exactly the frozen source's state of the
//! range; the two knobs that break the rule must each leave it short of a write.

mod support;

use megastore_paxos::messages::AcceptResult;
use megastore_paxos::{
    ChangeToken, ProtocolBugs, RangeCopy, ReplicaInput, ReplicaReply, ReplicaRequest, export_pages,
    group_state_spans,
};
use megastore_placement::{FinalCopyRefused, Placement, Range, RangeId, ServerId, Version};
use megastore_rowstore::{Durability, KeyRange, MemoryStore, RowRead};
use megastore_types::{EgId, Position, ReplicaId, Time};
use support::{Node, ballot, replica_on, servers_0_and_1_at_site_1, topology, write};

fn keys(range: &Range) -> KeyRange {
    KeyRange {
        start: range.start.clone(),
        end: range.end.clone(),
    }
}

/// Chooses and marks visible `value` at position `p` of group `eg` on `node`.
fn commit(node: &mut Node, eg: &EgId, p: u64, value: &str) {
    let mut entry = write(p, Some(1), value);
    for w in &mut entry.writes {
        w.row = [&eg.0[..], b"\x01k"].concat();
    }
    let accepted = node.ask(ReplicaRequest::Accept {
        id: 1,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(1),
        entry: entry.clone(),
        grant: false,
        previous_visible: None,
        voters_at: Version(0),
    });
    assert!(
        matches!(
            accepted,
            ReplicaReply::Accept {
                result: AcceptResult::Accepted,
                ..
            }
        ),
        "{accepted:?}"
    );
    let marked = node.ask(ReplicaRequest::MarkVisible {
        id: 2,
        eg: eg.clone(),
        position: Position(p),
        ballot: ballot(1),
        entry,
    });
    assert!(
        matches!(marked, ReplicaReply::MarkedVisible { .. }),
        "{marked:?}"
    );
}

/// A move of replica 1's slot of a range holding four groups, from the server holding
/// it to the other server at site 1; both servers have read the move.
struct Move {
    range: RangeId,
    keys: KeyRange,
    move_id: Version,
    placement: Placement,
    from: ServerId,
    source: Node,
    target: Node,
    groups: Vec<EgId>,
}

impl Move {
    fn new(source_bugs: ProtocolBugs, target_bugs: ProtocolBugs) -> Self {
        let p0 = Placement::initial(servers_0_and_1_at_site_1(), &topology(), 2).unwrap();
        let range = p0.range_of(b"g1").clone();
        let groups: Vec<EgId> = (b'a'..=b'z')
            .map(|c| EgId(vec![b'g', c]))
            .filter(|eg| p0.range_of(&eg.0).id == range.id)
            .take(4)
            .collect();
        assert_eq!(groups.len(), 4, "four groups in the range");
        let from = range.slot(ReplicaId(1)).unwrap().server;
        let to = ServerId(1 - from.0);
        let mut source = replica_on(from, &p0, MemoryStore::new(), source_bugs);
        let mut target = replica_on(to, &p0, MemoryStore::new(), target_bugs);
        let placement = p0.begin_move(range.id, ReplicaId(1), to).unwrap();
        for node in [&mut source, &mut target] {
            node.step_at(Time::ZERO, ReplicaInput::Placement(placement.clone()));
        }
        Self {
            range: range.id,
            keys: keys(&range),
            move_id: placement.version(),
            placement,
            from,
            source,
            target,
            groups,
        }
    }

    /// Begins a copy at the target: for a final copy on a clean base, of the groups
    /// the source names as changed since. The changed groups, if that.
    fn begin(&mut self, last: bool) -> (RangeCopy, Option<Vec<EgId>>) {
        let changed = last
            .then(|| self.target.replica.copy_base(self.range, self.move_id))
            .flatten()
            .and_then(|token| {
                self.source
                    .replica
                    .changed_groups(self.range, self.move_id, token)
                    .expect("the source gives the final copy")
            });
        let copy = self
            .target
            .replica
            .begin_copy(
                &self.target.store,
                self.range,
                self.move_id,
                last,
                changed.as_deref(),
            )
            .unwrap();
        (copy, changed)
    }

    /// One answer of the source (two rows), applied at the target.
    fn copy_step(&mut self, copy: &mut RangeCopy, last: bool, nonce: u64) {
        let token = self
            .source
            .replica
            .page_token(self.range, self.move_id, last, nonce);
        let pages = export_pages(&self.source.store, copy.next_spans(4), 2).unwrap();
        for page in &pages {
            self.target
                .replica
                .apply_copied_page(&self.target.store, copy, page, token, 2, Durability::Synced)
                .unwrap();
        }
    }

    /// A whole copy; the changed groups it copied if it was a short final copy.
    fn copy(&mut self, last: bool, nonce: u64) -> Option<Vec<EgId>> {
        let (mut copy, changed) = self.begin(last);
        while !copy.is_done() {
            self.copy_step(&mut copy, last, nonce);
        }
        changed
    }

    fn freeze(&mut self) {
        self.source.step_at(
            Time::ZERO,
            ReplicaInput::Freeze {
                range: self.range,
                move_id: self.move_id,
            },
        );
        assert!(
            self.source
                .replica
                .placement()
                .unwrap()
                .frozen_for(self.range, self.move_id)
        );
    }

    /// Each group written once; a bulk copy begun (token 7) and its first page
    /// applied; then the first group, which that page copied, written again. The
    /// copy, with pages still to come.
    fn first_page_then_a_change(&mut self) -> RangeCopy {
        for eg in self.groups.clone() {
            commit(&mut self.source, &eg, 1, "one");
        }
        let (mut copy, _) = self.begin(false);
        self.copy_step(&mut copy, false, 7);
        let first = self.groups[0].clone();
        commit(&mut self.source, &first, 2, "two");
        assert!(!copy.is_done(), "pages follow the change");
        copy
    }

    /// The source's process crashes and starts again over its store.
    fn restart_source(&mut self, bugs: ProtocolBugs) {
        let store = std::mem::take(&mut self.source.store);
        store.crash();
        self.source = replica_on(self.from, &self.placement, store, bugs);
    }

    /// Whether the target holds exactly what the source holds of the range.
    fn target_is_the_source(&self) -> bool {
        group_state_spans(&self.keys).iter().all(|span| {
            self.source.store.export_rows(span, usize::MAX).unwrap()
                == self.target.store.export_rows(span, usize::MAX).unwrap()
        })
    }
}

#[test]
fn a_final_copy_on_a_clean_base_copies_only_the_changed_groups_and_makes_the_target_the_source() {
    let mut m = Move::new(ProtocolBugs::NONE, ProtocolBugs::NONE);
    let [a, b, c, d] = <[EgId; 4]>::try_from(m.groups.clone()).unwrap();
    for eg in [&a, &b, &c] {
        commit(&mut m.source, eg, 1, "one");
    }
    assert_eq!(m.copy(false, 7), None, "a bulk copy is of the whole range");
    assert_eq!(
        m.target.replica.copy_base(m.range, m.move_id),
        Some(ChangeToken(7))
    );
    // After the bulk copy: a write to one group, and a group created.
    commit(&mut m.source, &b, 2, "two");
    commit(&mut m.source, &d, 1, "one");
    assert!(!m.target_is_the_source());
    // Before the freeze, the source refuses the final copy.
    assert_eq!(
        m.source
            .replica
            .changed_groups(m.range, m.move_id, ChangeToken(7)),
        Err(FinalCopyRefused::NotFrozen)
    );
    m.freeze();
    assert_eq!(
        m.copy(true, 8),
        Some(vec![b.clone(), d.clone()]),
        "only what changed since the bulk copy began"
    );
    assert!(m.target_is_the_source());
}

#[test]
fn a_source_that_restarted_since_the_bulk_copy_tracks_nothing_and_the_final_copy_is_whole() {
    let mut m = Move::new(ProtocolBugs::NONE, ProtocolBugs::NONE);
    for eg in m.groups.clone() {
        commit(&mut m.source, &eg, 1, "one");
    }
    m.copy(false, 7);
    let b = m.groups[1].clone();
    commit(&mut m.source, &b, 2, "two");
    m.restart_source(ProtocolBugs::NONE);
    m.freeze();
    assert_eq!(
        m.source
            .replica
            .changed_groups(m.range, m.move_id, ChangeToken(7)),
        Ok(None),
        "a new process tracks nothing"
    );
    assert_eq!(
        m.copy(true, 8),
        None,
        "the final copy is of the whole range"
    );
    assert!(m.target_is_the_source());
}

/// A bulk copy during which the source restarts: its first pages came under the first
/// process's token, the rest under the second's, and a group copied early changed in
/// between. Whether the final copy leaves the target exactly the source.
fn restart_during_the_bulk_copy(target_bugs: ProtocolBugs) -> bool {
    let mut m = Move::new(ProtocolBugs::NONE, target_bugs);
    let mut copy = m.first_page_then_a_change();
    m.restart_source(ProtocolBugs::NONE);
    while !copy.is_done() {
        m.copy_step(&mut copy, false, 8);
    }
    m.freeze();
    let changed = m.copy(true, 9);
    if target_bugs == ProtocolBugs::NONE {
        assert_eq!(changed, None, "pages under two tokens are no base");
    }
    m.target_is_the_source()
}

#[test]
fn a_bulk_copy_across_a_source_restart_is_no_base_and_the_knob_that_takes_it_loses_a_write() {
    assert!(restart_during_the_bulk_copy(ProtocolBugs::NONE));
    let knob = ProtocolBugs {
        delta_on_any_base: true,
        ..ProtocolBugs::NONE
    };
    assert!(
        !restart_during_the_bulk_copy(knob),
        "--bug delta-on-any-base: the target should lack the write made before the second token"
    );
}

/// A group copied by the bulk copy's first page changes before its last page. Whether
/// the short final copy leaves the target exactly the source.
fn change_during_the_bulk_copy(source_bugs: ProtocolBugs) -> bool {
    let mut m = Move::new(source_bugs, ProtocolBugs::NONE);
    let mut copy = m.first_page_then_a_change();
    while !copy.is_done() {
        m.copy_step(&mut copy, false, 7);
    }
    m.freeze();
    let changed = m.copy(true, 9);
    assert!(changed.is_some(), "a short final copy");
    m.target_is_the_source()
}

#[test]
fn a_change_between_bulk_pages_is_in_the_final_copy_and_the_knob_that_tracks_per_page_loses_it() {
    assert!(change_during_the_bulk_copy(ProtocolBugs::NONE));
    let knob = ProtocolBugs {
        track_changes_per_page: true,
        ..ProtocolBugs::NONE
    };
    assert!(
        !change_during_the_bulk_copy(knob),
        "--bug track-changes-per-page: the target should lack the change"
    );
}
