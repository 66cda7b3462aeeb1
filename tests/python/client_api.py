"""Drives megastore's public gRPC API from Python, as any non-Rust client would.

Usage: client_api.py REPO_ROOT REPLICA_ADDRESS
Generates the stubs from proto/megastore/client/v1/client.proto with grpc_tools,
runs transactions, reads in every mode, the versioned primitives and malformed
requests against the replica, and prints one JSON object with what it saw.
"""

import json
import sys
import time

import grpc

from stubs import load_stubs


def main():
    repo_root, address = sys.argv[1], sys.argv[2]
    pb, rpc = load_stubs(repo_root)
    stub = rpc.MegastoreStub(grpc.insecure_channel(address))
    eg = b"py-group-0001"
    name_key = b"profile"
    counter_key = b"counter"
    seen = {}

    # 1. A transaction, retried while the cluster finishes starting.
    deadline = time.time() + 30
    while True:
        try:
            txn = stub.Begin(pb.BeginRequest(eg=eg)).txn
            before = stub.TxnRead(pb.TxnReadRequest(txn=txn, keys=[name_key])).rows
            stub.Write(pb.WriteRequest(txn=txn, rows=[pb.RowWrite(
                key=name_key, cells=[pb.CellWrite(column=b"name", set=b"Ada")])]))
            committed = stub.Commit(pb.CommitRequest(txn=txn))
            break
        except grpc.RpcError as e:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    seen["read_before_write"] = len(before)
    seen["commit"] = committed.WhichOneof("outcome")
    seen["position"] = committed.committed.position

    # 2. Reads in every mode (snapshot and inconsistent reads may lag a little).
    for mode_name, mode in [("current", pb.READ_MODE_CURRENT),
                            ("snapshot", pb.READ_MODE_SNAPSHOT),
                            ("inconsistent", pb.READ_MODE_INCONSISTENT)]:
        for _ in range(50):
            read = stub.Read(pb.ReadRequest(eg=eg, mode=mode, query=pb.RowQuery(
                keys=pb.RowQuery.Keys(keys=[name_key]))))
            values = [c.value for r in read.rows for c in r.cells if c.column == b"name"]
            if values == [b"Ada"]:
                break
            time.sleep(0.1)
        seen[f"read_{mode_name}"] = [v.decode() for v in values]
        seen[f"path_{mode_name}"] = read.path
    scan = stub.Read(pb.ReadRequest(eg=eg, mode=pb.READ_MODE_CURRENT, query=pb.RowQuery(
        range=pb.RowQuery.Range())))
    seen["scan_keys"] = [r.key.hex() for r in scan.rows]

    # 3. A conflict names the row both transactions read.
    first = stub.Begin(pb.BeginRequest(eg=eg)).txn
    second = stub.Begin(pb.BeginRequest(eg=eg)).txn
    for txn in (first, second):
        stub.TxnRead(pb.TxnReadRequest(txn=txn, keys=[counter_key]))
        stub.Write(pb.WriteRequest(txn=txn, rows=[pb.RowWrite(
            key=counter_key, cells=[pb.CellWrite(column=b"n", set=str(txn).encode())])]))
    seen["first_commit"] = stub.Commit(pb.CommitRequest(txn=first)).WhichOneof("outcome")
    lost = stub.Commit(pb.CommitRequest(txn=second))
    seen["second_commit"] = lost.WhichOneof("outcome")
    seen["conflict_keys"] = [k.hex() for k in lost.conflict.keys]

    # A scan inside a transaction sees the transaction's own writes.
    txn = stub.Begin(pb.BeginRequest(eg=eg)).txn
    before = stub.TxnScan(pb.TxnScanRequest(txn=txn, range=pb.RowQuery.Range())).rows
    stub.Write(pb.WriteRequest(txn=txn, rows=[pb.RowWrite(
        key=b"zz-new", cells=[pb.CellWrite(column=b"c", set=b"v")])]))
    after = stub.TxnScan(pb.TxnScanRequest(txn=txn, range=pb.RowQuery.Range())).rows
    stub.Abort(pb.AbortRequest(txn=txn))
    seen["txn_scan"] = [len(before), len(after), after[-1].key.decode(errors="replace")[-6:]]

    # 4. The versioned primitives.
    key = b"jobs/1"
    claim = pb.VersionedTxnRequest(eg=eg, asserts=[pb.Assert(key=key, absent=True)],
                                   mutations=[pb.Mutation(key=key, put=b"python")])
    first_claim = stub.VersionedTxn(claim)
    seen["claim"] = first_claim.WhichOneof("outcome")
    seen["claim_version"] = first_claim.applied.written[0].version
    seen["claim_again"] = stub.VersionedTxn(claim).WhichOneof("outcome")
    snap = stub.Snapshot(pb.SnapshotRequest(eg=eg, keys=[key, b"jobs/none"]))
    seen["snapshot"] = [[e.key.decode(), e.version, e.value.decode() if e.HasField("value") else None]
                        for e in snap.entries]
    seen["keys"] = [k.decode() for k in stub.Keys(pb.KeysRequest(eg=eg, prefix=b"jobs/")).keys]
    # A watch of the jobs from the group's first position: the claim, then a later put.
    watch = stub.Watch(pb.WatchRequest(eg=eg, key_prefix=b"jobs/", from_position=1), timeout=30)
    stub.VersionedTxn(pb.VersionedTxnRequest(eg=eg, mutations=[pb.Mutation(key=key, put=b"done")]))
    watched = []
    for message in watch:
        for change in message.changes:
            for e in change.entries:
                watched.append([message.position > 1, e.key.decode(), e.version,
                                e.value.decode()])
        if len(watched) == 2:
            watch.cancel()
            break
    seen["watch"] = watched

    # 5. Malformed requests: clear errors, naming the field.
    errors = {}
    def expect_error(name, call):
        try:
            call()
            errors[name] = "no error"
        except grpc.RpcError as e:
            errors[name] = [e.code().name, e.details()]
    expect_error("no_mode", lambda: stub.Read(pb.ReadRequest(eg=eg, query=pb.RowQuery(
        keys=pb.RowQuery.Keys(keys=[name_key])))))
    expect_error("no_eg", lambda: stub.Begin(pb.BeginRequest()))
    txn = stub.Begin(pb.BeginRequest(eg=eg)).txn
    expect_error("empty_key", lambda: stub.Write(pb.WriteRequest(txn=txn, rows=[pb.RowWrite(
        key=b"", cells=[pb.CellWrite(column=b"c", set=b"v")])])))
    expect_error("long_key", lambda: stub.Write(pb.WriteRequest(txn=txn, rows=[pb.RowWrite(
        key=b"k" * 10_001, cells=[pb.CellWrite(column=b"c", set=b"v")])])))
    expect_error("large_value", lambda: stub.Write(pb.WriteRequest(txn=txn, rows=[pb.RowWrite(
        key=b"big", cells=[pb.CellWrite(column=b"c", set=b"v" * 100_001)])])))
    stub.Abort(pb.AbortRequest(txn=txn))
    expect_error("unknown_txn", lambda: stub.Commit(pb.CommitRequest(txn=txn)))
    seen["errors"] = errors

    # 6. Typed entities of the applied schema (schema/photos.msdl).
    def v64(n):
        return pb.Value(int64=n)
    def field(value):
        return pb.FieldValue(single=value)
    root = pb.GroupRoot(table="User", key=[v64(5)])
    deadline = time.time() + 30
    while True:
        try:
            txn = stub.Begin(pb.BeginRequest(root=root)).txn
            stub.PutEntity(pb.PutEntityRequest(txn=txn, entity=pb.Entity(table="User", fields={
                "user_id": field(v64(5)), "name": field(pb.Value(string="grace"))})))
            for photo_id, when in [(1, 300), (2, 100)]:
                stub.PutEntity(pb.PutEntityRequest(txn=txn, entity=pb.Entity(table="Photo", fields={
                    "user_id": field(v64(5)), "photo_id": field(pb.Value(int32=photo_id)),
                    "time": field(v64(when)), "full_url": field(pb.Value(string=f"u/{photo_id}")),
                    "tag": pb.FieldValue(repeated=pb.Values(values=[pb.Value(string="sea")]))})))
            typed_commit = stub.Commit(pb.CommitRequest(txn=txn)).WhichOneof("outcome")
            break
        except grpc.RpcError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    seen["typed_commit"] = typed_commit
    txn = stub.Begin(pb.BeginRequest(root=root)).txn
    photos = stub.ScanTable(pb.ScanTableRequest(txn=txn, table="Photo", root_key=[v64(5)])).entities
    seen["typed_photos"] = [p.fields["photo_id"].single.int32 for p in photos]
    by_time = stub.ScanIndex(pb.ScanIndexRequest(txn=txn, index="PhotosByTime", leading=[v64(5)])).entries
    seen["typed_by_time"] = [e.primary_key[1].int32 for e in by_time]
    user = stub.GetEntity(pb.GetEntityRequest(txn=txn, table="User", key=[v64(5)]))
    seen["typed_user"] = user.entity.fields["name"].single.string if user.HasField("entity") else None
    missing = stub.GetEntity(pb.GetEntityRequest(txn=txn, table="Photo", key=[v64(5), pb.Value(int32=99)]))
    seen["typed_missing"] = missing.HasField("entity")
    # Two transactions on User 5's group race for one photo: the conflict names it by
    # table and key.
    racers = [stub.Begin(pb.BeginRequest(root=root)).txn for _ in range(2)]
    for i, racer in enumerate(racers):
        stub.GetEntity(pb.GetEntityRequest(txn=racer, table="Photo", key=[v64(5), pb.Value(int32=1)]))
        stub.PutEntity(pb.PutEntityRequest(txn=racer, entity=pb.Entity(table="Photo", fields={
            "user_id": field(v64(5)), "photo_id": field(pb.Value(int32=1)),
            "time": field(v64(300 + i)), "full_url": field(pb.Value(string="u/1"))})))
    stub.Commit(pb.CommitRequest(txn=racers[0]))
    lost = stub.Commit(pb.CommitRequest(txn=racers[1]))
    seen["typed_conflict"] = [
        [r.entity.table, [v.WhichOneof("kind") for v in r.entity.key]]
        for r in lost.conflict.rows if r.WhichOneof("row") == "entity"]
    # Entities outside transactions, in every mode, and the group of an entity.
    for mode_name, mode in [("current", pb.READ_MODE_CURRENT), ("snapshot", pb.READ_MODE_SNAPSHOT),
                            ("inconsistent", pb.READ_MODE_INCONSISTENT)]:
        for _ in range(50):
            got = stub.ReadEntity(pb.ReadEntityRequest(table="User", key=[v64(5)], mode=mode))
            if got.HasField("entity"):
                break
            time.sleep(0.1)
        seen[f"read_entity_{mode_name}"] = [got.entity.fields["name"].single.string, got.path]
    # The global index PhotosByTag, across groups: photo 2 is tagged "sea"; photo 1 was,
    # until the racer above rewrote it without tags — its entry is gone once this
    # replica has applied that commit.
    for _ in range(50):
        sea = stub.ScanGlobalIndex(pb.ScanGlobalIndexRequest(
            index="PhotosByTag", leading=[pb.Value(string="sea")])).entries
        if len(sea) == 1:
            break
        time.sleep(0.1)
    seen["global_sea"] = sorted([e.primary_key[0].int64, e.primary_key[1].int32] for e in sea)
    verified = stub.ScanGlobalIndex(pb.ScanGlobalIndexRequest(
        index="PhotosByTag", leading=[pb.Value(string="sea")], verify=True)).entries
    seen["global_sea_verified"] = sorted(
        [e.primary_key[0].int64, e.primary_key[1].int32] for e in verified)
    # The same scan streamed a page per message, a merge-join of the tag with itself,
    # and a parallel lookup of the hits.
    pages = list(stub.StreamGlobalIndex(pb.ScanGlobalIndexRequest(
        index="PhotosByTag", leading=[pb.Value(string="sea")], limit=1)))
    seen["global_sea_streamed"] = [
        [[e.primary_key[0].int64, e.primary_key[1].int32] for e in p.entries] for p in pages]
    joined = stub.MergeJoin(pb.MergeJoinRequest(queries=[
        pb.JoinQuery(index="PhotosByTag", equal=[pb.Value(string="sea")])] * 2)).hits
    looked_up = stub.ReadEntities(pb.ReadEntitiesRequest(
        table="Photo", keys=[pb.EntityKey(key=h.primary_key) for h in joined],
        mode=pb.READ_MODE_CURRENT)).entities
    seen["global_sea_looked_up"] = [r.entity.fields["full_url"].single.string for r in looked_up]
    expect_error("global_local_index", lambda: stub.ScanGlobalIndex(pb.ScanGlobalIndexRequest(
        index="PhotosByTime")))
    group_of = stub.GroupOf(pb.GroupOfRequest(table="Photo", key=[v64(5), pb.Value(int32=2)]))
    group_of_user = stub.GroupOf(pb.GroupOfRequest(table="User", key=[v64(5)]))
    seen["group_of"] = [group_of.root.table, group_of.root.key[0].int64, group_of.id == group_of_user.id]
    expect_error("typed_other_group", lambda: stub.GetEntity(pb.GetEntityRequest(
        txn=txn, table="User", key=[v64(6)])))
    expect_error("typed_missing_required", lambda: stub.PutEntity(pb.PutEntityRequest(
        txn=txn, entity=pb.Entity(table="Photo", fields={"user_id": field(v64(5))}))))
    expect_error("typed_unknown_table", lambda: stub.GetEntity(pb.GetEntityRequest(
        txn=txn, table="Nope", key=[v64(5)])))
    stub.Abort(pb.AbortRequest(txn=txn))

    # The rows of an untyped group never reach into a typed group's: an untyped group
    # named 0x01 once contained User 5's rows (table id 1 ‖ int64 5 ‖ table id 1).
    stray = stub.Begin(pb.BeginRequest(eg=b"\x01")).txn
    stub.Write(pb.WriteRequest(txn=stray, rows=[pb.RowWrite(
        key=b"\x80\x00\x00\x00\x00\x00\x00\x05\x01",
        cells=[pb.CellWrite(column=b"User.name", set=b"mallory")])]))
    seen["stray_commit"] = stub.Commit(pb.CommitRequest(txn=stray)).WhichOneof("outcome")
    txn = stub.Begin(pb.BeginRequest(root=root)).txn
    user = stub.GetEntity(pb.GetEntityRequest(txn=txn, table="User", key=[v64(5)]))
    seen["typed_user_after_stray"] = user.entity.fields["name"].single.string
    stub.Abort(pb.AbortRequest(txn=txn))

    # A group whose name extends another's (once: a prefix of its rows) stays apart.
    for group, key in [(b"nest\x01inner", b"x"), (b"nest", b"k")]:
        t = stub.Begin(pb.BeginRequest(eg=group)).txn
        stub.Write(pb.WriteRequest(txn=t, rows=[pb.RowWrite(
            key=key, cells=[pb.CellWrite(column=b"c", set=b"v")])]))
        stub.Commit(pb.CommitRequest(txn=t))
    nest = stub.Read(pb.ReadRequest(eg=b"nest", mode=pb.READ_MODE_CURRENT,
                                    query=pb.RowQuery(range=pb.RowQuery.Range())))
    seen["nested_scan"] = [r.key.decode(errors="replace") for r in nest.rows]

    # One position per transaction: a write committed after a transaction began is
    # not seen by any of its reads, however many calls they take.
    reader = stub.Begin(pb.BeginRequest(eg=eg))
    first = stub.TxnRead(pb.TxnReadRequest(txn=reader.txn, keys=[counter_key])).rows
    writer = stub.Begin(pb.BeginRequest(eg=eg)).txn
    stub.Write(pb.WriteRequest(txn=writer, rows=[pb.RowWrite(
        key=counter_key, cells=[pb.CellWrite(column=b"n", set=b"moved-on")])]))
    moved = stub.Commit(pb.CommitRequest(txn=writer)).committed.position
    again = stub.TxnRead(pb.TxnReadRequest(txn=reader.txn, keys=[counter_key])).rows
    scanned = stub.TxnScan(pb.TxnScanRequest(txn=reader.txn, range=pb.RowQuery.Range(
        start=counter_key, end=counter_key + b"\x00"))).rows
    values = lambda rows: [c.value.decode() for r in rows for c in r.cells if c.column == b"n"]
    seen["one_position"] = {
        "begin_position": reader.position, "write_position": moved,
        "first": values(first), "again": values(again), "scanned": values(scanned),
        "read_only_commit": stub.Commit(pb.CommitRequest(txn=reader.txn)).WhichOneof("outcome"),
    }

    # Outcomes a client can act on: Begin names the transaction; a Commit sent again
    # answers the same; Resolve, at any replica, says whether it committed.
    begun = stub.Begin(pb.BeginRequest(eg=eg))
    stub.Write(pb.WriteRequest(txn=begun.txn, rows=[pb.RowWrite(
        key=b"resolved", cells=[pb.CellWrite(column=b"c", set=b"v")])]))
    once = stub.Commit(pb.CommitRequest(txn=begun.txn))
    twice = stub.Commit(pb.CommitRequest(txn=begun.txn))
    resolved = stub.Resolve(pb.ResolveRequest(eg=eg, id=begun.id))
    dropped = stub.Begin(pb.BeginRequest(eg=eg))
    stub.Abort(pb.AbortRequest(txn=dropped.txn))
    never = stub.Resolve(pb.ResolveRequest(eg=eg, id=dropped.id))
    seen["outcomes"] = {
        "id_position": begun.id.position, "begin_position": begun.position,
        "committed_at": once.committed.position, "again_at": twice.committed.position,
        "resolved": resolved.WhichOneof("outcome"), "resolved_at": resolved.committed.position,
        "aborted_resolved": never.WhichOneof("outcome"),
    }
    expect_error("resolve_without_id", lambda: stub.Resolve(pb.ResolveRequest(eg=eg)))

    # A blind transaction only writes: Begin takes its position without waiting for a
    # commit in flight, and its reads are refused.
    blind = stub.Begin(pb.BeginRequest(eg=eg, blind=True))
    expect_error("blind_read", lambda: stub.TxnRead(pb.TxnReadRequest(
        txn=blind.txn, keys=[b"resolved"])))
    stub.Write(pb.WriteRequest(txn=blind.txn, rows=[pb.RowWrite(
        key=b"blind", cells=[pb.CellWrite(column=b"c", set=b"v")])]))
    blind_commit = stub.Commit(pb.CommitRequest(txn=blind.txn))
    seen["blind"] = {
        "id_is_next": blind.id.position == blind.position + 1,
        "outcome": blind_commit.WhichOneof("outcome"),
        "after_begin": blind_commit.committed.position > blind.position,
    }

    # 7. Still serving, and the first write is still there.
    read = stub.Read(pb.ReadRequest(eg=eg, mode=pb.READ_MODE_CURRENT, query=pb.RowQuery(
        keys=pb.RowQuery.Keys(keys=[name_key]))))
    seen["after_errors"] = [c.value.decode() for r in read.rows for c in r.cells if c.column == b"name"]

    # 8. Queues: a message sent from eg to the group "py-inbox", delivered, received.
    txn = stub.Begin(pb.BeginRequest(eg=eg)).txn
    stub.SendMessage(pb.SendMessageRequest(txn=txn, to=b"py-inbox", queue="mail", body=b"from python"))
    sent = stub.Commit(pb.CommitRequest(txn=txn)).WhichOneof("outcome")
    stub.Deliver(pb.DeliverRequest(sender=eg))
    got = []
    deadline = time.time() + 20
    while not got and time.time() < deadline:
        txn = stub.Begin(pb.BeginRequest(eg=b"py-inbox")).txn
        got = list(stub.Receive(pb.ReceiveRequest(txn=txn, queue="mail")).messages)
        if got:
            stub.Commit(pb.CommitRequest(txn=txn))
        else:
            stub.Abort(pb.AbortRequest(txn=txn))
            time.sleep(0.2)
    txn = stub.Begin(pb.BeginRequest(eg=b"py-inbox")).txn
    left = list(stub.Receive(pb.ReceiveRequest(txn=txn, queue="mail")).messages)
    stub.Abort(pb.AbortRequest(txn=txn))
    seen["queue"] = {
        "sent": sent,
        "bodies": [m.body.decode() for m in got],
        "senders": [m.sender_name.decode() for m in got],
        "left": len(left),
    }
    expect_error("send_nowhere", lambda: stub.SendMessage(pb.SendMessageRequest(
        txn=stub.Begin(pb.BeginRequest(eg=eg)).txn, queue="mail", body=b"x")))

    # 9. A transaction across two groups: a move from "py-left" to "py-right", both or
    # neither; its id and coordinator group resolve it; a handle used twice is refused.
    left = stub.Begin(pb.BeginRequest(eg=b"py-left"))
    right = stub.Begin(pb.BeginRequest(eg=b"py-right")).txn
    stub.Write(pb.WriteRequest(txn=left.txn, rows=[pb.RowWrite(
        key=b"item", cells=[pb.CellWrite(column=b"where", delete=True)])]))
    stub.Write(pb.WriteRequest(txn=right, rows=[pb.RowWrite(
        key=b"item", cells=[pb.CellWrite(column=b"where", set=b"right")])]))
    moved = stub.CommitMulti(pb.CommitMultiRequest(txns=[left.txn, right]))
    again = stub.CommitMulti(pb.CommitMultiRequest(txns=[left.txn, right]))
    resolved = stub.ResolveMulti(pb.ResolveRequest(eg=b"py-left", id=left.id))
    read = stub.Read(pb.ReadRequest(eg=b"py-right", mode=pb.READ_MODE_CURRENT, query=pb.RowQuery(
        keys=pb.RowQuery.Keys(keys=[b"item"]))))
    settled = stub.SettlePrepared(pb.SettlePreparedRequest(eg=b"py-right"))
    seen["two_phase"] = {
        "commit": moved.WhichOneof("outcome"),
        "again": again.WhichOneof("outcome"),
        "resolved": resolved.WhichOneof("outcome"),
        "right": [c.value.decode() for r in read.rows for c in r.cells if c.column == b"where"],
        "left_prepared": settled.undecided + settled.committed + settled.aborted,
    }
    expect_error("commit_multi_twice", lambda: stub.CommitMulti(pb.CommitMultiRequest(
        txns=[right, right])))
    print(json.dumps(seen, sort_keys=True))


if __name__ == "__main__":
    main()
