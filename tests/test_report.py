"""The explain / bench / report subcommands on tiny sizes, the results schema, the HTML page."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from lookuplinear.cli import build_parser, main
from lookuplinear.cli._args import positive_int
from lookuplinear.report.bench import BenchResult, Grid, crossovers, run_matrix, to_json
from lookuplinear.report.methods import FORMS, make_input, methods_for
from lookuplinear.report.summary import BUSY, headlines, summary_table, train_table
from lookuplinear.report.training import train_side_by_side

DOCS = Path(__file__).resolve().parents[1] / "docs" / "report.md"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY_BENCH = ["--in-features", "100", "1000", "--out-features", "4", "--batch", "8",
              "--train-in-features", "100", "--repeats", "1"]


# --- explain -------------------------------------------------------------------------------


def test_explain_defaults_reproduce_the_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert "Verdict: all equivalent** (4 steps)" in out
    assert "0.3374" in out  # seed 001's first table entry


def test_explain_any_size_draws_three_pictures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["explain", "--in-features", "1000", "--out-features", "3",
                 "--indices", "7", "999", "7", "--seed", "5", "--png", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "Verdict: all equivalent** (2 steps)" in out
    pngs = sorted(tmp_path.glob("*.png"))
    assert [p.name for p in pngs] == [
        "explain_csr_sum.png", "explain_lookup.png", "explain_onehot_product.png"]
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in pngs)


def test_explain_index_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--in-features", "10", "--indices", "3", "10"]) == 2
    err = capsys.readouterr().err
    assert "[10]" in err and "[0, 10)" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "--in-features", "0"], "positive integer"),
        (["explain", "--indices", "x"], "integer index"),
        (["bench", "--max-memory", "-1"], "positive, finite number"),
        (["bench", "--max-memory", "inf"], "positive, finite number"),
        (["explain", "--seed", str(2**64)], "what torch.manual_seed takes"),
        (["explain", "--seed", "1.5"], "integer seed"),
        (["bench", "--device", "tpu"], "invalid choice"),
        (["report", "--big-vocab", "ten"], "positive integer"),
        (["report", "--repeats", "1.9e0"], "not a whole number"),
        (["bench", "--in-features", "2.5e0"], "not a whole number"),
        (["bench", "--batch", "1e99999"], "positive integer"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("text", "value"), [("32", 32), ("1e6", 10**6), ("2.5e3", 2500),
                                           ("1E2", 100), ("1e30", 10**30)])
def test_a_positive_integer_may_be_written_with_an_exponent(text: str, value: int) -> None:
    assert positive_int(text) == value


@pytest.mark.parametrize("command", ["explain", "bench", "report"])
def test_help_on_each_subcommand(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    assert f"usage: lookuplinear {command}" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["bench", "--quick", "--out"], ["report", "--out"],
                                  ["explain", "--png"]])
@pytest.mark.parametrize(("where", "message"), [("", "is a file; give a folder"),
                                                ("/sub", "is inside '")])
def test_an_output_folder_that_cannot_be_made_is_a_usage_error_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], where: str,
        message: str) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    with pytest.raises(SystemExit) as e:
        main([*argv, str(taken) + where])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert message in err and f"usage: lookuplinear {argv[0]}" in err
    assert "Traceback" not in err
    assert out == ""  # nothing computed or printed first


def test_a_report_output_folder_whose_bench_folder_is_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "bench").write_text("")
    with pytest.raises(SystemExit) as e:
        main(["report", "--out", str(tmp_path)])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert f"--out {str(tmp_path / 'bench')!r} is a file" in err
    assert out == ""  # nothing computed or printed first


def test_an_output_folder_is_made_with_its_parents(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a" / "b"
    assert main(["explain", "--png", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "explain_csr_sum.png", "explain_lookup.png", "explain_onehot_product.png"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_bench_cuda_without_a_gpu_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "cuda" in capsys.readouterr().err


# --- the methods compute the same thing -----------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_every_bench_method_equals_the_dense_path(form: str) -> None:
    x = make_input(form, "zipf", 50, 6, 4, seed=1)
    W = torch.randn(50, 3, dtype=torch.float32, requires_grad=True)
    ref = torch.from_numpy(x.toarray()) @ W.detach()  # nn.Linear on the dense rows
    for m in methods_for(form, x, W, "cpu"):
        if m.build is not None:
            m.build()
        got = m.run()
        got = torch.as_tensor(np.asarray(got.detach() if isinstance(got, torch.Tensor) else got))
        torch.testing.assert_close(got.float(), ref, atol=1e-5, rtol=1e-5, msg=m.name)


# --- bench and its schema -------------------------------------------------------------------


def _documented_fields() -> dict[str, str]:
    """The results.json row fields and types in docs/report.md's schema table."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### Result rows", 1)[1].split("\n### ", 1)[0]
    return dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", section, flags=re.M))


