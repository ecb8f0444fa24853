"""The chain as the engine calls it: one function per task, and each case's repro.sh."""
