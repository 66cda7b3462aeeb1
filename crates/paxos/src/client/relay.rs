//! Which commits a client relays (docs/protocol.md, "Relayed commits"): a group whose
//! commits this client lately lost a race for — another writer's entry took the
//! position, or the commit needed a prepare round — is *hot* for a while, and its
//! commits go to the client's local full replica, whose shared client commits them
//! in its lane with every other relayed one (combined, not duelling). A relay that
//! did not answer is left alone for a while: the next full replica relays instead
//! (farther, but one relay's entries never duel), and with none left, commits go
//! direct. Writers at two sites relay to two relays, which duel in turn, and the one
//! beside the position leader wins every grant: a relayed commit that lost its whole
//! span sends the group's commits to the leader's relay while the group stays hot.
//! A relay's own commits (a gateway's, for the public API's transactions) duel the
//! same way, and follow the same way: a commit of its lane that lost its whole span
//! sends its own commits of the group to the leader's relay while the group stays hot
//! ([`RelayRole::Relay`]). What was relayed to it, it always commits itself: a commit
//! is relayed at most once (*relayed-once*).
//!
//! A relayed commit is one operation of the writer's core ([`RelayOp`]): it sends
//! [`Message::Relay`] and waits for [`Message::RelayOutcome`] until a deadline. An
//! outcome the relay could not know (`Unknown` at a position) is resolved at that
//! position; no answer by the deadline passes the relay over and resolves the
//! transaction from its first position over its whole commit span, since the relay may
//! have proposed it at any of them, or may still. Only liveness depends on relaying:
//! a relayed commit is committed, judged and resolved exactly as the writer's own
//! would be, under the writer's transaction id.

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_types::{EgId, Position, ReplicaId, Time, TxnId};

use crate::entry::RowWrite;
use crate::messages::Message;
use crate::proposer::Ctx;
use crate::proposer::commit::{CommitResult, ReadSet, commit_span};
use crate::proposer::resolve::{Resolution, Resolve};

/// A commit a client hands its relay: everything [`super::ClientCore::commit`] takes.
/// The relay answers with the [`crate::CommitResult`] its
/// [`super::ClientCore::commit_relayed`] reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedCommit {
    /// The writer's transaction, under the writer's id.
    pub txn: TxnId,
    /// Its group.
    pub eg: EgId,
    /// The position of its current read.
    pub read_position: Position,
    /// The leader the entry at `read_position` named.
    pub leader: Option<ReplicaId>,
    /// Its writes.
    pub writes: Vec<RowWrite>,
    /// What it read.
    pub reads: ReadSet,
}

/// Which commits a client hands a relay (docs/protocol.md, "Relayed commits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayRole {
    /// It commits every transaction itself (the simulator's clients in a world
    /// without relaying).
    Direct,
    /// The client library's clients: a hot group's commits go to the local full
    /// replica's relay, or to the position leader's while relays duel.
    Writer,
    /// A replica's own shared client, the relay of its site's writers and the public
    /// API's gateway: it commits what is relayed to it, and its own commits, itself —
    /// except its own commits of a group whose commits in its lane lately lost their
    /// whole span to other entries (another relay's, beside the position leader): those
    /// go to the leader's relay while the group stays hot, as a writer's do.
    Relay,
}

/// How long a group stays hot after this client last lost a race for it or relayed a
/// commit of it: while it writes the group this often, it goes on relaying.
pub const RELAY_HOT_FOR: Duration = Duration::from_secs(5);
/// How long a relay that failed to answer is passed over, at first. Each time it fails
/// again when tried after that, it is passed over twice as long, up to
/// [`RELAY_DOWN_MAX`], until it answers: a relay that stays dead costs each of its
/// writers a relay wait and a span resolution per try, so tries must thin out.
pub const RELAY_DOWN_FOR: Duration = Duration::from_secs(2);
/// The longest a relay that keeps failing is passed over: a relay back from a crash
/// takes commits again within this.
pub const RELAY_DOWN_MAX: Duration = Duration::from_secs(32);
/// How long a relayed commit waits for its relay's answer before its writer resolves
/// it itself, for an RPC timeout of `rpc`: two, since the relay may wait in its lane,
/// then commit. (A transport carrying the relay's answer waits as long.)
pub fn relay_wait(rpc: Duration) -> Duration {
    rpc * 2
}

