"""Where a failure bucket lives: a short rule over geometry features that separates the bucket's
cases from the passing ones, learned as a shallow decision tree, with its accuracy on cases
held out of the learning; "too thin" where the cases are too few to say.

Per bucket (the failing entries of one signature: fail, error, timeout, xfail, changed), the
positives are the bucket's cases and the negatives the passing ones (pass, xpass). Cases of
other buckets are left out (a case failing elsewhere cannot show this bucket), and so are
harness errors, compile-only and unrun cases, entries without a geometry and repeats of a case
on the same target (the first counts).

Held-out split: within each class, the cases sorted by zlib.crc32 of their name (then the name),
every third one from the second on (positions 1, 4, 7, ...) is held out: a third of each class,
at least one positive once there are two, and the same split for a case on every run and in
every bucket. Too thin: fewer than MIN_TRAIN positives to learn from, fewer than MIN_HELD_OUT
held out, or fewer than MIN_NEGATIVES passing cases.

The learner is scikit-learn's DecisionTreeClassifier (balanced class weights, leaves of at least
two cases). Its depth (1, 2 or 3) is chosen on the training cases alone, by stratified
cross-validation of the balanced accuracy: the shallowest within DEPTH_SLACK of the best. The
tree becomes the rule: the disjunction of its paths to leaves that predict the bucket (a split
whose leaves all predict it counts as one path), with the bounds on one feature merged,
integer bounds printed as integers, ratios to three significant digits; then, on the training
cases again, "flavor not X" becomes "flavor Y" where that fits as well, each condition is
swapped for the single condition that fits best in its place where that fits better (the tree
chooses each split alone), and conditions that do not help are dropped. The held-out figures
are those of the printed rule (matches()), not of the tree.

sklearn and numpy are imported inside learn(): reading this module costs neither.
"""
from __future__ import annotations

import math
import zlib
from typing import Callable, NamedTuple

from pipeline.core.errors import ConfigError
from pipeline.outcome.result import CHANGED, ERROR, FAIL, PASS, TIMEOUT, XFAIL, XPASS
from pipeline.space.cases import VARIANTS
from pipeline.space.geometry import Geometry, macs

POSITIVE = (FAIL, ERROR, TIMEOUT, XFAIL, CHANGED)  # statuses of a bucket's cases
NEGATIVE = (PASS, XPASS)  # the passing cases a bucket is told apart from
MIN_TRAIN = 4  # positives to learn from
MIN_HELD_OUT = 1  # positives held out
MIN_NEGATIVES = 4  # passing cases
DEPTHS = (1, 2, 3)  # depths tried; the shallowest within DEPTH_SLACK of the best is kept
DEPTH_SLACK = 0.02  # of cross-validated balanced accuracy on the training cases
FOLDS = 5  # cross-validation folds at most (fewer when a class has fewer training cases)
SWAP_THRESHOLDS = 64  # bounds per feature a condition may be swapped for (_swap)
SWAP_ROUNDS = 4  # passes of _swap over the rule at most


class Feature(NamedTuple):
    name: str  # as printed in a rule
    of: Callable[[Geometry, str], float]  # (geometry, variant) -> value
    kind: str  # how a threshold prints: "int", "bool", "ratio" (3 significant digits), "onehot"
    words: tuple[str, str] = ("", "")  # a bool: (when true, when false)


def _axes(g: Geometry) -> tuple[tuple[int, ...], ...]:
    """(input, kernel, stride, window) on the (H, W) axes; Conv1D's H axis is a 1-wide window
    over a 1-high input (so its H ratios are 1, whatever khw says)."""
    if g.rank == 1:
        return (1, g.spatial[0]), (1, g.kernel[0]), (1, g.stride[0]), (1, g.window[0])
    return g.spatial, g.kernel, g.stride, g.window


def _out(g: Geometry) -> tuple[int, int]:
    return (1, g.out_spatial[0]) if g.rank == 1 else g.out_spatial


