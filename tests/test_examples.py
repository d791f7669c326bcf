"""The example programs run and show what they claim, on small sizes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_lookup_sgd_follows_the_dense_loss_curve(capsys: pytest.CaptureFixture[str]) -> None:
    worst = load("same_loss_curve").main(["--vocab", "200", "--steps", "15"])
    assert worst < 1e-5
    assert "largest difference over 15 steps" in capsys.readouterr().out


def test_bag_of_words_classifier_learns(capsys: pytest.CaptureFixture[str]) -> None:
    acc = load("bow_classifier").main(
        ["--vocab", "20000", "--steps", "60", "--batch", "128", "--classes", "2"]
    )
    out = capsys.readouterr().out
    assert "median step" in out and "held-out accuracy" in out
    assert acc > 0.6  # chance is 0.5
