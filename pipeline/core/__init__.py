"""Mechanisms every layer uses: errors, subprocesses and atomic files, executables, file digests, helper processes, stage code keys. Imports nothing else of the package."""
