"""Issue 7: faults, load, hostile input and security, proved with real parts."""
