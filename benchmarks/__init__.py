"""Side-by-side benchmarks of bertkit against reference implementations (run: python -m benchmarks)."""
