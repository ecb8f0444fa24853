"""The checks: reference convolution, the backends' oracles, derived tolerances, comparison, verify."""
