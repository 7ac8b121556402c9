"""Build hook: generate the gRPC/protobuf modules from proto/vcemu/v1/*.proto.

The generated code is never committed nor hand-edited; it is produced here, at build time (also for
editable installs), by the grpcio-tools version pinned in pyproject.toml's build requirements.
"""

from __future__ import annotations

import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def generate_protos() -> None:
    from grpc_tools import protoc  # build requirement

    proto_root = os.path.join(HERE, "proto")
    sources = sorted(glob.glob(os.path.join(proto_root, "vcemu", "v1", "*.proto")))
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={HERE}",
        f"--pyi_out={HERE}",
        f"--grpc_python_out={HERE}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed on " + " ".join(sources))


class BuildWithProtos(build_py):
    def run(self) -> None:
        generate_protos()
        super().run()


setup(cmdclass={"build_py": BuildWithProtos})
