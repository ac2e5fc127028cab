"""User-defined effects: a counter carried through traced regions and a trace-time log."""
