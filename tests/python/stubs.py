"""The public API's Python stubs, generated from the repository's proto at run time."""

import atexit
import os
import shutil
import sys
import tempfile

from grpc_tools import protoc


def load_stubs(repo_root):
    """Generates client.proto's stubs into a temporary directory and imports them."""
    out = tempfile.mkdtemp(prefix="megastore-py-")
    # The stubs are imported once, below; the directory goes when the process ends,
    # so test runs leave nothing in the temporary directory.
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    proto_root = os.path.join(repo_root, "proto")
    status = protoc.main([
        "protoc",
        f"-I{proto_root}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.join(proto_root, "megastore/client/v1/client.proto"),
    ])
    if status != 0:
        sys.exit(f"protoc failed with {status}")
    sys.path.insert(0, out)
    from megastore.client.v1 import client_pb2, client_pb2_grpc  # noqa: E402
    return client_pb2, client_pb2_grpc