TYPES = {"str": str, "int": int, "float": float, "bool": bool, "list[float]": list}


def _check_row(row: dict, documented: dict[str, str]) -> None:
    assert set(row) == set(documented)
    for key, kind in documented.items():
        value = row[key]
        allowed = tuple(TYPES[k.strip()] for k in kind.replace(" or null", "").split(" or "))
        assert value is None if value is None else isinstance(value, allowed), (key, value)
        if value is None:
            assert "null" in kind, key
    assert row["status"] in ("ok", "skipped", "failed")
    if row["status"] == "ok":
        assert row["median_s"] > 0 and len(row["times_s"]) >= 1
    else:
        assert row["reason"]


@pytest.fixture(scope="module")
def tiny_bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("bench")
    return main(["bench", *TINY_BENCH, "--out", str(out)]), out


def test_bench_writes_results_csv_and_plots(tiny_bench: tuple[int, Path]) -> None:
    code, out = tiny_bench
    assert code == 0
    for name in ("results.json", "results.csv", "time_vs_in_features.png",
                 "memory_vs_in_features.png", "crossover.png", "train_step.png"):
        assert (out / name).is_file(), name
    lines = (out / "results.csv").read_text().splitlines()
    doc = json.loads((out / "results.json").read_text())
    assert len(lines) == len(doc["results"]) + 1
    # docs/report.md: the same rows as results.json without times_s
    assert lines[0].split(",") == [k for k in doc["results"][0] if k != "times_s"]


def test_results_json_follows_the_documented_schema(tiny_bench: tuple[int, Path]) -> None:
    documented = _documented_fields()
    assert set(documented) == set(BenchResult.__dataclass_fields__)
    doc = json.loads((tiny_bench[1] / "results.json").read_text())
    assert doc["schema_version"] == 2
    assert {"cpu_model", "cpu_count", "torch_threads", "torch"} <= set(doc["machine"])
    assert {"quick", "device", "max_memory_bytes", "grid", "elapsed_s"} <= set(doc["settings"])
    for row in doc["results"]:
        _check_row(row, documented)
    forms = {r["form"] for r in doc["results"]}
    phases = {r["phase"] for r in doc["results"]}
    assert forms == set(FORMS) and phases == {"forward", "forward+backward", "train"}
    assert {c["form"] for c in doc["crossovers"]} == set(FORMS)


def test_results_json_records_the_command_that_ran(tiny_bench: tuple[int, Path]) -> None:
    doc = json.loads((tiny_bench[1] / "results.json").read_text())
    assert doc["settings"]["command"] == "lookuplinear " + shlex.join(
        ["bench", *TINY_BENCH, "--out", str(tiny_bench[1])])


