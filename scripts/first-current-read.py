"""Waits for a replica's public API to serve a current read, and prints how long after
START (seconds since the epoch) the first one came back, how it was served, its row
count, and how long after START the first one served locally came back (vouched by the
replica's coordinator; "-" if none within the limit) (scripts/many-groups.sh).

Usage: first-current-read.py REPO_ROOT ADDRESS GROUP START [LIMIT_SECONDS]
"""

import os
import sys
import time

import grpc

sys.path.insert(0, os.path.join(sys.argv[1], "tests", "python"))
from stubs import load_stubs  # noqa: E402


def main():
    repo_root, address, group, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    limit = float(sys.argv[5]) if len(sys.argv) > 5 else 120.0
    pb, rpc = load_stubs(repo_root)
    stub = rpc.MegastoreStub(grpc.insecure_channel(address))
    request = pb.ReadRequest(
        eg=group.encode(),
        mode=pb.READ_MODE_CURRENT,
        query=pb.RowQuery(range=pb.RowQuery.Range()),
    )
    first = None
    while True:
        try:
            answer = stub.Read(request, timeout=2)
            elapsed = time.time() - start
            if first is None:
                first = (elapsed, answer.path, len(answer.rows))
            if answer.path == "local":
                break
            if elapsed > limit:
                elapsed = None
                break
        except grpc.RpcError as e:
            if time.time() - start > limit:
                sys.exit(f"no current read of {group} at {address} within {limit} s: {e}")
        time.sleep(0.05)
    local = "-" if elapsed is None else f"{elapsed:.2f}"
    print(f"{first[0]:.2f} {first[1]} {first[2]} {local}")


main()
