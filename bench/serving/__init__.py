"""kinfer-bench, the serving load generator (bench/kinfer-bench; see kinfer_bench.py)."""
