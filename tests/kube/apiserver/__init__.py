"""kinfer-test-apiserver: the Kubernetes API server the operator's tests run against (issue 5).

Start it with `python3 tests/kube/apiserver/kinfer_test_apiserver.py --port 0`; see README.md.
"""
