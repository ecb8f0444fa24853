"""Rewriting the checked-in files from a run's results: the expected-failures lists (accept,
import), the upstream xfail files, and the cost calibrations."""
