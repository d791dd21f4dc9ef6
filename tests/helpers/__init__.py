"""Shared test helpers (real processes, free ports, bounded waits)."""
