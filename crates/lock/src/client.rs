//! The client side of the lock service as a pure state machine: sends each request to
//! the node it believes leads, moves on to the next node when told "not leader" or on
//! a timeout, and gives up after trying every node a few times.

use std::collections::BTreeMap;
use std::time::Duration;

use megastore_types::{LockNodeId, Time};

use crate::core::{LockCommand, LockError, LockReply};
use crate::messages::{LockRequest, LockResponse};

/// Send `request` to lock node `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockSend {
    /// The node.
    pub to: LockNodeId,
    /// The request.
    pub request: LockRequest,
}

/// A request finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOutcome {
    /// The id [`LockClient::start`] returned.
    pub id: u64,
    /// The reply, or why there is none.
    pub result: Result<LockReply, LockError>,
}

#[derive(Debug, Clone)]
struct Pending {
    command: LockCommand,
    attempts: u32,
    deadline: Time,
}

/// Tries per node before a request fails as [`LockError::Unavailable`].
const ROUNDS_PER_NODE: u32 = 2;

/// Talks to the lock service's nodes.
#[derive(Debug, Clone)]
pub struct LockClient {
    nodes: Vec<LockNodeId>,
    leader_guess: usize,
    next_id: u64,
    attempt_timeout: Duration,
    pending: BTreeMap<u64, Pending>,
}

impl LockClient {
    /// A client of the service made of `nodes`, waiting `attempt_timeout` per try.
    pub fn new(nodes: Vec<LockNodeId>, attempt_timeout: Duration) -> Self {
        assert!(!nodes.is_empty(), "a lock service has at least one node");
        Self {
            nodes,
            leader_guess: 0,
            next_id: 1,
            attempt_timeout,
            pending: BTreeMap::new(),
        }
    }

    /// Numbers requests from `id` on. A process that restarts must not reuse the ids
    /// of its previous life — a reply still in flight would be taken for the answer to
    /// a new request — so each start passes a fresh random number.
    pub fn first_id(mut self, id: u64) -> Self {
        self.next_id = id;
        self
    }

    fn send(&self, id: u64, command: &LockCommand) -> LockSend {
        LockSend {
            to: self.nodes[self.leader_guess],
            request: LockRequest {
                id,
                command: command.clone(),
            },
        }
    }

    /// Starts a request; returns its id and the first message to send.
    pub fn start(&mut self, now: Time, command: LockCommand) -> (u64, LockSend) {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let send = self.send(id, &command);
        self.pending.insert(
            id,
            Pending {
                command,
                attempts: 1,
                deadline: now + self.attempt_timeout,
            },
        );
        (id, send)
    }

    /// Abandons a request (its response, if any, is ignored).
    pub fn cancel(&mut self, id: u64) {
        self.pending.remove(&id);
    }

    /// Handles a response: the request's outcome, or a retry at another node.
    pub fn on_response(
        &mut self,
        now: Time,
        from: LockNodeId,
        response: LockResponse,
    ) -> Result<LockOutcome, Option<LockSend>> {
        let Some(pending) = self.pending.get(&response.id) else {
            return Err(None);
        };
        match response.result {
            Err(LockError::NotLeader | LockError::Unavailable) => {
                if self.nodes[self.leader_guess] == from {
                    self.leader_guess = (self.leader_guess + 1) % self.nodes.len();
                }
                let command = pending.command.clone();
                Err(self.retry(now, response.id, &command))
            }
            result => {
                self.pending.remove(&response.id);
                if let Some(i) = self.nodes.iter().position(|n| *n == from) {
                    self.leader_guess = i;
                }
                Ok(LockOutcome {
                    id: response.id,
                    result,
                })
            }
        }
    }

    fn retry(&mut self, now: Time, id: u64, command: &LockCommand) -> Option<LockSend> {
        let budget = ROUNDS_PER_NODE * self.nodes.len() as u32;
        let pending = self.pending.get_mut(&id)?;
        if pending.attempts >= budget {
            return None;
        }
        pending.attempts += 1;
        pending.deadline = now + self.attempt_timeout;
        Some(self.send(id, command))
    }

    /// Handles the passage of time: retries of requests whose try timed out, and the
    /// outcomes of those out of tries.
    pub fn on_tick(&mut self, now: Time) -> (Vec<LockOutcome>, Vec<LockSend>) {
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        let (mut failed, mut sends) = (Vec::new(), Vec::new());
        for id in expired {
            self.leader_guess = (self.leader_guess + 1) % self.nodes.len();
            let command = self.pending[&id].command.clone();
            match self.retry(now, id, &command) {
                Some(send) => sends.push(send),
                None => {
                    self.pending.remove(&id);
                    failed.push(LockOutcome {
                        id,
                        result: Err(LockError::Unavailable),
                    });
                }
            }
        }
        // A request out of tries after "not leader" answers fails here, at its deadline.
        (failed, sends)
    }

    /// When [`LockClient::on_tick`] next has something to do.
    pub fn next_deadline(&self) -> Option<Time> {
        self.pending.values().map(|p| p.deadline).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_to_the_next_node_on_not_leader_and_on_timeout_then_gives_up() {
        let nodes = vec![LockNodeId(0), LockNodeId(1)];
        let mut c = LockClient::new(nodes, Duration::from_secs(1));
        let (id, first) = c.start(Time::ZERO, LockCommand::Holder { lock: "l".into() });
        assert_eq!(first.to, LockNodeId(0));
        let not_leader = LockResponse {
            id,
            result: Err(LockError::NotLeader),
        };
        let retry = c
            .on_response(Time::ZERO, LockNodeId(0), not_leader)
            .unwrap_err()
            .unwrap();
        assert_eq!(retry.to, LockNodeId(1));
        let (failed, sends) = c.on_tick(Time::ZERO + Duration::from_secs(1));
        assert!(failed.is_empty());
        assert_eq!(sends[0].to, LockNodeId(0));
        let (failed, sends) = c.on_tick(Time::ZERO + Duration::from_secs(2));
        assert_eq!(sends[0].to, LockNodeId(1));
        assert!(failed.is_empty());
        let (failed, sends) = c.on_tick(Time::ZERO + Duration::from_secs(3));
        assert!(sends.is_empty());
        assert_eq!(
            failed,
            vec![LockOutcome {
                id,
                result: Err(LockError::Unavailable)
            }]
        );
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn a_reply_completes_the_request_and_remembers_the_leader() {
        let mut c = LockClient::new(vec![LockNodeId(0), LockNodeId(1)], Duration::from_secs(1));
        let (id, _) = c.start(Time::ZERO, LockCommand::Holder { lock: "l".into() });
        let reply = LockResponse {
            id,
            result: Ok(LockReply::Holder(None)),
        };
        let outcome = c.on_response(Time::ZERO, LockNodeId(1), reply).unwrap();
        assert_eq!(outcome.result, Ok(LockReply::Holder(None)));
        let (_, next) = c.start(Time::ZERO, LockCommand::Holder { lock: "l".into() });
        assert_eq!(next.to, LockNodeId(1));
        // A late duplicate is ignored.
        let late = LockResponse {
            id,
            result: Ok(LockReply::Holder(None)),
        };
        assert_eq!(c.on_response(Time::ZERO, LockNodeId(0), late), Err(None));
    }
}
