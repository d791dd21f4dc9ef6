"""Fuzzing of every RPC handler (see docs/security.md, "Hostile input")."""
