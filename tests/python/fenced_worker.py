"""A lease holder that writes to the store under a lock's fencing token.

Usage: fenced_worker.py REPO_ROOT REPLICA_ADDRESS NAME TTL_MS SECONDS

Grants a lease of TTL_MS, waits (up to SECONDS) for the lock "job", then for the rest
of SECONDS writes one versioned key `ledger/NAME/SEQ` per step, each write fenced by
its token on the group's fence key `fence/job`. A thread keeps the lease alive.

The writes deliberately do not look at the lease: a holder paused past its lease
(SIGSTOP) and resumed keeps writing as if it still held the lock, and only the store's
fence can stop it. Prints one JSON line per event, flushed: `locked` (with the token),
`write` (applied, refused or error), `lease_lost`, and `done`.
"""

import json
import sys
import threading
import time

import grpc

from stubs import load_stubs

GROUP = b"fenced-ledger"
LOCK = "job"
FENCE = b"fence/job"


SAY = threading.Lock()


def say(**event):
    # One write per line, under a lock: the keep-alive thread speaks too, and print's
    # separate write of the newline let two events share a line.
    with SAY:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def main():
    repo_root, address, name = sys.argv[1], sys.argv[2], sys.argv[3]
    ttl_ms, seconds = int(sys.argv[4]), float(sys.argv[5])
    pb, rpc = load_stubs(repo_root)
    stub = rpc.MegastoreStub(grpc.insecure_channel(address))
    end = time.time() + seconds

    lease = stub.LeaseGrant(pb.LeaseGrantRequest(owner=name, ttl_ms=ttl_ms), timeout=10).lease
    lost = threading.Event()

    def keep_alive():
        while not lost.is_set() and time.time() < end:
            try:
                stub.LeaseKeepAlive(pb.LeaseKeepAliveRequest(lease=lease), timeout=2)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    say(event="lease_lost", name=name, detail=e.details())
                    lost.set()
                    return
            time.sleep(ttl_ms / 4000)

    # Alive while waiting for the lock too.
    threading.Thread(target=keep_alive, daemon=True).start()

    token = None
    while token is None:
        try:
            token = stub.Lock(pb.LockRequest(lease=lease, name=LOCK), timeout=10).fencing_token
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION or time.time() > end:
                say(event="no_lock", code=e.code().name, detail=e.details())
                return
            time.sleep(0.05)
    say(event="locked", name=name, lease=lease, token=token)

    seq = 0
    while time.time() < end:
        seq += 1
        key = f"ledger/{name}/{seq:06d}".encode()
        request = pb.VersionedTxnRequest(
            eg=GROUP,
            asserts=[pb.Assert(key=FENCE, fence_token=token)],
            mutations=[pb.Mutation(key=key, put=str(token).encode())],
        )
        try:
            outcome = stub.VersionedTxn(request, timeout=10).WhichOneof("outcome")
            result = "applied" if outcome == "applied" else "refused"
        except grpc.RpcError as e:
            # An error leaves the write's outcome unknown: it may or may not be there.
            result = "error:" + e.code().name
        say(event="write", name=name, token=token, key=key.decode(), result=result)
        time.sleep(0.02)
    say(event="done", name=name)


if __name__ == "__main__":
    main()