/// Hot groups one client remembers at most (the ones closest to cooling go first).
pub(crate) const HOT_GROUPS_MAX: usize = 1_024;

/// The hot groups, and which relays are taking commits.
#[derive(Debug, Default)]
pub(crate) struct Relaying {
    /// Per group, until when its commits are relayed.
    hot_until: BTreeMap<EgId, Time>,
    /// Per group, until when its commits go to the relay at its position leader rather
    /// than the local one: a relayed commit of it lost its whole span to other entries
    /// (another relay's, at another site, whose local leader grants it every position).
    follow_leader_until: BTreeMap<EgId, Time>,
    /// Relays that failed to answer since they last answered.
    down: BTreeMap<ReplicaId, Down>,
}

/// A relay that failed to answer, and has not answered since.
#[derive(Debug, Clone, Copy)]
struct Down {
    /// Passed over until then.
    until: Time,
    /// For how long it was last passed over.
    passed_over_for: Duration,
}

impl Relaying {
    /// This client lost a race for `eg`'s position, or relayed one of its commits:
    /// `eg` is hot until [`RELAY_HOT_FOR`] from now.
    pub(crate) fn hot(&mut self, now: Time, eg: &EgId) {
        remember_until(&mut self.hot_until, now, eg);
        // Following the leader goes on while the group stays hot.
        if let Some(until) = self.follow_leader_until.get_mut(eg)
            && *until > now
        {
            *until = now + RELAY_HOT_FOR;
        }
    }

    /// A commit of `eg` lost every position of its span to other entries (a writer's
    /// relayed commit, or a commit in a relay's own lane): two relays are duelling, and
    /// the one beside the position leader wins every grant. Until `eg` cools, its
    /// commits go to the relay at the leader their read names.
    pub(crate) fn lost_span(&mut self, now: Time, eg: &EgId) {
        remember_until(&mut self.follow_leader_until, now, eg);
    }

    /// `relay` did not answer a relayed commit: it is passed over for
    /// [`RELAY_DOWN_FOR`], or twice as long as last time (up to [`RELAY_DOWN_MAX`]) if
    /// it has not answered since. A failure while it is passed over is of a commit sent
    /// before: it changes nothing.
    pub(crate) fn failed(&mut self, now: Time, relay: ReplicaId) {
        let passed_over_for = match self.down.get(&relay) {
            Some(down) if down.until > now => return,
            Some(down) => (down.passed_over_for * 2).min(RELAY_DOWN_MAX),
            None => RELAY_DOWN_FOR,
        };
        self.down.insert(
            relay,
            Down {
                until: now + passed_over_for,
                passed_over_for,
            },
        );
    }

    /// `relay` answered a relayed commit: if it fails again, it is passed over for
    /// [`RELAY_DOWN_FOR`] only.
    pub(crate) fn answered(&mut self, relay: ReplicaId) {
        self.down.remove(&relay);
    }

    /// The relay for a commit to `eg` now, while `eg` is hot (`None`: commit it
    /// directly): the first of `relays` (in order of preference) not passed over — but
    /// first `leader`, if it is one of them, while `eg`'s commits follow the leader.
    pub(crate) fn relay(
        &self,
        now: Time,
        eg: &EgId,
        leader: Option<ReplicaId>,
        relays: impl IntoIterator<Item = ReplicaId>,
    ) -> Option<ReplicaId> {
        if !live(now, self.hot_until.get(eg)) {
            return None;
        }
        let relays: Vec<ReplicaId> = relays.into_iter().filter(|r| self.up(now, r)).collect();
        self.leader_to_follow(now, eg, leader, relays.iter().copied())
            .or_else(|| relays.first().copied())
    }

    /// `leader`, while `eg` is hot and its commits follow the leader, if it is one of
    /// `relays` and not passed over; otherwise `None`.
    pub(crate) fn leader_to_follow(
        &self,
        now: Time,
        eg: &EgId,
        leader: Option<ReplicaId>,
        relays: impl IntoIterator<Item = ReplicaId>,
    ) -> Option<ReplicaId> {
        let follow =
            live(now, self.hot_until.get(eg)) && live(now, self.follow_leader_until.get(eg));
        let leader = leader.filter(|l| follow && self.up(now, l))?;
        relays.into_iter().any(|r| r == leader).then_some(leader)
    }

