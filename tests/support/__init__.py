"""What kvlab's tests and benchmarks stand on, outside the package (and its wheel): imported as ``tests.support``
from the repository root (pytest's pythonpath, and ``python -m benchmarks...`` run there)."""
