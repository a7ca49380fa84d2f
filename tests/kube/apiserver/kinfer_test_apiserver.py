#!/usr/bin/env python3
"""kinfer-test-apiserver: a Kubernetes API server for tests on 127.0.0.1 (see README.md).

    python3 tests/kube/apiserver/kinfer_test_apiserver.py --port 0
prints `LISTENING <port>` once it accepts connections.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# Import the package by its folder name; never let this folder shadow the standard library.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from apiserver.server import main  # noqa: E402

if __name__ == "__main__":
    main()
