"""Acceptance criteria: one module per stage; see catalogue.py."""
