"""What a module that gives wrong numbers computes instead, measured: impulse probes.

Where no mis-lowering of pipeline/checks/explain.py matches, a bug report still wants what a
person finds by hand with numpy: feed the module one input element at a time and see which
outputs move, and by how much. A conv is linear in its input: output r is bias_r plus
sum_i T[r, i] x_i, where T[r, i] is the kernel tap that output r applies at input element i
(0 where it does not read it). The probes measure the module's own map, one run per input
element plus one with every input 0:

    A[r, i] = (y(v e_i)[r] - y(0)[r]) / v

with v a power of two (exact in the module's input dtype) large enough that v |w| dominates the
output for a zero input (run first): v = 2^(ceil(log2(max |y(0)| / min |w|)) + 8), from 1 to
2^MAX_EXPONENT (and v max |w| at most 2^126), w over the kernel's nonzero taps.

Derivation of what counts as different. Each run's output is rounded once to the output's dtype
(f32 or bf16): y(v e_i)[r] is within one step of the output's dtype at its magnitude of the
exact value, and y(0)[r] too (a whole step, twice the half step of rounding to nearest, so that a
module that truncates is not called wrong). So A[r, i] is within
tol[r, i] = (step(v |T[r, i]| + |y(0)[r]|) + step(|y(0)[r]|)) / v of T[r, i] when the module
applies that tap at that element, and output r reads element i when |A[r, i]| exceeds
tol[r, i] taken with T = 0. The zero-input output is compared with the bias, rounded to the
output's dtype, within one step. The module's taps are held as the verdict's reference holds
them (bf16-rounded where the compiler converts the weights: explain.verdict_operands).

Findings, from these facts alone (each holds on the minimal case the report ships):
- "non-finite": an impulse's output (or the zero input's) is not finite: nothing else is claimed;
- "unresolved": a tap is at most twice its tol (the output's steps at the zero input's output
  swamp it, v being capped): no claim is made;
- "ignores its input": every tap resolved, and no impulse changes any output, bit for bit;
- "wrong input positions": some output applies a tap at another input element than the conv;
  each tap is paired with the elements of that output whose coefficient is within tol of its
  value; where one displacement takes every tap to one of its elements, and only one does, that
  displacement is named (and pairs each tap); else a tap is paired where one element alone fits;
- "wrong weights": every output reads exactly the conv's elements, with some coefficient off;
- "wrong bias": the map is the conv's, the output for a zero input is not the bias;
- "agrees with the conv": every impulse gives the conv's answer (the wrong numbers then come from
  how the module combines several inputs: its accumulation's rounding, or a non-linearity).

Probed only where the module is linear in its input as the case defines it: float input and
output (onnx f32 and bf16, tflite f32; w8if32 quantizes its input at run time, w8i8
requantizes), no fused activation, and at most MAX_INPUTS input elements.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from pipeline.checks import explain
from pipeline.checks.reference import to_channels_first, to_channels_last
from pipeline.space.cases import Case

MAX_INPUTS = 1024  # input elements probed at most (one run of the module each)
MAX_EXPONENT = 120  # the impulse at most 2^120, and v max |w| at most 2^126: inside f32's and bf16's range
IMPULSES = "impulses.json"
SHOWN = 12  # taps of the example output shown
LINEAR = ("onnx_f32", "onnx_bf16", "tflite_f32")
LAYOUTS = {("onnx", 1): "NCW", ("onnx", 2): "NCHW", ("tflite", 1): "NWC", ("tflite", 2): "NHWC"}


def not_probed(case: Case, inputs: int) -> str | None:
    """Why the case's module cannot be probed with impulses, or None."""
    if case.variant not in LINEAR:
        return f"{case.variant} is not linear in its input (it quantizes)"
    if case.geometry.activation != "none":
        return f"the fused {case.geometry.activation} is not linear"
    if inputs > MAX_INPUTS:
        return f"{inputs:,} input elements, more than the {MAX_INPUTS:,} probed at most"
    return None


def impulse(kernel: np.ndarray, offset: np.ndarray) -> float:
    """v: a power of two large enough that v |w| dominates the output for a zero input (see the
    module's docstring), at most 2^MAX_EXPONENT."""
    taps = np.abs(kernel[kernel != 0])
    top = float(np.max(np.abs(offset), initial=0.0))
    if not taps.size or top == 0.0 or not math.isfinite(top):
        return 1.0
    cap = min(MAX_EXPONENT, math.floor(126 - math.log2(float(taps.max()))))
    return float(2.0 ** min(cap, max(0, math.ceil(math.log2(top / float(taps.min()))) + 8)))


