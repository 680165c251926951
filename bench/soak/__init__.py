"""bench.soak: a bounded run of the whole kit on loopback with faults injected on a schedule."""
