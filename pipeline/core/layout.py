"""The build folder's layout, defined once: every path under CONV_SWEEP_BUILD_DIR is named here.

    <build>/.doit.db                      doit's record of the tasks (and .doit.db.lock while a run holds it)
    <build>/cases/<case>/                 the case's target-independent files: model, MLIR, input
    <build>/cases/<case>/<target>/        the case on one target: module, outputs, result.json, logs, repro.sh
    <build>/report/report.html            every target's cases in one table (several targets)
    <build>/report/<target>/              one target's report, results.json, junit.xml, observed costs
    <build>/shrink/<target>/<case>/       `doit shrink`'s attempts and its shrink.json
    <build>/bugreports/<target>/          `doit bugreport`'s reports
    <build>/compare/                      `doit compare`'s of two targets of this folder
    <build>/bisect/<target>/              `doit bisect`'s runs, one folder per version

A target with a compiler version (`torq@2.2.1`) has the folder `torq-2.2.1`: IREE's run tools
read '@' in a module's path as a separator.

Outside it, the user's cache folder (`user_cache`): the store of stage outputs, the installed
toolchains, and the digests of code and tools, shared by every build folder of the user.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CASES = "cases"
REPORTS = "report"
DB = ".doit.db"
SHRINK = "shrink"
BUGREPORTS = "bugreports"
COMPARE = "compare"
BISECT = "bisect"
HUNT = "hunt"


def user_cache(environ=None) -> Path:
    """conv-sweep's folder in the user's cache: $XDG_CACHE_HOME/conv-sweep, else
    ~/.cache/conv-sweep; read from `environ` (default: the process's) when asked, never at import."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")) / "conv-sweep"


def folder(target: str) -> str:
    """A target's folder name: its name, with a version's '@' as '-'."""
    return target.replace("@", "-")


@dataclass(frozen=True)
class Layout:
    root: Path  # the build folder

    @property
    def db(self) -> Path:
        return self.root / DB

    @property
    def cases(self) -> Path:
        return self.root / CASES

    @property
    def reports(self) -> Path:
        return self.root / REPORTS

    @property
    def hunt(self) -> Path:
        return self.root / HUNT

    @property
    def cleaned(self) -> tuple[Path, ...]:
        """What `doit clean` of a whole sweep removes: its cases and reports, and what the triage
        commands made of them (shrinks, bug reports, comparisons, bisections, hunts), which a
        cleaned folder no longer backs. The DB stays, as doit's own clean leaves it."""
        return (self.cases, self.reports, self.root / SHRINK, self.root / BUGREPORTS, self.compare_dir(),
                self.root / BISECT, self.hunt)

    def model_dir(self, case: str) -> Path:
        return self.cases / case

    def case_dir(self, case: str, target: str) -> Path:
        return self.cases / case / folder(target)

    def report_dir(self, target: str) -> Path:
        return self.reports / folder(target)

    def shrink_dir(self, target: str) -> Path:
        return self.root / SHRINK / folder(target)

    def bugreports(self, target: str) -> Path:
        return self.root / BUGREPORTS / folder(target)

    def compare_dir(self) -> Path:
        return self.root / COMPARE

    def bisect_dir(self, target: str) -> Path:
        return self.root / BISECT / folder(target)

    def report_files(self) -> list[Path]:
        """Every target's results.json found in this build folder."""
        return sorted(self.reports.glob("*/results.json"))