def test_bench_skips_what_does_not_fit_and_says_why(tmp_path: Path) -> None:
    # 0.000_1 GB = 100 kB: the dense 8 x 10_000 float input (320 kB) does not fit
    code = main(["bench", "--in-features", "10000", "--out-features", "2", "--batch", "8",
                 "--train-in-features", "--repeats", "1", "--max-memory", "0.0001",
                 "--out", str(tmp_path)])
    assert code == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    dense = [r for r in doc["results"] if r["method"] == "nn.Linear (dense input)"]
    assert dense and all(r["status"] == "skipped" for r in dense)
    assert all("over --max-memory" in r["reason"] for r in dense)
    assert any(r["status"] == "ok" and r["method"] == "LookupLinear" for r in doc["results"])


def test_bench_with_nothing_that_fits_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the 100_000 x 2 table (800 kB) is over 2 x --max-memory (200 kB): nothing can run
    code = main(["bench", "--in-features", "100000", "--out-features", "2", "--batch", "4",
                 "--train-in-features", "--repeats", "1", "--max-memory", "0.0001",
                 "--out", str(tmp_path)])
    assert code == 1
    assert "nothing was measured" in capsys.readouterr().err
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = [(r["method"], r["status"]) for r in doc["results"]]
    assert rows and set(rows) == {("*", "skipped")}


@pytest.mark.parametrize("size", [["--out-features", "1e12"], ["--out-features", "1e30"],
                                  ["--in-features", "1e30"]])
