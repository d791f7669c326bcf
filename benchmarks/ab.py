"""One benchmark, two versions of lookuplinear, side by side in one run.

Runs a benchmark script of this folder in rounds, each round once against an older revision of
the code (its sources and benchmarks, built from git into a temporary folder) and once against
this checkout, in a shuffled order, and prints every timing of the script's JSON output as the
median over rounds for each version and their ratio (new / old: below 1 is faster). Both sides
run on the same machine, in the same minutes, with the same arguments, so the ratio holds where
absolute times drift.

    python benchmarks/ab.py --old-rev main~5 --rounds 5 -- benchmarks/bench_layer.py --repeats 7

The script must take ``--json PATH`` (``bench_text.py`` takes ``--out DIR``, and
``bench_embedding_bag.py`` prints its JSON: both are handled). A timing is a number in the JSON
under a key that names a unit of time (``..._s``, ``..._ms``, ``seconds``, ``time``); the run's
arguments and machine, ratios and counts are left out. ``--tables`` reads a script without
``--json`` from what it prints instead: every number of its Markdown tables in a column whose
header names a unit of time (``ms``, ``us``, ``s``), keyed by the table's header and the row's
other cells.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from lookuplinear.report.machine import format_machine, machine_info

ROOT = Path(__file__).resolve().parents[1]
TIME_WORDS = ("ms_", "us_", "seconds", "time", "step_s")
SETTINGS = ("args", "machine", "load_average_end", "settings", "config")
NOT_TIME = ("ratio", "speedup", "count", "accuracy", "p@1", "auc", "bytes")


def build(rev: str, into: Path) -> Path:
    """Extract ``rev``'s sources into ``into`` and build its C kernels there; return its src."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src", "benchmarks",
                              "setup.py", "pyproject.toml", "MANIFEST.in"],
                             check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=into,
                   check=True, capture_output=True)
    return into / "src"


