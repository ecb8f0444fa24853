"""The targets: profiles, the Torq toolchain, compile, run, module signatures, benchmark timings."""
