"""The engine: doit plugins (durable DB, reporters, task order), the task wiring helpers, Dask, the benchmark."""