def test_explain_refuses_a_table_too_large_to_build(
    size: list[str], capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", *size]) == 2
    err = capsys.readouterr().err
    assert "the table would have" in err and "Traceback" not in err


def test_explain_takes_a_negative_seed_as_torch_does(capsys: pytest.CaptureFixture[str]) -> None:
    # torch.manual_seed reads -1 as 2**64 - 1: the same table, indices and values
    assert main(["explain", "--in-features", "50", "--seed", "-1"]) == 0
    negative = capsys.readouterr().out
    assert main(["explain", "--in-features", "50", "--seed", str(2**64 - 1)]) == 0
    assert capsys.readouterr().out.replace(str(2**64 - 1), "-1") == negative


def test_explain_refuses_a_one_hot_matrix_too_large_to_print(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", "--in-features", "1e7", "--indices", "1", "2", "3"]) == 2
    assert "one-hot matrix would have 3 x 10000000 entries" in capsys.readouterr().err


# --- noise: a stand-in clock, no timed assertions -------------------------------------------


class StandInClock:
    """A clock whose every timed call lasts what ``duration(call)`` says, not what it took.

    ``_timed_rounds`` reads the clock before and after each call: odd readings end a call.
    """

    def __init__(self, duration: Callable[[int], float]) -> None:
        self.now, self.reads, self.duration = 0.0, 0, duration

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.duration(self.reads // 2 - 1)
        return self.now


NOISE_GRID = Grid((100, 1_000), (4,), (8,), (("bags", "uniform"),), bag_size=3, repeats=5,
                  train_in_features=(100,))


def _bench(clock: StandInClock, others: float | None = None) -> dict:
    """The noise grid timed by ``clock``, other processes using ``others`` of the CPUs."""
    state = [0, 0, 0]

    def ticks() -> tuple[int, int, int] | None:
        if others is None:
            return None
        state[0] += 1000
        state[1] += int(1000 * (1 - others) / 2)
        state[2] += int(1000 * (1 - others) / 2)
        return state[0], state[1], state[2]

    rows = run_matrix(NOISE_GRID, progress=False, clock=clock, ticks=ticks)
    return to_json(rows, machine={}, settings={})


def test_a_quiet_machine_is_measured_once_and_headlines_match_the_table() -> None:
    doc = _bench(StandInClock(lambda call: 1e-3))
    timed = [r for r in doc["results"] if r["status"] == "ok"]
    assert timed and all(r["attempts"] == 1 and not r["noisy"] for r in timed)
    assert all(r["spread"] == 1.0 for r in timed)
    heads = headlines(doc)
    assert not any(BUSY in h for h in heads)
    # every call lasted 1 ms: every ratio is 1x, so no "faster from" conclusion is drawn
    bags = [h for h in heads if h.startswith("bags, forward+backward")]
    assert bags and "1x nn.Linear" in bags[0] and "faster from" not in bags[0]
    table = summary_table(doc, "forward+backward")
    assert "| 1x |" in table and BUSY not in table


def test_rounds_that_disagree_once_are_measured_again() -> None:
    # the first 30 calls fall in the first case's first attempt (its warm-up and rounds 1-4)
    doc = _bench(StandInClock(lambda call: 1e-3 * (2 ** (call % 11) if call < 30 else 1)))
    timed = [r for r in doc["results"] if r["status"] == "ok"]
    assert max(r["attempts"] for r in timed) == 2  # the first case, measured again
    assert not any(r["noisy"] for r in timed)


def test_a_busy_machine_gives_no_headline_from_its_numbers() -> None:
    # a call lasts 2 ** (call % 11) ms: a method's rounds are 5 of 11 different powers of two
    doc = _bench(StandInClock(lambda call: 1e-3 * 2 ** (call % 11)))
    timed = [r for r in doc["results"] if r["status"] == "ok"]
    assert timed and all(r["noisy"] for r in timed)
    assert all(r["attempts"] == NOISE_GRID.retries + 1 for r in timed)
    heads = headlines(doc)
    assert not any("faster from" in h or "nn.Linear at" in h for h in heads)
    assert any(h.startswith("bags, forward:") and BUSY in h for h in heads)
    assert any(f"{len(timed)} of {len(timed)} measurements" in h for h in heads)
    assert BUSY in summary_table(doc, "forward") and BUSY in train_table(doc)
    assert all(not c["speedup_by_in_features"] for c in doc["crossovers"])


def test_a_steady_load_of_other_processes_gives_no_headline() -> None:
    # every round alike (a steady load slows all of them), but others used half the machine
    doc = _bench(StandInClock(lambda call: 1e-3), others=0.5)
    timed = [r for r in doc["results"] if r["status"] == "ok"]
    assert timed and all(r["noisy"] and r["others_cpu"] == 0.5 for r in timed)
    heads = headlines(doc)
    assert not any("faster from" in h or "nn.Linear at" in h for h in heads)
    assert "other processes used 50% of the CPUs" in train_table(doc)
    quiet = _bench(StandInClock(lambda call: 1e-3), others=0.0)
    assert not any(r["noisy"] for r in quiet["results"])


def test_a_conclusion_needs_the_whole_range_of_the_rounds() -> None:
    doc = _bench(StandInClock(lambda call: 1e-3))
    rows = doc["results"]

    def set_times(method: str, n: int, times: list[float]) -> None:
        for r in rows:
            if r["method"] == method and r["in_features"] == n and r["phase"] == "forward":
                r["times_s"], r["median_s"] = times, sorted(times)[len(times) // 2]

    # nn.Linear twice as slow by the medians, but its rounds overlap the lookup's at 100
    set_times("nn.Linear (dense input)", 100, [2.0, 2.0, 2.0, 0.5, 0.5])
    set_times("LookupLinear", 100, [1.0, 1.0, 1.0, 1.0, 1.0])
    set_times("nn.Linear (dense input)", 1_000, [4.0, 4.0, 4.0, 4.0, 4.0])
    set_times("LookupLinear", 1_000, [1.0, 1.0, 1.0, 1.0, 1.0])
    objs = [BenchResult(**r) for r in rows]
    c = next(c for c in crossovers(objs) if c["form"] == "bags" and c["phase"] == "forward")
    assert c["speedup_by_in_features"] == {"100": 2.0, "1000": 4.0}
    assert c["speedup_range_by_in_features"]["100"] == [0.5, 2.0]
    assert c["crossover_in_features"] == 1_000


# --- training -------------------------------------------------------------------------------


def test_side_by_side_training_gives_the_same_curve() -> None:
    run = train_side_by_side(40, 3, batch=16, steps=10)
    assert run.ok
    assert run.loss_lookup[-1] < run.loss_lookup[0]  # it trained
    assert run.max_abs_diff <= 1e-5 and run.weight_max_abs_diff <= 1e-5


# --- report ---------------------------------------------------------------------------------


REPORT_ARGV = ["report", "--bench-in-features", "100", "1000", "--train-in-features", "100",
               "--repeats", "1", "--big-vocab", "100000", "--big-steps", "40"]


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("report")
    code = main([*REPORT_ARGV, "--out", str(out)])
    return code, out


def test_report_html_is_self_contained_with_figures_and_verdicts(
    tiny_report: tuple[int, Path],
) -> None:
    code, out = tiny_report
    assert code == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 9  # 3 walkthrough, 4 bench, 2 training
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert page.count('class="ok">EQUIVALENT') >= 4  # every seed step
    assert "ALL CHECKS PASSED" in page and 'class="ok">SAME' in page
    assert 'class="fail"' not in page
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "All checks passed" in md and "same loss curve" in md
    # headings without the notebooks' jargon (the page's text: its images' base64 may hold
    # any four letters)
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert "Seed" not in text and "Seed" not in md


def test_report_records_its_own_command_in_results_json(tiny_report: tuple[int, Path]) -> None:
    _, out = tiny_report
    command = json.loads((out / "bench" / "results.json").read_text())["settings"]["command"]
    assert command == "lookuplinear " + shlex.join([*REPORT_ARGV, "--out", str(out)])
    argv = shlex.split(command)[1:]  # runs as recorded: every option is the report's
    assert build_parser().parse_args(argv).command == "report"


CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def test_a_report_rerun_that_stops_early_leaves_no_old_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    import lookuplinear.cli.bench

    (tmp_path / "report.html").write_text("ALL CHECKS PASSED")
    (tmp_path / "report.md").write_text("All checks passed")

    def interrupted(args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(lookuplinear.cli.bench, "bench", interrupted)
    assert main([*REPORT_ARGV, "--out", str(tmp_path)]) == 130
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "report.md").exists()
    assert (tmp_path / "walkthrough.md").exists()  # what ran before the stop is there
    assert not list(tmp_path.glob(".*.tmp"))


def test_results_csv_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    from lookuplinear.report.csv import write_csv

    path = write_csv([{"form": "bags", "median_s": 0.5}], tmp_path / "results.csv")
    before = path.read_text()
    with pytest.raises(AttributeError):  # the second row is no row: the writing fails
        write_csv([{"form": "csr", "median_s": 0.25}, None], path)  # type: ignore[list-item]
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install chromium")
def test_report_renders_in_headless_chromium(
    tiny_report: tuple[int, Path], tmp_path: Path
) -> None:
    _, out = tiny_report
    shot = tmp_path / "report.png"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
           "--window-size=1200,2400", f"--screenshot={shot}",
           (out / "report.html").resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 2400)
    keep = Path("out/test-screenshots")
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, keep / "report.png")  # for a look by eye


def test_plots_draw_no_line_through_a_time_the_machine_was_too_busy_for() -> None:
    """A noisy time is a hollow marker off the line, and the figure says what hollow means."""
    from matplotlib.figure import Figure

    from lookuplinear.report.plots import _busy_note, _draw

    rows = [{"in_features": n, "median_s": t, "status": "ok", "noisy": noisy}
            for n, t, noisy in [(10, 0.001, False), (100, 0.5, True), (1000, 0.003, False)]]
    fig = Figure()
    ax = fig.subplots()
    assert _draw(ax, rows, 1e3, label="m", color="red", marker="o")
    line, busy = ax.get_lines()
    assert list(line.get_xdata()) == [10, 1000] and list(line.get_ydata()) == [1.0, 3.0]
    assert list(busy.get_xdata()) == [100] and busy.get_linestyle() == "None"
    assert busy.get_markerfacecolor() == "none"
    _busy_note(fig, rows)
    assert any("too busy" in t.get_text() for t in fig.texts)
    assert not _draw(fig.subplots(), [{**rows[0], "status": "skipped"}], 1e3, label="m")


# --- headlines: where the lookup is faster and slower, and from how many rounds -------------


def _speedup_doc(speedups: dict[int, float], rounds: int) -> dict:
    """Bench rows of indices/forward: nn.Linear ``speedups[n]`` times the lookup's 1 ms, every
    round alike."""
    rows = []
    for n, ratio in speedups.items():
        for method, t in (("nn.Linear (dense input)", 1e-3 * ratio), ("LookupLinear", 1e-3)):
            rows.append(BenchResult("indices", "uniform", n, 16, 256, 1, 256, method, "forward",
                                    median_s=t, min_s=t, spread=1.0, times_s=[t] * rounds,
                                    attempts=1))
    return to_json(rows, machine={}, settings={})


def test_a_headline_names_where_the_lookup_is_faster_and_where_slower() -> None:
    doc = _speedup_doc({100: 3.0, 1_000: 1 / 3, 10_000: 1 / 4}, rounds=5)
    (line,) = headlines(doc)
    ranges = doc["crossovers"][0]["speedup_range_by_in_features"]
    assert [n for n, (lo, _) in ranges.items() if lo > 1] == ["100"]
    assert [n for n, (_, hi) in ranges.items() if hi < 1] == ["1000", "10000"]
    assert "LookupLinear is faster at in_features=100 and slower from in_features=1,000 on;" in line
    assert "not faster" not in line


def test_a_headline_from_too_few_rounds_draws_no_verdict() -> None:
    doc = _speedup_doc({100: 3.0, 1_000: 4.0}, rounds=1)
    (line,) = headlines(doc)
    assert "No verdict: 1 timed round per size" in line and "--repeats 3" in line
    assert "faster" not in line.split("No verdict")[0] and "slower" not in line
    assert "4x nn.Linear at in_features=1,000; 3x at 100" in line
    assert doc["crossovers"][0]["crossover_in_features"] is None
    assert _speedup_doc({100: 3.0, 1_000: 4.0}, rounds=3)["crossovers"][0][
        "crossover_in_features"] == 100


def test_a_size_skipped_whole_has_a_headline_with_the_reason() -> None:
    reason = "the weight table alone needs 59.60 GiB, over 0.93 GiB"
    rows = [BenchResult(form, "uniform", 10**9, 16, 256, 20, 0, "*", "*", status="skipped",
                        reason=reason) for form in ("indices", "bags")]
    heads = headlines(to_json(rows, machine={}, settings={}))
    assert heads == [f"Every method was skipped at in_features=1,000,000,000: {reason} (at "
                     "in_features=1,000,000,000, out_features=16)."]


# --- the report's verdict names what failed ------------------------------------------------


def _verdict_matches_printed_numbers(md: str) -> None:
    """The large-vocabulary verdict agrees with the loss and accuracy it prints beside it."""
    part = md.split("## Training on a large vocabulary", 1)[1]
    m = re.search(r"loss ([\d.]+) -> ([\d.]+) \(mean of the first (\d+) steps? -> of the last "
                  r"(\d+)\), held-out accuracy ([\d.]+)% -> ([\d.]+)%", part)
    assert m, part
    start, end, first, last, acc0, acc1 = map(float, m.groups())
    assert first == last
    learned = end < start and acc1 > acc0
    assert ("FAILED: training on a large vocabulary" not in md) == learned


def test_the_big_vocabulary_verdict_rests_on_the_numbers_it_prints(
    tiny_report: tuple[int, Path],
) -> None:
    md = (tiny_report[1] / "report.md").read_text(encoding="utf-8")
    _verdict_matches_printed_numbers(md)
    assert "mean of the first 20 steps -> of the last 20" in md  # 40 steps: 20 at each end


@pytest.fixture(scope="module")
def failing_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, str, str]:
    """A report whose torch.sparse.mm fails, whose large-vocabulary loss rose though its last
    step is below its first, and whose load average falls once it started."""
    import contextlib
    import io
    import os

    import lookuplinear.report.bench as bench_module
    import lookuplinear.report.training as training

    def failing_methods(*args: object) -> list:
        ms = methods_for(*args)  # type: ignore[arg-type]
        for m in ms:
            if m.name == "torch.sparse.mm (CSR)":
                def boom() -> None:
                    raise RuntimeError("torch.sparse.mm stand-in failure")
                m.run = boom
        return ms

    def rising_loss(*args: object, **kwargs: object) -> training.BigVocabRun:
        run = train_big_vocab(*args, **kwargs)
        run.losses = [0.70, 0.60, 0.62, 0.65, 0.63, 0.90, 0.95, 0.92, 0.91, 0.69]
        return run

    loads = iter([(7.0, 7.0, 7.0)])
    train_big_vocab = training.train_big_vocab
    out = tmp_path_factory.mktemp("failing")
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr):
        mp.setattr(bench_module, "methods_for", failing_methods)
        mp.setattr(training, "train_big_vocab", rising_loss)
        mp.setattr(os, "getloadavg", lambda: next(loads, (0.5, 0.5, 0.5)))
        code = main(["report", "--bench-in-features", "100", "--train-in-features",
                     "--repeats", "1", "--big-vocab", "1000", "--big-steps", "10",
                     "--out", str(out)])
    return code, out, stdout.getvalue(), stderr.getvalue()


