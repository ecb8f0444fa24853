"""Chains first: a case's next task runs as soon as its input is built.

doit's dispatcher expands the task graph breadth first: its queue of ready nodes is first in,
first out, so a node's dependencies and the tasks a finished task releases all join the end
of it. On a cold sweep no case completed its chain (model, mlir, vmfb, verify) until nearly
every model was built. Here the queue is depth first, in order: the dependencies a node
yields, and the nodes a finished task releases, go to the front of the queue (in the order
they came), so the first chains complete within seconds. How many tasks are in flight, and so
the throughput, stays doit's. CONV_SWEEP_ORDER=breadth keeps doit's own order (to compare).

doit has no documented hook for the order of ready tasks, so this module replaces two methods
of its private TaskDispatcher (doit.control). It is written against the TaskDispatcher of doit
0.37.0, the version pyproject.toml pins: install() patches only that exact class source and
says so loudly otherwise, and tests/test_order.py fails when doit changes.

Imports doit: loaded with the reporters (doit plugins), before any task runs.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
from collections import deque

from doit.control import TaskDispatcher

from pipeline.config import order
from pipeline.core.errors import ConfigError


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


def install() -> None:
    try:
        if order(os.environ) == "breadth":
            return
    except ConfigError:
        return  # the configuration's check reports it, before any task

    if dispatcher_digest() != WRITTEN_FOR:
        print("conv-sweep: this doit's task dispatcher is not the one pipeline/engine/order.py was written for "
              "(doit 0.37.0): tasks run in doit's own breadth-first order", file=sys.stderr)
        return
    TaskDispatcher.__init__ = _init_depth_first
    TaskDispatcher._update_waiting = _update_waiting_first
