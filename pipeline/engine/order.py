"""Chains first: a case's next task runs as soon as its input is built.

doit's dispatcher expands the task graph breadth first: its queue of ready nodes is first in,
first out, so a node's dependencies and the tasks a finished task releases all join the end
of it. On a cold sweep no case completed its chain (model, mlir, vmfb, verify) until nearly
every model was built. Here the queue is depth first, in order: the dependencies a node
yields, and the nodes a finished task releases, go to the front of the queue (in the order
they came), so the first chains complete within seconds. How many tasks are in flight, and so
the throughput, stays doit's. CONV_SWEEP_ORDER=breadth keeps doit's own order (to compare).

doit has no documented hook for the order of ready tasks, so this is the one place where
conv-sweep patches doit: `depth_first` replaces two methods of its private TaskDispatcher
(doit.control) for the length of one run (pipeline/engine/command.py's run command) and
restores them after. It is written against the TaskDispatcher of doit 0.37.0, the version
pyproject.toml pins: it patches only that exact class source and says so loudly otherwise, and
tests/test_order.py fails when doit changes.
"""
from __future__ import annotations

import hashlib
import inspect
import sys
from collections import deque
from contextlib import contextmanager

from doit.control import TaskDispatcher


class _DepthFirst(deque):
    """A ready queue whose appends go to its front, keeping the order of consecutive appends."""

    cursor = 0

    def append(self, node):
        self.insert(self.cursor, node)
        self.cursor += 1

    def popleft(self):
        self.cursor = 0
        return super().popleft()


# sha256 of inspect.getsource(doit.control.TaskDispatcher) in doit 0.37.0
WRITTEN_FOR = "7f6a4a56793fd349532ff45c3dcecb03fe2769192c450240735d53592ce64f97"


def dispatcher_digest() -> str:
    return hashlib.sha256(inspect.getsource(TaskDispatcher).encode()).hexdigest()


_init = TaskDispatcher.__init__
_update_waiting = TaskDispatcher._update_waiting


def _init_depth_first(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.ready = _DepthFirst(self.ready)


def _update_waiting_first(self, processed):
    self.ready.cursor = 0  # what a finished task releases goes first
    _update_waiting(self, processed)


@contextmanager
def depth_first(mode: str = "chains"):
    """doit's dispatcher runs ready tasks depth first while the block runs (unless `mode`, the
    run's CONV_SWEEP_ORDER, is doit's own "breadth"), and as doit wrote it after."""
    if mode == "breadth":
        yield
        return
    if dispatcher_digest() != WRITTEN_FOR:
        print("conv-sweep: this doit's task dispatcher is not the one pipeline/engine/order.py was written for "
              "(doit 0.37.0): tasks run in doit's own breadth-first order", file=sys.stderr)
        yield
        return
    TaskDispatcher.__init__ = _init_depth_first
    TaskDispatcher._update_waiting = _update_waiting_first
    try:
        yield
    finally:
        TaskDispatcher.__init__ = _init
        TaskDispatcher._update_waiting = _update_waiting