def measure(run, shape: tuple, kernel: np.ndarray, lanes: int = 2) -> tuple[np.ndarray, np.ndarray, float]:
    """(A, y0, v): the module's response per unit of each input element (outputs x inputs, both
    flattened in the model's layout), its output for an all-zero input (run first: v is
    chosen from it) and the impulse v. `run(x)` runs the module on x (float64, the model's
    input shape) and returns its output."""
    n = int(np.prod(shape))

    def one(i: int, value: float = 0.0) -> np.ndarray:
        x = np.zeros(n)
        if i >= 0:
            x[i] = value
        return np.asarray(run(x.reshape(shape)), dtype=np.float64).reshape(-1)

    y0 = one(-1)
    value = impulse(kernel, y0)
    with ThreadPoolExecutor(lanes) as pool:
        outputs = list(pool.map(lambda i: one(i, value), range(n)))
    return np.stack([(y - y0) / value for y in outputs], axis=1), y0, value


def _nchw(case: Case, a: np.ndarray) -> np.ndarray:
    return to_channels_first(a) if case.backend == "tflite" else a


def true_map(case: Case, conv: explain.Conv, in_shape: tuple, out_shape: tuple) -> np.ndarray:
    """T: the conv's tap at each (output, input) element pair, both in the model's layout."""
    n = int(np.prod(in_shape))
    out_spatial = _nchw(case, np.zeros(out_shape)).shape[2:]
    rows = []
    for i in range(n):
        e = np.zeros(n)
        e[i] = 1.0
        unit = replace(conv, x=_nchw(case, e.reshape(in_shape)), bias=np.zeros_like(conv.bias))
        made = explain.evaluate(unit, out_spatial)[0]
        rows.append((to_channels_last(made) if case.backend == "tflite" else made).reshape(-1))
    return np.stack(rows, axis=1)


def step(values: np.ndarray, dtype: str) -> np.ndarray:
    """One step of the output's dtype at each magnitude."""
    from pipeline.checks.tolerance import bf16_ulp

    values = np.abs(np.asarray(values, dtype=np.float64))
    if dtype == "bfloat16":
        return bf16_ulp(values)
    return np.spacing(values.astype(np.float32)).astype(np.float64)


def compare(case: Case, A: np.ndarray, y0: np.ndarray, T: np.ndarray, bias_out: np.ndarray, value: float,
            dtype: str, in_shape: tuple, out_shape: tuple) -> dict:
    """The findings (see the module's docstring) as a JSON-ready dict."""
    floor = step(y0, dtype)[:, None]
    tol = (step(value * np.abs(T) + np.abs(y0)[:, None], dtype) + floor) / value
    reads = np.abs(A) > 2 * floor / value  # tol with T = 0
    should = T != 0
    off = np.abs(A - T) > tol
    wrong = np.flatnonzero(off.any(axis=1))
    found = {"runs": A.shape[1] + 1, "impulse": value, "layout": LAYOUTS[case.backend, case.geometry.rank],
             "input_shape": list(in_shape), "output_shape": list(out_shape), "outputs": A.shape[0],
             "wrong_outputs": int(wrong.size)}
    finite = np.isfinite(A).all(axis=0) & np.isfinite(y0).all()
    if not finite.all():  # no claim rests on a non-finite output
        i = int(np.flatnonzero(~finite)[0]) if np.isfinite(y0).all() else None
        return {**found, "finding": "non-finite", "input": _index(i, in_shape)}
    unresolved = should & (tol >= np.abs(T) / 2)
    if unresolved.any():  # the output's own steps are as large as a tap times the impulse
        return {**found, "finding": "unresolved", "unresolved_taps": int(unresolved.sum()),
                "taps": int(should.sum())}
    if should.any() and not A.any():  # bit for bit: no impulse moved any output
        r = int(np.flatnonzero(should.any(axis=1))[0])
        return {**found, "finding": "ignores its input", "wrong_outputs": int(should.any(axis=1).sum()),
                "example": {"output": _index(r, out_shape), "zero_input_output": float(y0[r]),
                            "bias": float(bias_out[r])}}
    if not wrong.size:
        bias_off = np.abs(y0 - bias_out) > step(bias_out, dtype)
        if bias_off.any():
            r = int(np.flatnonzero(bias_off)[0])
            return {**found, "finding": "wrong bias", "wrong_outputs": int(bias_off.sum()), "example": {
                "output": _index(r, out_shape), "zero_input_output": float(y0[r]), "bias": float(bias_out[r])}}
        return {**found, "finding": "agrees with the conv"}
    positions = bool((reads[wrong] != should[wrong]).any())
    found["finding"] = "wrong input positions" if positions else "wrong weights"
    r = int(next((r for r in wrong if (reads[r] != should[r]).any()), wrong[0]))
    taps = np.flatnonzero(should[r])
    # where the module applies each tap's value: the elements of output r whose coefficient is
    # within tol of it (a bf16 output tells weights apart only to about 2^-8 of their size)
    near = [np.flatnonzero(np.abs(A[r] - T[r, i]) <= tol[r, i]) for i in taps]
    shifts = [{tuple(int(d) for d in np.subtract(_index(int(j), in_shape), _index(int(i), in_shape))) for j in js}
              for i, js in zip(taps, near)]
    common = set.intersection(*shifts) if all(shifts) else set()
    moved = next(iter(common)) if len(common) == 1 and any(next(iter(common))) else None

    def where(i: int, js: np.ndarray) -> list[int] | None:
        if moved is not None:
            return [a + b for a, b in zip(_index(i, in_shape), moved)]
        if i in js:
            return _index(i, in_shape)
        return _index(int(js[0]), in_shape) if js.size == 1 else None

    rows = [{"weight": float(T[r, i]), "conv_reads": _index(int(i), in_shape),
             "module_reads": where(int(i), js), "candidates": int(js.size),
             "module_coefficient_there": float(A[r, i])} for i, js in zip(taps, near)]
    paired = {tuple(t["module_reads"]) for t in rows if t["module_reads"] is not None}
    extra = [j for j in np.flatnonzero(reads[r] & ~should[r]) if tuple(_index(int(j), in_shape)) not in paired]
    found["example"] = {"output": _index(r, out_shape), "taps": rows,
                        "also_reads": [_index(int(j), in_shape) for j in extra]}
    if positions and moved is not None:
        found["displacement"] = [int(d) for d in moved]
    return found


