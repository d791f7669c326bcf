"""The example programs run and show what they claim, on small sizes."""

from __future__ import annotations

import ast
import importlib.util
import io
import math
import re
import sys
import tokenize
from pathlib import Path
from types import ModuleType

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    """The example ``name`` as a module, importing its sibling examples as running it does
    (a script's folder is on ``sys.path``), in any test order."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


def test_lookup_sgd_follows_the_dense_loss_curve(capsys: pytest.CaptureFixture[str]) -> None:
    worst = load("same_loss_curve").main(["--vocab", "200", "--steps", "15"])
    assert worst < 1e-5
    assert "largest difference over 15 steps" in capsys.readouterr().out


def test_lookup_sgd_loss_curve_fails_on_nan(capsys: pytest.CaptureFixture[str]) -> None:
    """An infinite learning rate turns both models' weights to NaN after the first step: the
    largest difference is NaN, which fails the script's check (``worst < 1e-5``), not the
    first step's 0."""
    worst = load("same_loss_curve").main(["--vocab", "200", "--steps", "3", "--lr", "inf"])
    assert math.isnan(worst)
    assert "largest difference over 3 steps: nan" in capsys.readouterr().out


def test_bag_of_words_classifier_learns(capsys: pytest.CaptureFixture[str]) -> None:
    """It beats the baseline it prints: the share of the most common class among the held-out
    labels (the classes are not balanced: about 0.58 of four here, 0.88 of two)."""
    acc = load("bow_classifier").main(
        ["--vocab", "20000", "--steps", "60", "--batch", "128", "--classes", "4"]
    )
    out = capsys.readouterr().out
    assert "median step" in out
    found = re.search(r"held-out accuracy (\d\.\d+) \(majority class (\d\.\d+)\)", out)
    assert found is not None, out
    assert float(found[1]) == pytest.approx(acc, abs=5e-4)
    assert acc > float(found[2]) + 0.05, out


def test_torch_compile_runs_in_one_graph(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The example compiles with ``fullgraph=True`` (a graph break would fail it), as its
    docstring says, and the compiled layer equals eager for index and ``Bags`` input."""
    calls: list[bool] = []  # each call's fullgraph
    compile_ = torch.compile

    def recording(model: torch.nn.Module, *, fullgraph: bool = False) -> object:
        calls.append(fullgraph)
        return compile_(model, fullgraph=fullgraph)

    monkeypatch.setattr(torch, "compile", recording)
    load("torch_compile").main()
    assert calls == [True]
    out = capsys.readouterr().out
    assert out.count("output equal to eager True, weight grad equal True") == 2, out


def test_recommender_learns_resumes_and_serves(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    rec = load("recommender")
    args = ["--rows", "4000", "--batch", "128", "--every", "10"]
    whole = rec.main([*args, "--steps", "40", "--out", str(tmp_path / "whole")])
    assert whole["resumed_from"] == 0 and whole["auc"] > 0.6  # chance is 0.5
    assert abs(whole["auc_int8"] - whole["auc"]) < 0.01
    # stopped after 20 steps, then run again: it resumes and ends on the same model
    rec.main([*args, "--steps", "20", "--out", str(tmp_path / "cut")])
    resumed = rec.main([*args, "--steps", "40", "--out", str(tmp_path / "cut")])
    assert resumed["resumed_from"] == 20 and resumed["auc"] == whole["auc"]
    a, b = (rec.load_served(tmp_path / d).state_dict() for d in ("whole", "cut"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "served int8 AUC" in capsys.readouterr().out


def test_served_recommender_is_the_quantized_model(tmp_path: Path) -> None:
    rec = load("recommender")
    df = rec.make_clicks(3000)
    torch.manual_seed(0)
    model = rec.Recommender(users=df["user_id"].nunique() + 1,
                            items=df["item_id"].nunique() + 1)
    model(model.features(df))  # train mode: the maps give every ID its row
    rec.save_served(model, tmp_path)  # the tables in int8, in place
    kb = model.features(df)
    served = rec.load_served(tmp_path)
    assert torch.equal(served(served.features(df)), model(kb))
    assert model.tables.dtypes == dict.fromkeys(["user", "item", "category", "tags"], "int8")


@pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning",
                            "ignore::UserWarning")  # torch.ao's own quantized-tensor warnings
def test_plain_torch_recommender_learns_and_resumes(tmp_path: Path) -> None:
    rec = load("recommender_torch")
    args = ["--rows", "4000", "--batch", "128", "--every", "10", "--out", str(tmp_path)]
    first = rec.main([*args, "--steps", "20"])
    again = rec.main([*args, "--steps", "40"])
    assert first["resumed_from"] == 0 and again["resumed_from"] == 20
    assert again["auc"] > 0.6 and abs(again["auc_int8"] - again["auc"]) < 0.01


def test_recommender_is_no_longer_than_plain_torch() -> None:
    """Lines of code (no blank lines, comments or docstrings; the shared data generator
    left out): the lookuplinear script is not longer than the plain PyTorch one."""
    assert code_lines("recommender.py") <= code_lines("recommender_torch.py")


def code_lines(name: str) -> int:
    src = (EXAMPLES / name).read_text(encoding="utf-8")
    dropped: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == "make_clicks":
            dropped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                dropped.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    code = {line for tok in tokenize.generate_tokens(io.StringIO(src).readline)
            if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                tokenize.DEDENT, tokenize.ENDMARKER)
            for line in range(tok.start[0], tok.end[0] + 1)}
    return len(code - dropped)
