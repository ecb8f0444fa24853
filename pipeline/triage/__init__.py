"""Triage, from a run's failures to what to file: shrink a failing case (shrink, with slow: the
predicate of a timeout bucket), a bug report per bucket (bugreport, with timing: where a slow
compile's time goes, and culprit: the toggle-flag search), compare two runs (diff), the first
release that fails (bisect), and the search for buckets a sweep misses (hunt)."""
