"""Known timeouts: a tool invocation cut at a time limit is a result like any other, kept in the
store (pipeline/core/store.py) under what identifies the invocation (the tool's identity, its
input and flags: the caller's key) with the limit it was cut at. Asked again at that limit or
a lower one, it is that cut again, at once: a tool that ran L seconds without finishing would
not finish within less. Asked at a higher limit (a raised budget), it runs again, and a new cut
is kept at the higher limit. `retry` (`doit --retry-timeouts`) runs it again whatever the limit.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import StageError


@dataclass(frozen=True)
class KnownCuts:
    store: object  # a pipeline.core.store.Store
    key: str  # the invocation's store key (its outputs' key, or the run's own)
    what: str = ""  # what the entry is, for the store's listing
    retry: bool = False

    @property
    def _key(self) -> str:
        from pipeline.core.store import key_of

        return key_of({"cut_of": self.key})

    def _held(self) -> dict | None:
        entry = self.store.get(self._key, Path("."), [])
        return entry.outcome if entry else None

    def remembered(self, limit: float) -> dict | None:
        """The cut the store holds for this invocation at `limit` seconds or more, or None."""
        held = None if self.retry else self._held()
        return held if held and float(held.get("limit", 0.0)) >= limit else None

    def remember(self, err: StageError, log: Path) -> None:
        """Keep the cut, unless the store holds one at a higher limit (which says more)."""
        held = self._held()
        if held and float(held.get("limit", 0.0)) > err.limit:
            return
        log = Path(err.log or log)
        text = log.read_text(errors="replace") if log.exists() else ""
        self.store.put_outcome(self._key, err.stage, err.reason, text, self.what, limit=err.limit)


@contextmanager
def known_cut(cuts: KnownCuts | None, stage: str, limit: float, log: Path):
    """Around one tool invocation cut at `limit` seconds: a cut the store remembers at this limit
    or more is raised again without running the tool (its log says so); a new cut is kept."""
    known = cuts.remembered(limit) if cuts else None
    if known:
        Path(log).write_text(f"# taken from the store: the same tool, input and flags were cut at "
                             f"{float(known['limit']):g} s before ({cuts.store.root}); "
                             f"`doit --retry-timeouts` runs it again\n" + known.get("log", ""))
        raise StageError(known["stage"], known["reason"], None, str(log), cut=True, limit=float(known["limit"]),
                         remembered=True)
    try:
        yield
    except StageError as err:
        if cuts and err.cut and err.stage == stage and err.limit is not None:
            cuts.remember(err, Path(log))
        raise
