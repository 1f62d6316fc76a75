"""The clients compared, each as a driver process (``python -m benchmarks.drivers.<name>``) speaking JSON lines."""
