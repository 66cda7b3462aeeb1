//! Watchers' long polls ([`crate::ReplicaRequest::AwaitVisible`]): requests held until
//! their group's visible position passes what the watcher knows, or until their wait
//! ends, then answered with the group's log state.
//!
//! Nothing here changes the group: a held request is answered from the same state a
//! `LogState` request would see, only later. Answers leave in the driver's batch, after
//! its sync like every other message, so a watcher never hears of a visible position
//! before its mark is durable.
//!
//! Invariant (*awaiting-bounded*): at most [`AWAITING_MAX`] requests are held; past
//! that, a request is answered at once (the watcher polls instead).

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_types::{EgId, NodeId, Position, Time};

/// The longest a replica holds a watcher's request.
pub const AWAIT_MAX: Duration = Duration::from_secs(10);

/// The most requests a replica holds at once.
pub const AWAITING_MAX: usize = 4_096;

/// One held request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Awaiter {
    pub(crate) from: NodeId,
    pub(crate) id: u64,
    pub(crate) past: Position,
    pub(crate) until: Time,
}

/// The held requests, by group.
#[derive(Debug, Default)]
pub(crate) struct Awaiting {
    by_group: BTreeMap<EgId, Vec<Awaiter>>,
    held: usize,
}

impl Awaiting {
    /// Holds `awaiter` for `eg`, unless [`AWAITING_MAX`] are held already (then it is
    /// handed back, to be answered at once).
    pub(crate) fn hold(&mut self, eg: EgId, awaiter: Awaiter) -> Result<(), Awaiter> {
        if self.held >= AWAITING_MAX {
            return Err(awaiter);
        }
        self.held += 1;
        self.by_group.entry(eg).or_default().push(awaiter);
        Ok(())
    }

    /// Takes out every request held for `eg` (its group leaves: they are answered at
    /// once).
    pub(crate) fn release(&mut self, eg: &EgId) -> Vec<Awaiter> {
        let released = self.by_group.remove(eg).unwrap_or_default();
        self.held -= released.len();
        released
    }

    /// Takes out every held request that may be answered now: its group's visible
    /// position (`visible`, `None` for a group no longer loaded) is past what it knows,
    /// or its wait is over at `now`.
    /// Whether a long poll on `eg` is held.
    pub(crate) fn holds(&self, eg: &EgId) -> bool {
        self.by_group.contains_key(eg)
    }

    pub(crate) fn due(
        &mut self,
        now: Time,
        visible: impl Fn(&EgId) -> Option<Position>,
    ) -> Vec<(EgId, Awaiter)> {
        if self.held == 0 {
            return Vec::new();
        }
        let mut due = Vec::new();
        self.by_group.retain(|eg, awaiters| {
            let visible = visible(eg);
            awaiters.retain(|a| {
                let answer = visible.is_none_or(|v| v > a.past) || a.until <= now;
                if answer {
                    due.push((eg.clone(), a.clone()));
                }
                !answer
            });
            !awaiters.is_empty()
        });
        self.held -= due.len();
        assert!(
            self.held <= AWAITING_MAX,
            "awaiting-bounded: {} requests held",
            self.held
        );
        due
    }

    /// When the first held request's wait ends.
    pub(crate) fn next_deadline(&self) -> Option<Time> {
        self.by_group.values().flatten().map(|a| a.until).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use megastore_types::ClientId;

    fn awaiter(id: u64, past: u64, until: u64) -> Awaiter {
        Awaiter {
            from: NodeId::Client(ClientId(1)),
            id,
            past: Position(past),
            until: Time(until),
        }
    }

    #[test]
    fn a_request_is_due_once_visible_passes_it_or_its_wait_ends() {
        let eg = EgId(b"g".to_vec());
        let mut awaiting = Awaiting::default();
        awaiting.hold(eg.clone(), awaiter(1, 5, 100)).unwrap();
        awaiting.hold(eg.clone(), awaiter(2, 7, 200)).unwrap();
        assert_eq!(awaiting.next_deadline(), Some(Time(100)));
        assert!(awaiting.due(Time(10), |_| Some(Position(5))).is_empty());
        let due = awaiting.due(Time(10), |_| Some(Position(6)));
        assert_eq!(due, vec![(eg.clone(), awaiter(1, 5, 100))]);
        let due = awaiting.due(Time(200), |_| Some(Position(6)));
        assert_eq!(due, vec![(eg, awaiter(2, 7, 200))]);
        assert_eq!(awaiting.next_deadline(), None);
    }

    #[test]
    fn past_the_bound_requests_are_handed_back() {
        let mut awaiting = Awaiting::default();
        for id in 0..AWAITING_MAX as u64 {
            awaiting.hold(EgId(vec![1]), awaiter(id, 0, 9)).unwrap();
        }
        assert!(awaiting.hold(EgId(vec![1]), awaiter(9_999, 0, 9)).is_err());
        assert_eq!(
            awaiting.due(Time(9), |_| Some(Position(0))).len(),
            AWAITING_MAX
        );
    }
}
