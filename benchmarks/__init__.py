"""kvlab's speed benchmarks, run from the repository root as ``python -m benchmarks.run_all`` (see README.md)."""
