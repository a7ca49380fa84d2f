"""`PYTHONPATH=tests/kube python3 -m apiserver --port 0`"""
from .server import main

main()
