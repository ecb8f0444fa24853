"""A case's verdict: its outcome (pass, compiled, fail, error, timeout, harness) judged against
its entry in the expected-failures list.

- listed, failed at the listed stage with the listed bucket signature: xfail;
- listed, failed at the listed stage with another signature: changed (red), with both;
- listed, passed the listed stage: xpass (red, strict); except a listed timeout: a case whose
  time lies near its budget may finish within it on a fast day and be cut on a slow one, so
  finishing is accepted too (its outcome stands, with a note that it was listed; never red
  on that account), and its verdict does not flip with the machine's speed;
- listed, failed at another stage, or not listed: the outcome stands;
- a harness failure (our own code raised, a Dask worker was lost): harness (red), never expected.

The outcome is kept in the result (stage, reason, notes["outcome"]), so a verdict can be judged
again when the list changes without re-running the case.
"""
from __future__ import annotations

from pipeline.outcome.bucket import signature
from pipeline.space.cases import Case
from pipeline.outcome.result import CHANGED, ERROR, FAIL, HARNESS, RED, TIMEOUT, XFAIL, XPASS, Result

JUDGED = (XFAIL, CHANGED, XPASS)
LISTED_TIMEOUT = "listed_timeout"  # the note of a listed timeout that finished within its budget


def outcome(result: Result) -> str:
    """What happened before judging: pass, compiled, fail, error, timeout or harness."""
    return result.notes.get("outcome", result.status) if result.status in JUDGED else result.status


def judge(case: Case, result: Result) -> Result:
    """`result` (the case's outcome) with the verdict of the case's expectation applied."""
    raw = outcome(result)
    notes = {k: v for k, v in result.notes.items()
             if k not in ("outcome", "expected_bucket", "observed_bucket", LISTED_TIMEOUT)}
    result.notes, result.status = notes, raw
    if raw not in (FAIL, ERROR, TIMEOUT, HARNESS):
        result.stage = None
    expected = case.expected
    if expected is None or raw == HARNESS:
        return result
    if raw in (FAIL, ERROR, TIMEOUT):
        if result.stage != expected.stage:
            return result
        observed = signature(result.stage, result.reason, raw)
        result.notes = {**notes, "outcome": raw, "expected_bucket": expected.bucket, "observed_bucket": observed}
        result.status = XFAIL if observed == expected.bucket else CHANGED
        return result
    if expected.may_finish:  # a listed timeout that finished within its budget: information
        result.notes = {**notes, LISTED_TIMEOUT: f"listed as [{expected.bucket}], finished within its budget"}
        return result
    result.notes = {**notes, "outcome": raw, "expected_bucket": expected.bucket}
    result.status = XPASS
    result.stage = expected.stage
    result.reason = (f"expected to fail at {expected.stage} ({expected.bucket}) but passed it: "
                     "remove it from the expected failures")
    return result


def message(case: Case, result: Result, repro) -> str | None:
    """The task's one-line failure message for a red verdict, else None."""
    if result.status not in RED:
        return None
    where = f"; log: {result.log}" if result.log else ""
    if result.status == CHANGED:
        return (f"{case.key}: CHANGED at {result.stage}: listed as [{result.notes['expected_bucket']}], "
                f"failed as [{result.notes['observed_bucket']}]{where}; repro: {repro}")
    if result.status == XPASS:
        return f"{case.key}: XPASS {result.reason}; repro: {repro}"
    if result.status == HARNESS:
        return f"{case.key}: HARNESS ERROR at {result.stage} (a failure of conv-sweep itself, not of the " \
               f"tools): {result.reason}{where}; repro: {repro}"
    what = "FAILED" if result.status == FAIL else \
        f"{result.stage} TIMEOUT:" if result.status == TIMEOUT else f"{result.stage} failed:"
    return f"{case.key}: {what} {result.reason}{where}; repro: {repro}"
