"""``lookuplinear report``: the main job: the equivalence shown, the efficiency measured, and
training demonstrated, as one self-contained HTML page and a Markdown summary."""

from __future__ import annotations

import argparse
import html
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._args import output_dir, positive_int

if TYPE_CHECKING:
    from ..report.training import BigVocabRun, SideBySide

__all__ = ["add_parser", "run"]

BIG_VOCAB = 20_000_000
#: the fewest --big-steps the large-vocabulary check reads: the mean loss of the first steps
#: against that of the last, 5 or more each
MIN_BIG_STEPS = 10
#: the files that state the report's verdict, written last
VERDICTS = ("report.html", "report.md")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "report",
        help="explain + bench --quick + training demo, as one HTML page and a Markdown summary",
        description=(
            "The equivalence worked through on small examples, with pictures, the quick "
            "benchmark matrix, and a training demonstration (the same loss curve for "
            "LookupLinear and nn.Linear on one-hot input; then training on a vocabulary the "
            "dense path cannot hold), written to DIR/report.html (self-contained) and "
            "DIR/report.md. No downloads."
        ),
    )
    p.add_argument("--out", type=Path, default=Path("out/report"), metavar="DIR",
                   help="output folder (default out/report)")
    p.add_argument("--bench-in-features", type=positive_int, nargs="+", default=None,
                   metavar="N", help="override the bench in_features grid (for a smaller run)")
    p.add_argument("--train-in-features", type=positive_int, nargs="*", default=None,
                   metavar="N", help="override the bench train-step sizes")
    p.add_argument("--repeats", type=positive_int, default=None, metavar="R",
                   help="timed rounds per bench case (default 7)")
    p.add_argument("--big-vocab", type=positive_int, default=BIG_VOCAB, metavar="N",
                   help=f"in_features of the large-vocabulary training (default {BIG_VOCAB:,})")
    p.add_argument("--big-steps", type=_big_steps, default=300, metavar="S",
                   help=f"training steps of the large-vocabulary run (default 300, at least "
                   f"{MIN_BIG_STEPS})")
    return p


def _big_steps(text: str) -> int:
    """An argparse type: ``--big-steps``, at least :data:`MIN_BIG_STEPS`."""
    steps = positive_int(text)
    if steps < MIN_BIG_STEPS:
        raise argparse.ArgumentTypeError(
            f"expected at least {MIN_BIG_STEPS} steps (the check compares the mean loss of the "
            f"first steps with that of the last, {MIN_BIG_STEPS // 2} or more each), got "
            f"{text!r}; pass --big-steps {MIN_BIG_STEPS} or more")
    return steps