def _index(flat: int | None, shape: tuple) -> list[int] | None:
    return None if flat is None else [int(v) for v in np.unravel_index(flat, shape)]


def lines(found: dict) -> list[str]:
    """report.md's lines for the findings of `compare` (or why no probe ran: {"not_probed": ...})."""
    if "not_probed" in found:
        return [f"Impulse probes: not run ({found['not_probed']}).", ""]
    layout = found["layout"]
    head = (f"Impulse probes ({found['runs']} runs of the module: one per input element, at {found['impulse']:g}, "
            f"and one with every input 0; indices [{', '.join(layout)}]; every impulse's output in "
            f"`{IMPULSES}`): ")
    finding = found["finding"]
    if finding == "non-finite":
        at = "every input 0" if found["input"] is None else f"an impulse at input {found['input']}"
        return [head + f"not resolved: with {at} the module's output is not finite; nothing else is claimed.", ""]
    if finding == "unresolved":
        return [head + f"not resolved: at {found['unresolved_taps']} of {found['taps']} taps a step of the "
                "output's dtype at its magnitude is half the tap times the impulse or more; nothing is claimed.", ""]
    if finding == "ignores its input":
        example = found["example"]
        return [head + f"**the output ignores its input**: no impulse changes any output, bit for bit; output "
                f"{example['output']} is {example['zero_input_output']:.6g} for every input (the bias is "
                f"{example['bias']:.6g}).", ""]
    if finding == "agrees with the conv":
        return [head + "every impulse gives the conv's answer: the module's taps, where it applies them, and its "
                "bias are the conv's. Its wrong numbers come from how it combines several inputs (the rounding "
                "of its accumulation, or a non-linearity), which one impulse at a time does not exercise.", ""]
    example = found["example"]
    if finding == "wrong bias":
        return [head + f"every impulse gives the conv's taps, but with every input 0 output {example['output']} "
                f"is {example['zero_input_output']:.6g} where the bias is {example['bias']:.6g}: **wrong bias**.", ""]
    out = [head + f"**{finding}** at {found['wrong_outputs']} of {found['outputs']} output elements."]
    if "displacement" in found:
        moved = ", ".join(f"{axis} {d:+d}" for axis, d in zip(layout, found["displacement"]) if d)
        out[0] += f" Every tap of output {example['output']} is read {moved} from where the conv reads it."
    out += ["", f"Output {example['output']}, tap by tap (the weight, where the conv applies it, where the "
            "module does):", "", "| weight | the conv reads | the module reads |", "|---|---|---|"]
    for tap in example["taps"][:SHOWN]:
        there = tap["module_reads"] if tap["module_reads"] is not None else \
            (f"one of {tap['candidates']} elements with that weight" if tap["candidates"] else
             f"nowhere (its coefficient at the conv's element: {tap['module_coefficient_there']:.6g})")
        out.append(f"| {tap['weight']:.6g} | {tap['conv_reads']} | {there} |")
    if len(example["taps"]) > SHOWN:
        out.append(f"| ... | {len(example['taps']) - SHOWN} more taps in `{IMPULSES}` | |")
    if example["also_reads"]:
        out.append(f"\nIt also reads {', '.join(map(str, example['also_reads'][:6]))}"
                   + (" ..." if len(example["also_reads"]) > 6 else "") + ", which the conv does not.")
    return out + [""]