def test_a_loss_that_rose_is_a_failed_check_named_as_such(
    failing_report: tuple[int, Path, str, str],
) -> None:
    code, out, stdout, _ = failing_report
    assert code == 1
    md = (out / "report.md").read_text(encoding="utf-8")
    _verdict_matches_printed_numbers(md)
    said = "training on a large vocabulary: the loss did not fall: loss 0.640 -> 0.874"
    assert said in stdout and said in md
    assert "(mean of the first 5 steps -> of the last 5)" in md
    page = (out / "report.html").read_text(encoding="utf-8")
    assert 'class="fail">NO' in page and "the loss did not fall" in page


def test_the_report_says_the_load_average_at_its_start(
    failing_report: tuple[int, Path, str, str],
) -> None:
    _, out, _, _ = failing_report
    md = (out / "report.md").read_text(encoding="utf-8")
    page = (out / "report.html").read_text(encoding="utf-8")
    for verdict_line in (md.split("## ")[0], page.split('<p class="sub">')[1].split("</p>")[0]):
        assert "load average 7.0 at the start" in verdict_line


def test_a_failed_bench_case_is_printed_and_listed_with_its_reason(
    failing_report: tuple[int, Path, str, str],
) -> None:
    _, out, stdout, stderr = failing_report
    doc = json.loads((out / "bench" / "results.json").read_text())
    failed = [r for r in doc["results"] if r["status"] == "failed"]
    assert failed and all(r["method"] == "torch.sparse.mm (CSR)" for r in failed)
    line = ("torch.sparse.mm (CSR) forward indices/uniform in=100 out=16 batch=256: "
            "RuntimeError: torch.sparse.mm stand-in failure")
    assert f"failed: {line}" in stderr
    assert f"the benchmark: {len(failed)} cases failed" in stdout
    for name in ("report.md", "report.html"):
        text = (out / name).read_text(encoding="utf-8")
        assert text.count("Failed: torch.sparse.mm (CSR)") == len(failed) and line in text


def test_a_report_whose_bench_measured_nothing_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["report", "--bench-in-features", "1e9", "--train-in-features", "--repeats",
                 "1", "--big-vocab", "1000", "--big-steps", "10", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    said = "the benchmark: nothing was measured, every case was skipped: the weight table alone"
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert said in out and said in md and "SOME CHECKS FAILED" in md
    assert "- Every method was skipped at in_features=1,000,000,000: the weight table" in md


def test_the_report_refuses_too_few_big_steps_for_its_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as e:
        main([*REPORT_ARGV, "--big-steps", "9", "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--big-steps: expected at least 10 steps" in err and "got '9'" in err
