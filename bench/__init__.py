"""Benchmarks, run by `make bench`. Each subpackage is one benchmark with a `main()` that prints a
table with ratios against a baseline measured in the same run (never a timed assertion in tests)."""