def _bench_args(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(
        quick=True, device="cpu", out=args.out / "bench", max_memory=None,
        in_features=args.bench_in_features, out_features=None, batch=None,
        train_in_features=args.train_in_features, repeats=args.repeats,
        _command_line=args._command_line,
    )


def _write(path: Path, text: str) -> None:
    """``path`` replaced by ``text`` in one step: a reader sees the old file or the new one."""
    from .._atomic import replacing

    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _failures(explain_ok: bool, same: SideBySide, failed: list[str], nothing: str | None,
              big: BigVocabRun) -> list[str]:
    """Each check that failed, with what it saw: the report's verdict rests on these."""
    out = []
    if not explain_ok:
        out.append("the worked examples: a step is not equivalent (its badge in report.html "
                   "says which)")
    if nothing:
        out.append(f"the benchmark: {nothing}")
    if failed:
        out.append(f"the benchmark: {len(failed)} case{'s' * (len(failed) != 1)} failed "
                   "(listed under the efficiency part, kept in bench/results.json)")
    if not same.ok:
        out.append("training side by side: the loss curves differ (largest difference "
                   f"{same.max_abs_diff:.3g})")
    out += [f"training on a large vocabulary: {f}" for f in big.failures()]
    return out


def _items_html(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"


def run(args: argparse.Namespace) -> int:
    from ..report.html import Section, markdown_table_html, render_html, steps_html, verdict
    from ..report.machine import format_machine, machine_info
    from ..report.memory import format_bytes
    from ..report.plots import plot_big_vocab, plot_side_by_side
    from ..report.summary import (
        failed_cases,
        headlines,
        nothing_measured,
        summary_table,
        train_table,
    )
    from ..report.training import train_big_vocab, train_side_by_side
    from ..report.walkthrough import custom_walkthrough, render_markdown, seed_walkthrough
    from .bench import bench
    from .explain import draw

    output_dir(args._parser, args.out, "--out")
    output_dir(args._parser, args.out / "bench", "--out")  # the bench's folder, before the work
    machine = machine_info()  # its load average is the one at the start
    start = time.perf_counter()
    out: Path = args.out
    # a verdict only beside the files it was drawn from: a rerun that stops early leaves none
    for name in VERDICTS:
        (out / name).unlink(missing_ok=True)

    print("1/3 explain: the equivalence, worked through on small examples")
    steps = seed_walkthrough()
    custom = custom_walkthrough()
    pictures = draw(custom, [2, 3, 1], out)
    _write(out / "walkthrough.md", render_markdown(steps))
    explain_ok = all(s.ok for s in steps + custom)

    print("2/3 bench --quick: the benchmark matrix")
    doc, results_path = bench(_bench_args(args))

    print("3/3 training: the same loss curve, then a vocabulary the dense path cannot hold")
    same = train_side_by_side()
    big = train_big_vocab(args.big_vocab, steps=args.big_steps)
    fig_same = plot_side_by_side(same, out / "training_same_curve.png")
    fig_big = plot_big_vocab(big, out / "training_big_vocab.png")

    elapsed = time.perf_counter() - start
    heads = headlines(doc)
    failed = failed_cases(doc)
    for line in failed:
        print(f"failed: {line}", file=sys.stderr)
    nothing = nothing_measured(doc, "Pass smaller --bench-in-features.")
    failures = _failures(explain_ok, same, failed, nothing, big)
    all_ok = not failures
    bench_problems = [*([nothing] if nothing else []),
                      *(f"Failed: {line}" for line in failed)]

    bench_dir = out / "bench"
    bench_figs = [
        (bench_dir / "time_vs_in_features.png",
         "Median time vs in_features (log-log), one line per method. The dense nn.Linear line "
         "grows with in_features and stops where its input no longer fits --max-memory."),
        (bench_dir / "memory_vs_in_features.png",
         "Memory a method needs beyond the table: its input plus the peak it allocates. "
         "Crosses: skipped cases at their estimate."),
        (bench_dir / "crossover.png",
         "nn.Linear time / lookup time: above 1 the lookup is faster."),
    ]
    if (bench_dir / "train_step.png").exists():
        bench_figs.append((bench_dir / "train_step.png",
                           "One training step per optimizer: sparse lookup vs dense "
                           "EmbeddingBag gradients."))
    same_text = (
        f"LookupLinear({same.in_features}, {same.out_features}, init='linear') and "
        f"nn.Linear({same.in_features}, {same.out_features}) under the same seed, "
        f"{len(same.loss_lookup)} steps of {same.optimizer} on the same batches of "
        f"{same.batch} indices (one-hot rows for nn.Linear): largest loss difference "
        f"{same.max_abs_diff:.3g}, largest weight difference after training "
        f"{same.weight_max_abs_diff:.3g} (tolerance {same.atol:g} + {same.rtol:g} x |loss|)."
    )
    peak = format_bytes(big.peak_bytes) if big.peak_bytes is not None else "unknown"
    ram = format_bytes(big.memory_bytes) if big.memory_bytes else "unknown"
    big_text = (
        f"LookupLinear({big.in_features:,}, {big.out_features}, sparse=True) with "
        f"{big.optimizer}: {len(big.losses)} steps of {big.batch} bags x {big.bag_size} Zipf "
        f"indices in {big.seconds:.1f} s; {big.loss_text()}, held-out accuracy "
        f"{big.accuracy_before:.1%} -> {big.accuracy_after:.1%}. The table holds "
        f"{format_bytes(big.table_bytes)}; training allocated {peak} more at its peak. "
        f"nn.Linear would need the dense multi-hot batch: {format_bytes(big.dense_batch_bytes)} "
        f"per step, on a machine with {ram} of RAM."
    )
    big_failures = big.failures()
    sections = [
        Section(
            "The equivalence, worked through on small examples",
            [f"<p>nn.Embedding(idx) is nn.Linear on one_hot(idx); a bag of indices summed "
             f"through an embedding is nn.Linear on the multi-hot / CSR row. Verdict: "
             f"{verdict(explain_ok)}</p>", steps_html(steps)],
            [(p, c) for p, c in zip(pictures, (
                "The lookup: the rows of the table that idx names.",
                "The same result as a product: the 1 in row 0 of one_hot(idx) selects one row "
                "of W.",
                "A weighted CSR row: its stored values times the rows they name, summed.",
            ), strict=True)],
            anchor="equivalence",
            figures_first=True,
        ),
        Section(
            "The efficiency: bench --quick",
            ["<p>" + html.escape(format_machine(doc["machine"])) + f". Matrix ran in "
             f"{doc['settings']['elapsed_s']:.0f} s; medians of "
             f"{doc['settings']['grid']['repeats']} interleaved rounds after a warm-up, on a "
             "machine that may be shared (read ratios, not absolute times; each time shows the "
             "spread of its rounds, and a case whose rounds disagree is measured again or "
             "marked 'machine too busy').</p>",
             _items_html(heads),
             _items_html(bench_problems) if bench_problems else "",
             markdown_table_html(summary_table(doc, "forward")),
             markdown_table_html(summary_table(doc, "forward+backward")),
             markdown_table_html(train_table(doc)),
             f"<p>All rows: <code>{html.escape(str(results_path))}</code> (schema in "
             "docs/report.md) and results.csv next to it.</p>"],
            bench_figs,
            anchor="efficiency",
        ),
        Section(
            "Training",
            [f"<h3>The same loss curve, step for step {verdict(same.ok, 'SAME', 'DIFFERENT')}"
             f"</h3><p>{html.escape(same_text)}</p>",
             f"<h3>A vocabulary the dense path cannot hold "
             f"{verdict(not big_failures, 'LEARNS', 'NO')}</h3><p>{html.escape(big_text)}</p>",
             _items_html([f"Failed: {f}" for f in big_failures]) if big_failures else ""],
            [(fig_same, "LookupLinear and nn.Linear on one-hot input: one curve."),
             (fig_big, f"Training on {big.in_features:,} rows with sparse gradients.")],
            anchor="training",
        ),
    ]
    subtitle = (f"{verdict(all_ok, 'ALL CHECKS PASSED', 'SOME CHECKS FAILED')} &nbsp; "
                f"{html.escape(format_machine(machine))}; generated "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in {elapsed:.0f} s by "
                "<code>lookuplinear report</code>")
    key_points = [
        f"nn.Embedding / a bag of indices through LookupLinear equals nn.Linear on the one-hot / "
        f"multi-hot rows: {'every worked example checks out' if explain_ok else 'A CHECK FAILED'}"
        " (forward and gradients, against float64 nn.Linear).",
        *[h for h in heads if "forward+backward" in h or "skipped" in h],
        f"Training: same loss curve as nn.Linear on one-hot input (largest difference "
        f"{same.max_abs_diff:.2g}); {big.in_features:,} rows trained with sparse gradients in "
        f"{big.seconds:.0f} s, held-out accuracy {big.accuracy_before:.0%} -> "
        f"{big.accuracy_after:.0%}, where one dense batch would need "
        f"{format_bytes(big.dense_batch_bytes)}.",
    ]
    intro = _items_html(key_points)
    if failures:
        intro = (f"<p>{verdict(False, '', 'FAILED')} checks:</p>"
                 + _items_html(failures) + intro)
    page = render_html("An embedding layer is a linear layer", subtitle, sections, intro)
    html_path = out / "report.html"
    _write(html_path, page)

    md = [
        "# lookuplinear report",
        "",
        f"{'All checks passed' if all_ok else 'SOME CHECKS FAILED'}. Machine: "
        f"{format_machine(machine)}. Generated in {elapsed:.0f} s by `lookuplinear report`.",
        "",
        *[f"- FAILED: {f}" for f in failures],
        *([""] if failures else []),
        "## Equivalence",
        "",
        f"- Worked examples: {'equivalent' if explain_ok else 'MISMATCH'} "
        f"({len(steps)} steps; full text in walkthrough.md)",
        f"- Training side by side: {'same loss curve' if same.ok else 'DIFFERENT'}: "
        f"{same_text}",
        "",
        "## Efficiency (bench --quick)",
        "",
        *[f"- {h}" for h in heads],
        *[f"- {p}" for p in bench_problems],
        "",
        summary_table(doc, "forward+backward"),
        "",
        "![time](bench/time_vs_in_features.png)",
        "![crossover](bench/crossover.png)",
        "",
        "## Training on a large vocabulary",
        "",
        big_text,
        "",
        *[f"- FAILED: {f}" for f in big_failures],
        *([""] if big_failures else []),
        "![training](training_big_vocab.png)",
        "",
    ]
    md_path = out / "report.md"
    _write(md_path, "\n".join(md))
    print()
    print(f"report: {'all checks passed' if all_ok else 'SOME CHECKS FAILED'} in {elapsed:.0f} s"
          + ":" * bool(failures))
    for f in failures:
        print(f"- {f}")
    print(f"Markdown summary written to {md_path}")
    print(f"report written to {html_path.resolve()}")
    return 0 if all_ok else 1
