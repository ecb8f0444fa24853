"""Exceptions raised at the stage boundary.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path


class ConfigError(ValueError):
    """Bad configuration or input, found before any work starts."""

    def __init__(self, field: str, value, problem: str):
        self.field, self.value, self.problem = field, value, problem
        super().__init__(f"{field}={value!r}: {problem}")


class StageError(Exception):
    """A stage of one case failed: the case is recorded as an error at that stage."""

    def __init__(self, stage: str, reason: str, argv: list[str] | None = None, log: str | None = None,
                 seconds: float | None = None, deterministic: bool = False, cut: bool = False,
                 limit: float | None = None, remembered: bool = False):
        self.stage, self.reason, self.argv, self.log = stage, reason, argv, log
        self.cut = cut  # the tool was cut at its time limit: a timeout, not a failure it reported
        self.limit = limit  # a cut's time limit: the seconds the tool ran before it was cut
        self.remembered = remembered  # a cut taken from the store (pipeline/core/cuts.py), not run again
        self.seconds = seconds  # how long the failing tool ran, where it ended by itself (not cut)
        # the same input, flags and tool fail the same way again: the tool exited with an error
        # or crashed by its own doing, not killed from outside or cut at a time limit
        self.deterministic = deterministic
        super().__init__(f"{stage}: {reason}")

    @property
    def command(self) -> str | None:
        return shlex.join(self.argv) if self.argv else None


def load_json(path, field: str):
    """A JSON configuration file's content, or a ConfigError naming the knob that points to it."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as err:
        raise ConfigError(field, str(path), f"cannot be read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(field, str(path), f"is not valid JSON: {err}") from None
