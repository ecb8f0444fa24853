"""A case's outcome: the result record, failure buckets, and the verdict against the expected failures."""
