"""Tools for developing conv-sweep and the compilers it tests, run as `python -m`: the
benchmark of the tool's own speed, and the check that a compile flag changes no module."""
