"""Benchmarks: each module here measures one thing against a baseline measured in the same run."""