def kept_build(rev: str, into: Path) -> Path:
    """``rev``'s build in ``into``: the one there if ``into/COMMIT`` names the same commit,
    else a new one (``into`` emptied first)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", f"{rev}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    stamp = into / "COMMIT"
    if stamp.is_file() and stamp.read_text().strip() == commit:
        return into / "src"
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    src = build(commit, into)
    stamp.write_text(commit + "\n")
    return src


def timings(node: object, path: str = "", under: tuple[str, ...] = ()) -> dict[str, float]:
    """Every number in a JSON tree whose key path names a unit of time (or passes through one of
    the keys ``under``: a script whose results are times without a unit in their keys)."""
    out: dict[str, float] = {}
    if isinstance(node, dict):
        for k, v in node.items():
            out.update(timings(v, f"{path}/{k}", under))
    elif isinstance(node, list) and node and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in node):
        out.update(timings(statistics.median(node), path, under))  # a time per round
    elif isinstance(node, list):
        for i, v in enumerate(node):
            label = v.get("name") or v.get("method") if isinstance(v, dict) else None
            out.update(timings(v, f"{path}/{label or i}", under))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        parts = path.lower().strip("/").split("/")
        if parts[0] in SETTINGS or any(w in parts[-1] for w in NOT_TIME) \
                or any(p.startswith(("rounds", "spread")) and p not in under for p in parts) \
                or parts[-1].isdigit():  # medians only, not each round's time
            return out
        if any(p.endswith(("_s", "_ms", "_us")) or any(w in p for w in TIME_WORDS)
               or p in under for p in parts):
            out[path] = float(node)
    return out


#: scripts whose ``--json`` is a flag: the JSON printed as their last line
PRINTS_JSON = ("bench_embedding_bag.py",)
#: a column header naming a unit of time ("C, ms", "first save s", "ms per step")
TIME_HEADER = re.compile(r"(^|[\s,(])(ms|us|µs|s|seconds)($|[\s,):])")
#: a cell's leading number ("1.23", "1,234", "0.53 (0.78x)")
NUMBER = re.compile(r"^[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?")


def table_timings(text: str) -> dict[str, float]:
    """Every number of the Markdown tables in ``text`` in a column whose header names a unit of
    time, keyed ``header/label/column``: the label the row's cells outside such columns that
    are not decimal numbers (a measurement beside the times, an accuracy, is not a label)."""
    out: dict[str, float] = {}
    rows = [[c.strip() for c in ln.strip()[1:-1].split("|")]
            if ln.strip().startswith("|") and ln.strip().endswith("|") and len(ln.strip()) > 1
            else None for ln in text.splitlines()]
    under_line = [r is not None and all(c and set(c) <= set("-: ") for c in r) for r in rows]
    header: list[str] | None = None
    for i, cells in enumerate(rows):
        if cells is None:
            header = None  # a table ends at the first line that is not a row
        elif i + 1 < len(rows) and under_line[i + 1]:
            header = cells  # a table's header: the row over its line of dashes
        elif header is not None and not under_line[i]:
            timed = [bool(TIME_HEADER.search(h.lower())) for h in header]
            label = " / ".join(c for c, t in zip(cells, timed, strict=False)
                               if not t and not re.fullmatch(r"[-+]?\d[\d,]*\.\d+x?", c))
            for h, c, t in zip(header, cells, timed, strict=False):
                found = NUMBER.match(c) if t else None
                if found:
                    key = f"{' | '.join(header)}/{label}/{h}"
                    out[key] = float(found.group().replace(",", ""))
    return out


def run_once(script: list[str], src: Path, workdir: Path, under: tuple[str, ...],
             tables: bool = False) -> dict[str, float]:
    """One run of ``script`` (that version's copy of it: its imports match its code); its
    timings from its JSON, or (``tables``) from the tables it prints."""
    root = src.parent
    script = [str(root / Path(script[0]).resolve().relative_to(ROOT)), *script[1:]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(src), *filter(None, [os.environ.get("PYTHONPATH")])]))  # the version first
    if tables:
        printed = subprocess.run([sys.executable, *script], env=env, check=True, cwd=root,
                                 stdout=subprocess.PIPE, text=True).stdout
        return table_timings(printed)
    if Path(script[0]).name in PRINTS_JSON:
        printed = subprocess.run([sys.executable, *script, "--json"], env=env, check=True,
                                 cwd=root, stdout=subprocess.PIPE, text=True).stdout
        return timings(json.loads(printed.strip().splitlines()[-1]), under=under)
    if Path(script[0]).name == "bench_text.py":
        cmd = [sys.executable, *script, "--out", str(workdir)]
        result = workdir / "results.json"
    else:
        result = workdir / "result.json"
        cmd = [sys.executable, *script, "--json", str(result)]
    subprocess.run(cmd, env=env, check=True, cwd=root, stdout=subprocess.DEVNULL)
    return timings(json.loads(result.read_text()), under=under)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old-rev", required=True, help="the git revision to compare against")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--old-build", metavar="DIR",
                   help="build the old revision here and keep it, or reuse the build there of "
                        "the same commit (several benchmarks against one revision build once)")
    p.add_argument("--times-under", nargs="*", default=[], metavar="KEY",
                   help="JSON keys whose numbers are times (e.g. results for bench_collection)")
    p.add_argument("--tables", action="store_true",
                   help="read the timings from the Markdown tables the script prints (a "
                        "script without --json)")
    p.add_argument("script", nargs=argparse.REMAINDER,
                   help="-- then the benchmark script and its arguments")
    args = p.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        p.error("name the benchmark script after --")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        old_src = kept_build(args.old_rev, Path(args.old_build)) if args.old_build else None
        if old_src is None:
            (Path(tmp) / "old").mkdir()
            old_src = build(args.old_rev, Path(tmp) / "old")
        sides = {"old": old_src, "new": ROOT / "src"}
        runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = list(sides)
            rng.shuffle(order)
            for side in order:
                work = Path(tmp) / f"{side}{r}"
                work.mkdir()
                runs[side].append(run_once(script, sides[side], work, tuple(args.times_under),
                                           args.tables))
            print(f"round {r + 1}/{args.rounds} done ({' then '.join(order)})", file=sys.stderr)
    print(f"{' '.join(script)}: {args.old_rev} (old) vs this checkout (new), "
          f"{args.rounds} interleaved rounds; {format_machine(machine_info())}")
    keys = [k for k in runs["new"][0] if all(k in run for run in runs["old"] + runs["new"])]
    ratios = []
    print(f"{'timing':60s} {'old':>10s} {'new':>10s} {'new/old':>8s}")
    for k in keys:
        old = statistics.median(run[k] for run in runs["old"])
        new = statistics.median(run[k] for run in runs["new"])
        if old > 0:
            ratios.append(new / old)
            print(f"{k[-60:]:60s} {old:10.4g} {new:10.4g} {new / old:8.3f}")
    if ratios:
        print(f"geometric mean of new/old over {len(ratios)} timings: "
              f"{statistics.geometric_mean(ratios):.3f}")


if __name__ == "__main__":
    main()