    /// Whether `relay` is not passed over now.
    fn up(&self, now: Time, relay: &ReplicaId) -> bool {
        !live(now, self.down.get(relay).map(|down| &down.until))
    }
}

/// Whether a deadline `until` is set and not reached at `now`.
fn live(now: Time, until: Option<&Time>) -> bool {
    until.is_some_and(|until| *until > now)
}

/// Remembers `eg` in `until` for [`RELAY_HOT_FOR`] from `now`, at most
/// [`HOT_GROUPS_MAX`] groups (the expired, then the closest to expiring, go first).
fn remember_until(until: &mut BTreeMap<EgId, Time>, now: Time, eg: &EgId) {
    if !until.contains_key(eg) && until.len() >= HOT_GROUPS_MAX {
        until.retain(|_, t| *t > now);
        if until.len() >= HOT_GROUPS_MAX
            && let Some(coolest) = until
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(eg, _)| eg.clone())
        {
            until.remove(&coolest);
        }
    }
    until.insert(eg.clone(), now + RELAY_HOT_FOR);
    debug_assert!(until.len() <= HOT_GROUPS_MAX);
}

/// A commit of this client relayed to a replica, until its outcome is known.
#[derive(Debug)]
pub(crate) struct RelayOp {
    relay: ReplicaId,
    eg: EgId,
    txn: TxnId,
    first: Position,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// Sent; waiting for the relay's answer until then.
    Sent { deadline: Time },
    /// Resolving it: at the position the relay could not settle, or (`span`) from
    /// `first` over its commit span, the relay having not answered.
    Resolving {
        resolve: Box<Resolve>,
        span: bool,
        position: Position,
    },
    /// The relay's answer.
    Answered(CommitResult),
}

impl RelayOp {
    /// Sends `commit` to `relay` as request `id`, to be answered by `deadline`.
    pub(crate) fn start(
        id: u64,
        relay: ReplicaId,
        commit: RelayedCommit,
        deadline: Time,
        sends: &mut Vec<(megastore_types::NodeId, Message)>,
    ) -> Self {
        let op = Self {
            relay,
            eg: commit.eg.clone(),
            txn: commit.txn,
            first: commit.read_position.next(),
            stage: Stage::Sent { deadline },
        };
        sends.push((
            megastore_types::NodeId::Replica(relay),
            Message::Relay {
                id,
                commit: Box::new(commit),
            },
        ));
        op
    }

    /// The relay it was sent to.
    pub(crate) fn relay(&self) -> ReplicaId {
        self.relay
    }

    /// Its group.
    pub(crate) fn group(&self) -> &EgId {
        &self.eg
    }

    /// Its transaction.
    pub(crate) fn txn(&self) -> TxnId {
        self.txn
    }

    /// Whether it still waits for the relay's answer.
    pub(crate) fn waiting(&self) -> bool {
        matches!(self.stage, Stage::Sent { .. })
    }