# The one table of features: (name, value of a (geometry, variant), how it prints).
FEATURES: tuple[Feature, ...] = (
    Feature("rank", lambda g, v: g.rank, "int"),
    Feature("h", lambda g, v: g.hw[0], "int"),
    Feature("w", lambda g, v: g.hw[1], "int"),
    Feature("kernel_h", lambda g, v: g.khw[0], "int"),
    Feature("kernel_w", lambda g, v: g.khw[1], "int"),
    Feature("stride_h", lambda g, v: g.shw[0], "int"),
    Feature("stride_w", lambda g, v: g.shw[1], "int"),
    Feature("dilation_h", lambda g, v: g.dhw[0], "int"),
    Feature("dilation_w", lambda g, v: g.dhw[1], "int"),
    Feature("c_in", lambda g, v: g.c_in, "int"),
    Feature("c_out", lambda g, v: g.c_out, "int"),
    Feature("groups", lambda g, v: g.groups, "int"),
    Feature("depthwise", lambda g, v: g.depthwise, "bool", ("depthwise", "not depthwise")),
    Feature("batch", lambda g, v: g.batch, "int"),
    Feature("padding_same", lambda g, v: g.padding == "same", "bool", ("padding same", "padding not same")),
    Feature("padding_explicit", lambda g, v: g.padding == "explicit", "bool",
            ("padding explicit", "padding not explicit")),
    Feature("activation", lambda g, v: g.activation != "none", "bool", ("fused activation", "no fused activation")),
    Feature("out_h", lambda g, v: _out(g)[0], "int"),
    Feature("out_w", lambda g, v: _out(g)[1], "int"),
    Feature("c_in_odd", lambda g, v: g.c_in % 2, "bool", ("c_in odd", "c_in even")),
    Feature("c_out_odd", lambda g, v: g.c_out % 2, "bool", ("c_out odd", "c_out even")),
    Feature("c_in_rem4", lambda g, v: g.c_in % 4, "int"),
    Feature("c_in_rem8", lambda g, v: g.c_in % 8, "int"),
    Feature("c_in_rem16", lambda g, v: g.c_in % 16, "int"),
    Feature("c_out_rem16", lambda g, v: g.c_out % 16, "int"),
    Feature("stride_h/kernel_h", lambda g, v: _axes(g)[2][0] / _axes(g)[1][0], "ratio"),
    Feature("stride_w/kernel_w", lambda g, v: _axes(g)[2][1] / _axes(g)[1][1], "ratio"),
    Feature("kernel_h/h", lambda g, v: _axes(g)[1][0] / _axes(g)[0][0], "ratio"),
    Feature("kernel_w/w", lambda g, v: _axes(g)[1][1] / _axes(g)[0][1], "ratio"),
    Feature("stride_gt_kernel", lambda g, v: any(s > k for s, k in zip(g.stride, g.kernel)), "bool",
            ("stride > kernel", "not stride > kernel")),
    Feature("kernel_eq_input", lambda g, v: any(w == n for w, n in zip(g.window, g.spatial)), "bool",
            ("window = input", "window != input")),
    Feature("reduction", lambda g, v: g.reduction, "int"),
    Feature("macs", lambda g, v: macs(g), "int"),
    *(Feature(f"flavor={variant}", lambda g, v, variant=variant: v == variant, "onehot") for variant in VARIANTS),
)
BY_NAME = {f.name: f for f in FEATURES}


def features(geometry: dict, backend: str, flavor: str) -> dict[str, float]:
    """The named numeric features of one case (FEATURES)."""
    g = Geometry.from_dict(geometry)
    variant = f"{backend}_{flavor}"
    return {f.name: float(f.of(g, variant)) for f in FEATURES}


# --- rules: conditions, matching and printing ---------------------------------------------------

_OPS = {"<=": lambda x, t: x <= t, ">": lambda x, t: x > t, ">=": lambda x, t: x >= t,
        "<": lambda x, t: x < t, "==": lambda x, t: x == t}


def matches(conditions: list, features: dict[str, float]) -> bool:
    """Whether a case's features satisfy the rule: any conjunction all of whose
    [feature, op, value] conditions hold."""
    return any(all(_OPS[op](features[name], value) for name, op, value in conjunction)
               for conjunction in conditions)


def _ratio(value: float) -> float:
    return float(f"{value:.3g}")


def _condition(name: str, above: bool, threshold: float) -> list:
    """One split of the tree (feature > threshold when `above`, else <=) as the printed
    condition: integers get integer bounds, booleans and one-hots == 1 or == 0."""
    kind = BY_NAME[name].kind
    if kind in ("bool", "onehot"):
        return [name, "==", 1 if above else 0]
    if kind == "int":
        bound = math.floor(threshold)
        return [name, ">=", bound + 1] if above else [name, "<=", bound]
    return [name, ">" if above else "<=", _ratio(threshold)]


