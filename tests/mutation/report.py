"""Survival rate per module of a `mutmut run` (``make mutate``), and the surviving mutants.

Reads mutmut's per-file results under ``mutants/`` and prints one table row per mutated
module. A mutant whose function no selected test runs ("no tests") counts as surviving:
no test would notice it either.

    .venv/bin/python tests/mutation/report.py [--seconds N] [--show]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

TARGET = 0.10
"""The bar docs/testing.md sets: at most 10% surviving mutants in the modules that decide."""
SURVIVING = ("survived", "no tests")


def results(root: Path) -> dict[str, dict[str, str]]:
    """Module path -> mutant name -> status."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        module = str(meta.relative_to(root / "mutants")).removesuffix(".meta")
        out[module] = {name: status_by_exit_code[code] for name, code in codes.items()}
    return out


def table(by_module: dict[str, dict[str, str]], seconds: float | None) -> tuple[str, float]:
    rows = ["| module | mutants | killed | timeout | surviving | survival |", "|---|---:|---:|---:|---:|---:|"]
    total = Counter()
    for module, statuses in by_module.items():
        counts = Counter(statuses.values())
        surviving = sum(counts[s] for s in SURVIVING)
        total.update({"mutants": len(statuses), "killed": counts["killed"], "timeout": counts["timeout"],
                      "surviving": surviving})
        rows.append(f"| `{module}` | {len(statuses)} | {counts['killed']} | {counts['timeout']} | {surviving} | "
                    f"{surviving / max(len(statuses), 1):.1%} |")
    rate = total["surviving"] / max(total["mutants"], 1)
    rows.append(f"| **all** | {total['mutants']} | {total['killed']} | {total['timeout']} | {total['surviving']} | "
                f"**{rate:.1%}** |")
    if seconds is not None:
        rows.append(f"\nRun time: {seconds / 60:.1f} min on this machine (`make mutate`).")
    return "\n".join(rows), rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, help="the run's wall time, to print beside the table")
    parser.add_argument("--show", action="store_true", help="print each surviving mutant's diff")
    args = parser.parse_args()
    root = Path.cwd()
    by_module = results(root)
    if not by_module:
        print("no mutmut results under mutants/ (run `make mutate`)", file=sys.stderr)
        return 1
    text, rate = table(by_module, args.seconds)
    print(text)
    survivors = [(m, name, s) for m, statuses in by_module.items() for name, s in statuses.items() if s in SURVIVING]
    print(f"\n{len(survivors)} surviving mutants:")
    for _, name, status in survivors:
        print(f"  {name} ({status})")
        if args.show:
            diff = subprocess.run([Path(sys.executable).with_name("mutmut"), "show", name], capture_output=True,
                                  text=True).stdout
            print("    " + "\n    ".join(diff.strip().splitlines()))
    print(f"\nsurvival {rate:.1%} against a target of at most {TARGET:.0%}: {'met' if rate <= TARGET else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
