"""A user of the public API from Python: its token in the call's metadata.

Usage: users_client.py REPO_ROOT REPLICA_ADDRESS OWN_TOKEN OTHER_TOKEN

With OWN_TOKEN (a user granted `write groups:alice/`), commits a row to group
`alice/py` and reads it back; with OTHER_TOKEN (a user without that grant) the read is
PERMISSION_DENIED; with no token at all it is UNAUTHENTICATED. Prints `ok` and exits 0
when every answer is the expected one; otherwise says which was not.
"""

import sys

import grpc

from stubs import load_stubs


def main():
    repo_root, address, own, other = sys.argv[1:5]
    pb, rpc = load_stubs(repo_root)
    stub = rpc.MegastoreStub(grpc.insecure_channel(address))
    as_own = [("authorization", f"Bearer {own}")]
    as_other = [("authorization", f"Bearer {other}")]
    group = b"alice/py"

    txn = stub.Begin(pb.BeginRequest(eg=group), metadata=as_own, timeout=10).txn
    cell = pb.CellWrite(column=b"v", set=b"from python")
    stub.Write(pb.WriteRequest(txn=txn, rows=[pb.RowWrite(key=b"k", cells=[cell])]),
               metadata=as_own, timeout=10)
    committed = stub.Commit(pb.CommitRequest(txn=txn), metadata=as_own, timeout=30)
    if committed.WhichOneof("outcome") != "committed":
        sys.exit(f"the commit did not commit: {committed}")

    read = pb.ReadRequest(eg=group, mode=pb.READ_MODE_CURRENT,
                          query=pb.RowQuery(range=pb.RowQuery.Range()))
    rows = stub.Read(read, metadata=as_own, timeout=10).rows
    values = [c.value for r in rows for c in r.cells]
    if values != [b"from python"]:
        sys.exit(f"the owner read {values}")

    for metadata, expected in [(as_other, grpc.StatusCode.PERMISSION_DENIED),
                               (None, grpc.StatusCode.UNAUTHENTICATED)]:
        try:
            stub.Read(read, metadata=metadata, timeout=10)
            sys.exit(f"a read without the grant was served (expected {expected})")
        except grpc.RpcError as e:
            if e.code() != expected:
                sys.exit(f"expected {expected}, got {e.code()}: {e.details()}")
    print("ok")


if __name__ == "__main__":
    main()