def _merge(conjunction: list) -> list:
    """One lower and one upper bound per feature (the tightest), == where they meet."""
    out: dict[str, dict[str, list]] = {}
    for name, op, value in conjunction:
        slot = out.setdefault(name, {})
        key = "eq" if op == "==" else "low" if op in (">", ">=") else "high"
        old = slot.get(key)
        if old is None or (key == "low" and value >= old[2]) or (key == "high" and value <= old[2]):
            slot[key] = [name, op, value]
    merged = []
    for name, slot in out.items():
        if "eq" in slot:
            merged.append(slot["eq"])
        elif "low" in slot and "high" in slot and slot["low"][1] == ">=" and slot["low"][2] == slot["high"][2]:
            merged.append([name, "==", slot["low"][2]])
        else:
            merged += [slot[k] for k in ("low", "high") if k in slot]
    return merged


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def render_conjunction(conjunction: list) -> str:
    """Conditions in words: "stride_w >= 2 and c_in odd", "2 <= kernel_w <= 4"."""
    parts, seen = [], {}
    for name, op, value in conjunction:
        seen.setdefault(name, []).append((op, value))
    for name, bounds in seen.items():
        kind = BY_NAME[name].kind if name in BY_NAME else "ratio"
        if kind == "bool":
            parts.append(BY_NAME[name].words[0 if bounds[0][1] else 1])
        elif kind == "onehot":
            parts.append(f"flavor {'' if bounds[0][1] else 'not '}{name.split('=', 1)[1]}")
        elif len(bounds) == 2:
            (lop, low), (hop, high) = sorted(bounds, key=lambda b: b[0] not in (">", ">="))
            parts.append(f"{_number(low)} {'<=' if lop == '>=' else '<'} {name} {hop} {_number(high)}")
        else:
            op, value = bounds[0]
            parts.append(f"{name} {'=' if op == '==' else op} {_number(value)}")
    return " and ".join(parts) or "any geometry"


def render(conditions: list) -> str:
    """The rule in words: its conjunctions joined by "or"."""
    if len(conditions) == 1:
        return render_conjunction(conditions[0])
    texts = [render_conjunction(c) for c in conditions]
    return " or ".join(f"({t})" if len(c) > 1 else t for t, c in zip(texts, conditions))


def describe(region: dict) -> str:
    """One line: the rule and its held-out figures, or why there is none."""
    status = region.get("status")
    if status != "learned":
        return f"{status}: {region.get('why', '')}"
    held = region["held_out"]
    return (f"{region['rule']} (held-out accuracy {held['accuracy']:.2f} on {held['cases']} cases, "
            f"recall {held['recall']:.2f})")


# --- learning -----------------------------------------------------------------------------------

def _held_out(names: list[str]) -> set[str]:
    """Every third name from the second on, in the order of their crc32: a third held out."""
    ordered = sorted(set(names), key=lambda n: (zlib.crc32(n.encode()), n))
    return {n for i, n in enumerate(ordered) if i % 3 == 1}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def learn(entries: list[dict], signature) -> dict[str, dict]:
    """bucket -> its region (see the module's docstring), for every bucket of the failing
    entries; `signature` maps an entry to its bucket."""
    rows: dict[tuple, tuple[dict, dict]] = {}
    for e in entries:
        key = (e.get("case"), e.get("target"))
        if e.get("status") not in POSITIVE + NEGATIVE or not e.get("geometry") or key in rows:
            continue
        try:
            rows[key] = (e, features(e["geometry"], e["backend"], e["flavor"]))
        except (ConfigError, KeyError, TypeError, ValueError, ZeroDivisionError):
            continue  # not a geometry this version reads
    negatives = [(e["case"], x) for e, x in rows.values() if e["status"] in NEGATIVE]
    groups: dict[str, list] = {}
    for e, x in rows.values():
        if e["status"] in POSITIVE:
            groups.setdefault(signature(e), []).append((e["case"], x))
    held = _held_out([name for name, _ in negatives])
    split_negatives = ([x for n, x in negatives if n not in held], [x for n, x in negatives if n in held])
    return {bucket: _region(members, split_negatives) for bucket, members in groups.items()}