    /// The relay answered `result` (ignored unless it still waits): an unknown outcome
    /// is resolved at its position.
    pub(crate) fn answered<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>, result: CommitResult) {
        if !self.waiting() {
            return;
        }
        self.stage = match result {
            CommitResult::Unknown { position } => Stage::Resolving {
                resolve: Box::new(Resolve::start(
                    ctx,
                    self.eg.clone(),
                    position..=position,
                    self.txn,
                )),
                span: false,
                position,
            },
            other => Stage::Answered(other),
        };
    }

    /// Time passed: past its deadline without an answer, it resolves the transaction
    /// over its commit span (true: the relay failed to answer).
    pub(crate) fn on_tick<K: Clone + Ord>(&mut self, ctx: &mut Ctx<'_, K>) -> bool {
        match &mut self.stage {
            Stage::Sent { deadline } if *deadline <= ctx.now => {
                let positions = if ctx.config.bugs.relay_resolves_first_only() {
                    self.first..=self.first
                } else {
                    commit_span(self.first)
                };
                self.stage = Stage::Resolving {
                    resolve: Box::new(Resolve::start(ctx, self.eg.clone(), positions, self.txn)),
                    span: true,
                    position: self.first,
                };
                true
            }
            Stage::Resolving { resolve, .. } => {
                resolve.on_tick(ctx);
                false
            }
            _ => false,
        }
    }

    /// Its resolution, while it resolves.
    pub(crate) fn resolving(&mut self) -> Option<&mut Resolve> {
        match &mut self.stage {
            Stage::Resolving { resolve, .. } => Some(resolve),
            _ => None,
        }
    }

    /// When it next needs a tick.
    pub(crate) fn deadline(&self) -> Option<Time> {
        match &self.stage {
            Stage::Sent { deadline } => Some(*deadline),
            Stage::Resolving { resolve, .. } => resolve.deadline(),
            Stage::Answered(_) => None,
        }
    }

    /// Its outcome, once known: the relay's answer, or what resolving found (a
    /// transaction settled without it did not commit: `Aborted`).
    pub(crate) fn result(&self) -> Option<(TxnId, CommitResult)> {
        let result = match &self.stage {
            Stage::Sent { .. } => return None,
            Stage::Answered(result) => result.clone(),
            Stage::Resolving {
                resolve,
                span,
                position,
            } => match resolve.result()? {
                Resolution::Committed(at) => CommitResult::Committed {
                    position: at,
                    fast: false,
                },
                Resolution::NotCommitted => CommitResult::Aborted,
                Resolution::Undecided if *span => CommitResult::UnknownInSpan { first: self.first },
                Resolution::Undecided => CommitResult::Unknown {
                    position: *position,
                },
            },
        };
        Some((self.txn, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{DataQuery, ReadAt, ReplicaRequest};
    use crate::proposer::read::ReadMode;
    use crate::{ClientConfig, ClientCore, ClientOutput, ProposerConfig, ProtocolBugs, Timeouts};
    use megastore_types::{
        ClientId, LockNodeId, NodeId, ProposerId, ReplicaInfo, ReplicaKind, SiteId, Topology,
    };

    fn eg(n: usize) -> EgId {
        EgId(format!("g{n}").into_bytes())
    }

    const RELAYS: [ReplicaId; 2] = [ReplicaId(1), ReplicaId(2)];

    #[test]
    fn a_group_is_relayed_while_hot_and_a_relay_that_failed_is_passed_over() {
        let mut relaying = Relaying::default();
        let t0 = Time::from_nanos(1_000);
        assert_eq!(
            relaying.relay(t0, &eg(1), None, RELAYS),
            None,
            "cold at first"
        );
        relaying.hot(t0, &eg(1));
        assert_eq!(relaying.relay(t0, &eg(1), None, RELAYS), Some(RELAYS[0]));
        assert_eq!(
            relaying.relay(t0, &eg(2), None, RELAYS),
            None,
            "only the hot group"
        );
        assert_eq!(
            relaying.relay(t0 + RELAY_HOT_FOR, &eg(1), None, RELAYS),
            None,
            "it cools"
        );
        relaying.failed(t0, RELAYS[0]);
        assert_eq!(
            relaying.relay(t0, &eg(1), None, RELAYS),
            Some(RELAYS[1]),
            "the next one"
        );
        relaying.failed(t0, RELAYS[1]);
        assert_eq!(
            relaying.relay(t0, &eg(1), None, RELAYS),
            None,
            "none left: direct"
        );
        let later = t0 + RELAY_DOWN_FOR;
        assert_eq!(
            relaying.relay(later, &eg(1), None, RELAYS),
            Some(RELAYS[0]),
            "back"
        );
    }

    #[test]
    fn a_relay_that_stays_dead_is_passed_over_twice_as_long_each_time_until_it_answers() {
        let mut relaying = Relaying::default();
        let mut now = Time::from_nanos(1_000);
        relaying.hot(now, &eg(1));
        let mut expected = RELAY_DOWN_FOR;
        for _ in 0..8 {
            relaying.failed(now, RELAYS[0]);
            // A commit sent before the failure that fails too changes nothing.
            relaying.failed(now + Duration::from_millis(1), RELAYS[0]);
            let just_before = now + expected - Duration::from_millis(1);
            relaying.hot(just_before, &eg(1));
            assert_eq!(
                relaying.relay(just_before, &eg(1), None, RELAYS),
                Some(RELAYS[1]),
                "passed over for {expected:?}"
            );
            now = now + expected;
            relaying.hot(now, &eg(1));
            assert_eq!(relaying.relay(now, &eg(1), None, RELAYS), Some(RELAYS[0]));
            expected = (expected * 2).min(RELAY_DOWN_MAX);
        }
        assert_eq!(expected, RELAY_DOWN_MAX, "it reached the cap");
        relaying.answered(RELAYS[0]);
        relaying.failed(now, RELAYS[0]);
        let after_first_wait = now + RELAY_DOWN_FOR;
        relaying.hot(after_first_wait, &eg(1));
        assert_eq!(
            relaying.relay(after_first_wait, &eg(1), None, RELAYS),
            Some(RELAYS[0]),
            "an answer resets it"
        );
    }

    #[test]
    fn a_group_whose_relayed_commit_lost_its_span_follows_the_leader_while_hot() {
        let mut relaying = Relaying::default();
        let t0 = Time::from_nanos(1_000);
        let leader = Some(RELAYS[1]);
        relaying.hot(t0, &eg(1));
        assert_eq!(
            relaying.relay(t0, &eg(1), leader, RELAYS),
            Some(RELAYS[0]),
            "the local relay first"
        );
        relaying.lost_span(t0, &eg(1));
        assert_eq!(relaying.relay(t0, &eg(1), leader, RELAYS), leader);
        assert_eq!(
            relaying.relay(t0, &eg(1), Some(ReplicaId(9)), RELAYS),
            Some(RELAYS[0]),
            "a leader that is no relay is not followed"
        );
        assert_eq!(
            relaying.relay(t0, &eg(1), None, RELAYS),
            Some(RELAYS[0]),
            "no leader named"
        );
        // Each answer keeps it hot, and following.
        let later = t0 + RELAY_HOT_FOR - Duration::from_millis(1);
        relaying.hot(later, &eg(1));
        let much_later = later + RELAY_HOT_FOR - Duration::from_millis(1);
        assert_eq!(relaying.relay(much_later, &eg(1), leader, RELAYS), leader);
        relaying.failed(much_later, RELAYS[1]);
        assert_eq!(
            relaying.relay(much_later, &eg(1), leader, RELAYS),
            Some(RELAYS[0]),
            "a leader's relay that failed is passed over"
        );
        // Cooled, then hot again: local first.
        let cooled = much_later + RELAY_HOT_FOR;
        relaying.hot(cooled, &eg(1));
        assert_eq!(
            relaying.relay(cooled, &eg(1), leader, RELAYS),
            Some(RELAYS[0])
        );
    }

    #[test]
    fn it_remembers_a_bounded_number_of_hot_groups() {
        let mut relaying = Relaying::default();
        let t0 = Time::from_nanos(1_000);
        for n in 0..HOT_GROUPS_MAX + 10 {
            relaying.hot(t0 + Duration::from_millis(n as u64), &eg(n));
        }
        assert_eq!(relaying.hot_until.len(), HOT_GROUPS_MAX);
        let now = t0 + Duration::from_millis((HOT_GROUPS_MAX + 10) as u64);
        assert_eq!(
            relaying.relay(now, &eg(0), None, RELAYS),
            None,
            "the coolest went first"
        );
        assert!(
            relaying
                .relay(now, &eg(HOT_GROUPS_MAX + 9), None, RELAYS)
                .is_some()
        );
    }

    /// A client at site 1 of full replicas 1 and 2 and witness 3 (one per site).
    fn relaying_client() -> ClientCore {
        let r = |id: u16, kind| ReplicaInfo {
            id: ReplicaId(id),
            kind,
            site: SiteId(id),
        };
        let topology = Topology::new(vec![
            r(1, ReplicaKind::Full),
            r(2, ReplicaKind::Full),
            r(3, ReplicaKind::Witness),
        ])
        .unwrap();
        let ms = Duration::from_millis;
        ClientCore::new(ClientConfig {
            id: ClientId(1),
            site: SiteId(1),
            proposer: ProposerConfig {
                topology,
                proposer: ProposerId::client(ClientId(1)),
                lock_nodes: vec![LockNodeId(0)],
                timeouts: Timeouts::from_rpc_and_lease(ms(100), ms(1000)),
                bugs: ProtocolBugs::NONE,
            },
            seed: 7,
            delivery_batch: crate::queue::DELIVERY_BATCH,
            wall_clock_offset_ms: 0,
            relay_role: RelayRole::Writer,
        })
    }

    /// The replicas `outputs` ask for data, and at what.
    fn data_reads(outputs: &[ClientOutput]) -> Vec<(ReplicaId, ReadAt)> {
        outputs
            .iter()
            .filter_map(|o| match o {
                ClientOutput::Send {
                    to: NodeId::Replica(r),
                    message: Message::ReplicaRequest(ReplicaRequest::Read { at, .. }),
                } => Some((*r, *at)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_blind_basis_is_lent_by_the_commit_in_flight_and_read_without_one() {
        let mut core = relaying_client();
        let t0 = Time::from_nanos(1_000);
        let none = || DataQuery::Rows(Vec::new());
        assert!(
            matches!(
                core.blind_basis(t0, eg(1), none()),
                crate::BasisStep::Reading {
                    mode: ReadMode::Snapshot,
                    ..
                }
            ),
            "nothing in flight: read"
        );
        // This client's commit that read at position 4 is in flight.
        let writes = vec![crate::RowWrite {
            row: b"g1\x01a".to_vec(),
            cells: vec![crate::CellWrite::Set {
                column: b"v".to_vec(),
                value: b"x".to_vec(),
            }],
        }];
        let txn = TxnId {
            client: ClientId(1),
            seq: 1,
        };
        let (_, out) = core.commit(
            t0,
            txn,
            eg(1),
            Position(4),
            Some(ReplicaId(1)),
            writes,
            crate::ReadSet::default(),
        );
        assert!(!out.is_empty(), "the commit starts at once");
        match core.blind_basis(t0, eg(1), none()) {
            crate::BasisStep::Lent(basis) => assert_eq!(
                (basis.read_position, basis.leader, basis.prepared.len()),
                (Position(4), Some(ReplicaId(1)), 0),
                "the in-flight commit's read"
            ),
            other => panic!("a commit is in flight, yet the basis is read: {other:?}"),
        }
        assert!(
            matches!(
                core.blind_basis(t0, eg(2), none()),
                crate::BasisStep::Reading { .. }
            ),
            "another group has nothing in flight"
        );
    }

    #[test]
    fn a_blind_writes_basis_is_a_snapshot_of_the_local_replica_or_of_the_relay_while_hot() {
        let mut core = relaying_client();
        let t0 = Time::from_nanos(1_000);
        let none = || DataQuery::Rows(Vec::new());
        let (_, mode, out) = core.read_basis(t0, eg(1), none());
        assert_eq!(mode, ReadMode::Snapshot, "cold: a snapshot");
        assert_eq!(
            data_reads(&out),
            vec![(ReplicaId(1), ReadAt::Applied)],
            "of the local full replica, with no coordinator asked: {out:?}"
        );
        assert_eq!(
            out.iter()
                .filter(|o| matches!(o, ClientOutput::Send { .. }))
                .count(),
            1
        );
        core.relaying.hot(t0, &eg(1));
        let (_, mode, out) = core.read_basis(t0, eg(1), none());
        assert_eq!(
            mode,
            ReadMode::Snapshot,
            "hot: never waits for the relay's entry"
        );
        assert_eq!(data_reads(&out), vec![(ReplicaId(1), ReadAt::Applied)]);
        core.relaying.failed(t0, ReplicaId(1));
        let (_, _, out) = core.read_basis(t0, eg(1), none());
        assert_eq!(
            data_reads(&out),
            vec![(ReplicaId(2), ReadAt::Applied)],
            "the relay that takes its commits now is asked first"
        );
        let (_, mode, out) = core.read_basis(t0 + RELAY_HOT_FOR, eg(1), none());
        assert_eq!(mode, ReadMode::Snapshot, "cooled");
        assert_eq!(
            data_reads(&out),
            vec![(ReplicaId(1), ReadAt::Applied)],
            "the local replica again (a read that finds it down asks the next)"
        );
    }
}
