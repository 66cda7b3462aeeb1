//! Deliberate protocol mistakes, for the simulator to prove its checkers catch them.

/// The protocol mistakes the simulator can re-introduce (`megastore-sim --bug NAME`).
/// All off in every real deployment; each names the rule it breaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProtocolBugs {
    /// Writers skip write step 5 (invalidating coordinators of full replicas that
    /// did not accept).
    pub skip_invalidate: bool,
    /// The position leader grants ballot 0 to every writer, not just the first.
    pub grant_ballot0_twice: bool,
    /// Readers read the local replica's position at the same time as querying the
    /// coordinator, instead of after it vouched.
    pub read_position_before_vouch: bool,
    /// Step 5 invalidates only replicas that answered without the value, not every
    /// full replica not known to hold it.
    pub invalidate_only_seen_lacking: bool,
    /// Readers read locally without asking the coordinator.
    pub read_local_unvouched: bool,
    /// Writers acknowledge as soon as the value is chosen, before step 5.
    pub ack_before_invalidate: bool,
    /// Catch-up takes a value accepted by one replica as chosen.
    pub learn_from_single_accept: bool,
    /// The position leader is taken from an entry that was never chosen: a replica
    /// grants ballot 0 when its entry at the previous position names it, visible or not,
    /// and a writer that lost a position rebases through the leader its own (losing)
    /// entry named.
    pub leader_from_unchosen_entry: bool,
    /// A restarted replica forgets its promises.
    pub forget_promise_on_restart: bool,
    /// A replica applies a visible position even if an earlier one is not applied.
    pub apply_out_of_order: bool,
    /// Readers validate the local coordinator after catching up another replica.
    pub validate_after_remote_catchup: bool,
    /// A writer that lost contact reports its transaction not committed without
    /// settling the position it may hold (so its retry may be applied as well).
    pub resolve_without_settling: bool,
    /// A replica that lost its store votes at once, as if it had never voted.
    pub rejoin_as_voter: bool,
    /// A resolution of a truncated position takes any transaction a replica remembers
    /// chosen there for its own (it forgets to compare the ids).
    pub resolve_any_remembered_txn: bool,
    /// Garbage collection drops old versions but reads below its watermark are still
    /// served (from what is left).
    pub collect_without_floor: bool,
    /// A transaction's later reads (at its position) ask for the replica's applied
    /// position instead, so one transaction sees more than one state (issue 11's
    /// second defect).
    pub read_at_position_reads_applied: bool,
    /// An acceptor's accept persists the accepted value but not the promise it raised
    /// to the accepted ballot: after a restart it can accept a lower ballot than one it
    /// answered before the crash.
    pub accept_persists_no_promise: bool,
    /// The driver loop releases a batch's messages without syncing the store first:
    /// replies leave on buffered state a crash loses.
    pub reply_before_sync: bool,
}