def _region(members: list[tuple[str, dict]], negatives: tuple[list, list]) -> dict:
    held = _held_out([name for name, _ in members])
    train_pos = [x for n, x in members if n not in held]
    held_pos = [x for n, x in members if n in held]
    train_neg, held_neg = negatives
    count = {"positives": len(members), "negatives": len(train_neg) + len(held_neg)}
    if len(train_pos) < MIN_TRAIN or len(held_pos) < MIN_HELD_OUT or count["negatives"] < MIN_NEGATIVES:
        why = (f"{_plural(len(members), 'case')} in this bucket ({len(train_pos)} to learn from, {len(held_pos)} "
               f"held out) and {_plural(count['negatives'], 'passing case')}; a rule needs at least {MIN_TRAIN} "
               f"to learn from, {MIN_HELD_OUT} held out and {MIN_NEGATIVES} passing cases")
        return {"status": "too thin", "why": why, **count}
    import numpy as np

    names = [f.name for f in FEATURES]
    X = np.array([[x[n] for n in names] for x in train_pos + train_neg])
    y = np.array([1] * len(train_pos) + [0] * len(train_neg))
    depth = _depth(X, y)
    conditions = _simplify(_rule(_tree(depth).fit(X, y), names), X, y, names)
    if not conditions:
        return {"status": "no rule", "why": "no path of the tree over the geometry features predicts this bucket",
                **count}
    predicted = [matches(conditions, x) for x in held_pos + held_neg]
    truth = [True] * len(held_pos) + [False] * len(held_neg)
    tp = sum(p and t for p, t in zip(predicted, truth))
    fp = sum(p and not t for p, t in zip(predicted, truth))
    tn = sum(not p and not t for p, t in zip(predicted, truth))
    recall, specificity = tp / len(held_pos), (tn / len(held_neg) if held_neg else 1.0)
    return {"status": "learned", "rule": render(conditions), "conditions": conditions, "depth": depth,
            "held_out": {"cases": len(truth), "positives": len(held_pos),
                         "accuracy": round((tp + tn) / len(truth), 4), "recall": round(recall, 4),
                         "precision": round(tp / (tp + fp), 4) if tp + fp else None,
                         "balanced_accuracy": round((recall + specificity) / 2, 4)},
            "train": {"cases": len(y), "positives": len(train_pos)}, **count}


def _tree(depth: int):
    from sklearn.tree import DecisionTreeClassifier

    return DecisionTreeClassifier(max_depth=depth, min_samples_leaf=2, class_weight="balanced", random_state=0)


def _balanced(predicted, y) -> float:
    """Balanced accuracy: the mean of the recall of each class."""
    return float(((predicted[y == 1] == 1).mean() + (predicted[y == 0] == 0).mean()) / 2)


def _depth(X, y) -> int:
    """The shallowest depth whose cross-validated balanced accuracy on the training cases is
    within DEPTH_SLACK of the best depth's."""
    from sklearn.model_selection import StratifiedKFold

    folds = min(FOLDS, int(y.sum()), int((y == 0).sum()))
    if folds < 2:
        return DEPTHS[-1]
    scores = {d: 0.0 for d in DEPTHS}
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=0).split(X, y):
        for d in DEPTHS:
            scores[d] += _balanced(_tree(d).fit(X[train], y[train]).predict(X[test]), y[test]) / folds
    best = max(scores.values())
    return next(d for d in DEPTHS if scores[d] >= best - DEPTH_SLACK)


def _rule(tree, names: list[str]) -> list[list]:
    """The tree's paths to leaves that predict the bucket, each a merged conjunction."""
    t = tree.tree_
    positive = list(tree.classes_).index(1)
    leaf = lambda n: t.children_left[n] == -1  # noqa: E731
    predicts = lambda n: int(t.value[n][0].argmax()) == positive  # noqa: E731

    def everywhere(n: int) -> bool:
        return predicts(n) if leaf(n) else everywhere(t.children_left[n]) and everywhere(t.children_right[n])

    def paths(n: int) -> list[list]:
        if everywhere(n):
            return [[]]
        if leaf(n):
            return []
        name, threshold = names[t.feature[n]], float(t.threshold[n])
        return ([[_condition(name, False, threshold), *p] for p in paths(t.children_left[n])]
                + [[_condition(name, True, threshold), *p] for p in paths(t.children_right[n])])

    return [_merge(p) for p in paths(0)]


