"""Test beds the tests and benchmarks share (cluster.py: hosts as network namespaces)."""
