"""The chain, defined once: the stages a case can fail at, the doit tasks that run them, and
the files one task hands to the next. Everything that needs one of these facts imports it here.
"""
from __future__ import annotations

STAGES = ("model", "import", "compile", "run", "oracle", "verify")  # where a case can fail, in order
TASKS = ("model", "mlir", "vmfb", "verify")  # the doit tasks of one case, in chain order
SHARED_TASKS = ("model", "mlir")  # built once per model, for its cases on every target
TASK_OF_STAGE = {"model": "model", "import": "mlir", "compile": "vmfb", "run": "verify", "oracle": "verify",
                 "verify": "verify"}
# the stage a task's failure is recorded at when the task could not record it (its worker was lost)
STAGE_OF_TASK = {"model": "model", "mlir": "import", "vmfb": "compile", "verify": "run"}
TIMED_STAGES = STAGES[:-1]  # stages whose tool time stages.json records
STORED_STAGES = TIMED_STAGES  # stages whose outputs (or failure) the store keeps (pipeline/core/store.py)

MLIR, MLIR_BYTECODE, VMFB = "model.mlir", "model.mlirbc", "model.vmfb"  # the import's and the compile's outputs


def tasks_until(task: str) -> tuple[str, ...]:
    """The tasks of a chain that ends at `task`, in order."""
    return TASKS[:TASKS.index(task) + 1]