def _candidates(column: dict, names: list[str]) -> list[list]:
    """Every single condition a split of the training cases could print: per feature, a bound
    between each two neighbouring values it takes (at most SWAP_THRESHOLDS of them, evenly
    spaced), both ways; a bool or one-hot that varies, == 1 and == 0."""
    import numpy as np

    out = []
    for name in names:
        values = np.unique(column[name])
        if len(values) < 2:
            continue
        mids = (values[:-1] + values[1:]) / 2
        if len(mids) > SWAP_THRESHOLDS:
            mids = mids[np.linspace(0, len(mids) - 1, SWAP_THRESHOLDS).round().astype(int)]
        out += [_condition(name, above, float(t)) for t in mids for above in (False, True)]
    return [list(c) for c in dict.fromkeys(tuple(c) for c in out)]  # once each, in order


def _hit(conjunction: list, column: dict, rows: int):
    """Which of the `rows` training cases (their feature `column`s) satisfy every condition."""
    import numpy as np

    part = np.ones(rows, dtype=bool)
    for name, op, value in conjunction:
        part &= _OPS[op](column[name], value)
    return part


def _swap(rule: list[list], column: dict, y, names: list[str], score, best: float) -> tuple[list[list], float]:
    """Each condition in turn replaced by the single condition (_candidates) that scores best in
    its place, where that scores better, until none does: the greedy tree picks its first split
    alone, and a split that looked best there (say c_in <= 1) may stand where a pair of
    conditions (c_in odd, and a stride past the kernel) tells the bucket apart exactly."""
    import numpy as np

    candidates = _candidates(column, names)
    if not candidates:
        return rule, best
    hits = np.array([_OPS[op](column[name], value) for name, op, value in candidates], dtype=bool)
    positive, negative = y == 1, y == 0
    for _ in range(SWAP_ROUNDS):
        improved = False
        for i in range(len(rule)):
            for j in range(len(rule[i])):
                others = np.zeros(len(y), dtype=bool)
                for k, conjunction in enumerate(rule):
                    if k != i:
                        others |= _hit(conjunction, column, len(y))
                trial = others | (_hit(rule[i][:j] + rule[i][j + 1:], column, len(y)) & hits)
                scores = ((trial & positive).sum(axis=1) / max(positive.sum(), 1)
                          + (~trial & negative).sum(axis=1) / max(negative.sum(), 1)) / 2
                k = int(scores.argmax())
                if scores[k] > best + 1e-9:
                    rule = rule[:i] + [_merge(rule[i][:j] + [candidates[k]] + rule[i][j + 1:])] + rule[i + 1:]
                    best, improved = score(rule), True
                    break  # rule[i] changed: its conditions are walked again next round
        if not improved:
            break
    return rule, best


def _simplify(conditions: list[list], X, y, names: list[str]) -> list[list]:
    """Shorter and sharper, on the training cases: "flavor not X" conditions become "flavor Y"
    where that scores as well; each condition is swapped for a better one (_swap); then each
    condition (and conjunction) whose removal scores as well goes."""
    import numpy as np

    column = {n: X[:, i] for i, n in enumerate(names)}

    def score(rule: list[list]) -> float:
        hit = np.zeros(len(y), dtype=bool)
        for conjunction in rule:
            hit |= _hit(conjunction, column, len(y))
        return _balanced(hit.astype(int), y)

    rule = [list(c) for c in conditions]
    best = score(rule)
    present = [n for n in names if n.startswith("flavor=") and column[n].any()]
    for i, conjunction in enumerate(rule):
        kept = [c for c in conjunction if not (c[0].startswith("flavor=") and c[2] == 0)]
        if len(kept) == len(conjunction):
            continue
        for flavor in present:
            candidate = rule[:i] + [kept + [[flavor, "==", 1]]] + rule[i + 1:]
            if score(candidate) >= best:
                rule, best = candidate, score(candidate)
                break
    rule, best = _swap(rule, column, y, names, score, best)
    for i in range(len(rule)):
        for condition in reversed(list(rule[i])):
            candidate = rule[:i] + [[c for c in rule[i] if c is not condition]] + rule[i + 1:]
            if score(candidate) >= best:
                rule, best = candidate, score(candidate)
    for conjunction in reversed(list(rule)):
        candidate = [c for c in rule if c is not conjunction]
        if candidate and score(candidate) >= best:
            rule, best = candidate, score(candidate)
    unique = []
    for conjunction in rule:
        if conjunction not in unique:
            unique.append(conjunction)
    return unique
