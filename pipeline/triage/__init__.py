"""Triage: shrinking a failing case, comparing two runs."""
