"""Fault-injection tests (issue 3): scenario tests against real local clusters, and the
harness (``tests/fault/harness``) they share: process and link faults, history recording,
the checker."""