def probe(cfg, case: Case, deadline: float, log) -> dict | None:
    """The impulse findings of the case's module (built in cfg.case_dir(case)), with every
    impulse's output ("response": A, "zero_input_output": y0), as a bug report's IMPULSES holds
    them; {"not_probed": why} where it cannot be probed; None where the probes would not end by
    `deadline`."""
    from pipeline.checks import oracle
    from pipeline.checks.reference import round_to_bf16
    from pipeline.core.errors import StageError
    from pipeline.core.isolate import call
    from pipeline.targets import signature
    from pipeline.targets.runner import input_file_name, run_vmfb, write_input

    target = cfg.target(case.target)
    profile = target.profile
    model_dir, case_dir = cfg.model_dir(case), cfg.case_dir(case)
    vmfb = case_dir / "model.vmfb"
    sig = signature.read(target.dump_tool, vmfb, model_dir / "model.mlir", profile.function(case.backend),
                         stage="run", timeout=cfg.timeout, log=case_dir / "impulses.log")
    in_type, out_type = sig.inputs[0], sig.outputs[0]
    in_shape, out_shape = tuple(in_type.shape), tuple(out_type.shape)
    reason = not_probed(case, int(np.prod(in_shape)))
    if reason:
        return {"not_probed": reason}
    result = json.loads((case_dir / "result.json").read_text())
    run = (result.get("stages") or {}).get("run") or {}
    seconds = 1.0 if run.get("store") else float(run.get("seconds", 1.0))  # a run from the store timed nothing
    runs = int(np.prod(in_shape)) + 1
    if time.monotonic() + runs * max(seconds, 0.01) / 2 > deadline:
        log(f"  impulses: {runs} runs of about {seconds:.2g} s would not end within the report's budget")
        return None
    weights = call(oracle.model_weights, case, model_dir / case.model_file, helper="oracle", stage="verify",
                   timeout=cfg.timeout, log=case_dir / "impulses.log")
    converted = case.flavor == "f32" and in_type.dtype.name == "bfloat16"  # an f32 model run in bf16
    refs = {"expected": np.zeros(out_shape)}
    if converted:
        held = oracle.bf16_operands(weights) if profile.converts_weights else weights
        refs = {**refs, "bf16": refs["expected"], "bf16_bias": held.bias}
    conv = explain.verdict_operands(case, weights, np.zeros(in_shape), refs, profile)
    folder = case_dir / "impulses"  # the runs' inputs and logs, each removed after its run
    folder.mkdir(exist_ok=True)

    def run(x: np.ndarray) -> np.ndarray:
        path = folder / f"{int(np.argmax(np.abs(x)))}-{input_file_name(in_type, profile.io)}"
        if not x.any():
            path = path.with_name(f"zero-{input_file_name(in_type, profile.io)}")
        log_file = path.with_suffix(".log")
        write_input(path, x.astype(in_type.dtype), in_type, profile.io)
        y, _ = run_vmfb(target.runner, profile.run_flags, vmfb, sig, [path], profile.io, timeout=cfg.timeout,
                        log=log_file)
        path.unlink()
        log_file.unlink(missing_ok=True)
        return y

    start = time.monotonic()
    try:
        A, y0, value = measure(run, in_shape, conv.kernel)
    except StageError as err:
        shutil.rmtree(folder, ignore_errors=True)
        return {"not_probed": f"a run of the module failed: {err}"}
    T = true_map(case, conv, in_shape, out_shape)
    bias = np.broadcast_to(conv.bias.reshape(1, -1, *(1,) * conv.rank), _nchw(case, np.zeros(out_shape)).shape)
    bias = (to_channels_last(bias) if case.backend == "tflite" else bias).reshape(-1)
    dtype = out_type.dtype.name
    bias = round_to_bf16(bias) if dtype == "bfloat16" else bias.astype(np.float32).astype(np.float64)
    found = compare(case, A, y0, T, bias, value, dtype, in_shape, out_shape)
    shutil.rmtree(folder, ignore_errors=True)
    log(f"  impulses: {runs} runs in {time.monotonic() - start:.0f} s: {found['finding']}")
    return {**found, "response": A.tolist(), "zero_input_output": y0.tolist()}
