//! Deliberate protocol mistakes, for the simulator to prove its checkers catch them.

megastore_types::bug_knobs! {
    /// The protocol mistakes the simulator can re-introduce (`megastore-sim --bug NAME`).
    /// All off in every real deployment; each names the rule it breaks.
    ///
    /// Compiled in only with the `sim-bugs` feature (the simulator and the core's tests);
    /// without it every knob is a constant `false` and the struct is empty.
    pub struct ProtocolBugs {
        /// Writers skip write step 5 (invalidating coordinators of full replicas that
        /// did not accept).
        skip_invalidate,
        /// The position leader grants ballot 0 to every writer, not just the first.
        grant_ballot0_twice,
        /// Readers read the local replica's position at the same time as querying the
        /// coordinator, instead of after it vouched.
        read_position_before_vouch,
        /// Step 5 invalidates only replicas that answered without the value, not every
        /// full replica not known to hold it.
        invalidate_only_seen_lacking,
        /// A placed writer counts a coordinator that cannot vouch (its lock lapsed, or
        /// it does not serve the group) as invalidated without reading the placement
        /// again: when the slot moved to another server meanwhile, that server's
        /// coordinator was never told.
        trust_unconfirmed_lapse,
        /// Readers read locally without asking the coordinator.
        read_local_unvouched,
        /// Writers acknowledge as soon as the value is chosen, before step 5.
        ack_before_invalidate,
        /// Catch-up takes a value accepted by one replica as chosen.
        learn_from_single_accept,
        /// A proposer whose placement drops a voter while its round is under way still
        /// counts the answers that voter gave (or gives) toward a majority of the new,
        /// smaller set: a count over neither set.
        count_votes_of_removed,
        /// The position leader is taken from an entry that was never chosen: a replica
        /// grants ballot 0 when its entry at the previous position names it, visible or not,
        /// and a writer that lost a position rebases through the leader its own (losing)
        /// entry named.
        leader_from_unchosen_entry,
        /// A placed replica keeps in memory the groups of ranges it stops serving (moved
        /// away or frozen): when a range comes back to it, the copy of its newer state
        /// is shadowed by the old one in memory, promises included.
        keep_unserved_groups,
        /// A placed replica that starts serving a range (a move to it finished, or one
        /// away was aborted) loads none of its groups until a request names one: a
        /// received group with work left (an accepted position not yet visible) waits
        /// for a client instead of being swept.
        ignore_arrivals,
        /// A voter catch-up pass counts every group of the range held without asking
        /// anyone: the range's next voter change is then recorded as safe while a
        /// position chosen with a removed voter's vote may be held by too few of the
        /// voters left.
        skip_voter_catch_up,
        /// A restarted replica forgets its promises.
        forget_promise_on_restart,
        /// A replica with a bounded group cache evicts a group this step changed and
        /// drops the group's writes of the step with it (root row and applies), as a
        /// write-back cache that loses a dirty entry would: what it promised or
        /// accepted is forgotten.
        evict_dirty_group,
        /// A replica with a bounded group cache never lists a group in its open index:
        /// after a crash it does not load the groups with work left, and nothing
        /// finishes their work until someone asks for them.
        skip_open_index,
        /// A replica applies a visible position even if an earlier one is not applied.
        apply_out_of_order,
        /// Readers validate the local coordinator after catching up another replica.
        validate_after_remote_catchup,
        /// A writer that lost contact reports its transaction not committed without
        /// settling the position it may hold (so its retry may be applied as well).
        resolve_without_settling,
        /// A replica that lost its store votes at once, as if it had never voted.
        rejoin_as_voter,
        /// A resolution of a truncated position takes any transaction a replica remembers
        /// chosen there for its own (it forgets to compare the ids).
        resolve_any_remembered_txn,
        /// Garbage collection drops old versions but reads below its watermark are still
        /// served (from what is left).
        collect_without_floor,
        /// A transaction's later reads (at its position) ask for the replica's applied
        /// position instead, so one transaction sees more than one state (issue 11's
        /// second defect).
        read_at_position_reads_applied,
        /// An acceptor's accept persists the accepted value but not the promise it raised
        /// to the accepted ballot: after a restart it can accept a lower ballot than one it
        /// answered before the crash.
        accept_persists_no_promise,
        /// The driver loop releases a batch's messages without syncing the store first:
        /// replies leave on buffered state a crash loses.
        reply_before_sync,
        /// An apply copies a group's global index mirror writes to the global index
        /// but drops its deletes: entries removed from the mirror stay in the index.
        global_copies_skip_deletes,
        /// A snapshot install writes the group's data and mirror but copies none of
        /// the mirror to the global index.
        install_without_global,
        /// A verified global index scan keeps every hit its scan found: it reads each
        /// hit's group but never compares the hit with the mirror there.
        verify_trusts_the_scan,
        /// A global index scan asks only the first server of a replica's slot, not
        /// every server holding the slot in some range: the entries of the groups of
        /// ranges moved to its other servers are missed.
        scan_first_server_only,
        /// A delivery ignores the receiver's mark of what it delivered from the sender:
        /// a retry, or two deliverers racing, deliver a message again.
        deliver_without_dedup,
        /// Consuming queue messages deletes their inbox rows without declaring them
        /// read: two consumers of one message both commit.
        consume_outside_txn,
        /// A delivery takes its batch in outbox-row order (by transaction), not in the
        /// order the sender's log chose the messages: a later message delivered first
        /// moves the mark past an earlier one, which then passes for delivered.
        batch_in_row_order,
        /// A two-phase commit records its decision as soon as it sends the prepares,
        /// without waiting for every participant to be prepared: a participant that
        /// then refuses to prepare never gets the writes the decision committed.
        decide_before_all_prepared,
        /// Whoever meets a prepared transaction with no decision after the timeout
        /// aborts it in the participant without recording abort in the coordinator
        /// group first: a late commit decision then contradicts the participant.
        abort_without_recording,
        /// Commits ignore the locks of prepared transactions (at their read position and
        /// in the entries they rebase over): a transaction writes rows a prepared one
        /// read or writes, which its commit then overwrites or contradicts.
        ignore_prepared_on_commit,
        /// Recording abort does not read the decision row (a blind write): a commit
        /// decision and an abort both land, and the decision changes.
        record_abort_blind,
        /// A lookup of a decision trusts a decision row read absent without re-reading
        /// a record of the transaction present: after the decision was collected, a
        /// finished transaction is aborted afresh (or a reader takes it as undecided).
        trust_absent_decision,
        /// A collection deletes old decision rows without checking that every
        /// participant's record is gone: a participant still prepared then finds no
        /// decision and aborts a committed transaction.
        collect_unfinished,
        /// A collection reads the retention in the wrong unit (microseconds taken for
        /// milliseconds): no decision row is ever old enough, and every one stays for
        /// ever — nothing unsafe, but the coordinator groups grow without bound.
        retention_unit_slip,
        /// A collection pass forgets the rows it kept (too young, or a record still
        /// pending): the group is not looked at again until it records another
        /// decision, and the last decisions of a quiet group stay for ever.
        forget_kept_decisions,
        /// A current read that meets a prepared transaction whose writes it reads
        /// returns what it read without learning the decision: after a commit decision,
        /// a participant not yet finished is read without the transaction's writes.
        read_ignores_prepared,
        /// A settled read (a vouched current read's one request) is served at the
        /// replica's visible position even with positions above it in flight there: a
        /// write this replica accepted and whose writer acknowledged it before the read
        /// began — its visible mark still on the way — is missed.
        settled_read_ignores_in_flight,
        /// A vouched read's long poll at its replica waits only until the first of the
        /// positions it found in flight there is visible (and its answer serves the
        /// read whatever it says): a write further in flight, acknowledged by its
        /// writer before the read began, is missed.
        awaited_read_short,
        /// A proposer combining waiting transactions into one entry forgets to check
        /// each against the ones before it: a transaction that read a row an earlier
        /// one in the entry writes commits on a stale read.
        combine_conflicting,
        /// A blind write that takes the read of its client's commit in flight instead
        /// of reading the group takes its position but not the prepared transactions
        /// pending there, so their locks do not hold against it.
        blind_write_forgets_locks,
        /// A replica that applies the finish of one prepared transaction in a group
        /// takes the group as free of locks, though others are still prepared there:
        /// its reads at later positions return none of them, and a commit writes over
        /// a prepared transaction's rows.
        finish_frees_every_lock,
        /// A read lent to blind writes is carried over the known stretch without the
        /// transactions the stretch prepared: their locks do not hold against a blind
        /// write on it.
        carry_skips_prepares,
        /// A commit takes a transaction past the end of its commit span (a lane
        /// starts it, or a lost position rebases it, beyond `first + COMMIT_SPAN`), so
        /// a resolution that settles its span finds it in none and calls it not
        /// committed, and then it commits.
        commit_past_span,
        /// A relay commits every copy of a relayed transaction it is sent (a
        /// duplicated request): neither its lane nor its commits look for the
        /// transaction already waiting, in flight or chosen, so it can apply twice.
        relay_commits_duplicates,
        /// A writer whose relay did not answer resolves its transaction at its first
        /// position only, though the relay may have committed it at any position of
        /// its commit span.
        relay_resolves_first_only,
        /// A move's source begins its tracking of the range's changes anew at each
        /// page of the bulk copy it exports (same token), so a group changed after its
        /// page but before the last page is missing from the final copy's changes.
        track_changes_per_page,
        /// A move's target counts a bulk copy as a base for a short final copy though
        /// pages under another token (an earlier process of the source) were applied
        /// since the copy began: what changed before that token began is not copied.
        delta_on_any_base,
        /// A replica whose log was truncated installs a snapshot tombstoning only the
        /// columns its log still names, not those its store holds: a cell deleted in
        /// the entries it missed survives the install.
        install_forgets_stored_columns,
    }
}
