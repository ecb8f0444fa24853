"""The engine: the doit plugins (commands, durable DB, reporters, task order), the task wiring
that dodo.py calls, the order chains start in, and the stages on Dask."""
