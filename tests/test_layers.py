"""The packages import downward only (pyproject.toml's import-linter contract), and the hooks the
kernel layer offers the layers above: the rows-updated event and the table's state allocator."""

from __future__ import annotations

import gc
import textwrap
from pathlib import Path

import pytest
import torch

from lookuplinear import LookupLinear, optim
from lookuplinear.ops import _hooks

ROOT = Path(__file__).resolve().parents[1]


def _lint(config: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    cli = pytest.importorskip("importlinter.cli", reason="the [dev] extra checks the layers")
    monkeypatch.chdir(config.parent)
    code: int = cli.lint_imports(config_filename=str(config), no_cache=True, no_logo=True)
    return code


def test_the_layers_import_downward_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # every import counts, inside functions too: `lint-imports` prints the offending chain
    assert _lint(ROOT / "pyproject.toml", monkeypatch) == 0


def test_an_upward_import_inside_a_function_breaks_the_contract(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "layered"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "high.py").write_text("from . import low\n")
    (pkg / "low.py").write_text(textwrap.dedent("""\
        def lazy():
            from . import high  # upward, hidden in a function
            return high
        """))
    config = tmp_path / "pyproject.toml"
    config.write_text(textwrap.dedent("""\
        [tool.importlinter]
        root_package = "layered"

        [[tool.importlinter.contracts]]
        name = "layers"
        type = "layers"
        containers = ["layered"]
        layers = ["high", "low"]
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _lint(config, monkeypatch) == 1


def test_rows_updated_reaches_subscribers_of_the_base_until_removed() -> None:
    table = torch.zeros(6, 2)
    seen: list[list[int]] = []
    sub = _hooks.on_rows_updated(table, lambda rows: seen.append(rows.tolist()))
    _hooks.notify(table[2:], torch.tensor([1, 0]))  # a view's rows are its base's
    _hooks.notify(table.clone(), torch.tensor([5]))  # a copy is not followed
    sub.remove()
    _hooks.notify(table, torch.tensor([4]))
    sub.remove()  # twice: nothing
    assert seen == [[3, 2]]


def test_a_collected_table_drops_its_subscribers_and_allocator() -> None:
    table = torch.zeros(3, 2)
    _hooks.on_rows_updated(table, lambda rows: None)
    _hooks.provide_state(table, lambda name, shape, fill=0.0: torch.full(shape, fill))
    before = (len(_hooks.WATCHERS), len(_hooks._ALLOCATORS))
    del table
    gc.collect()
    assert (len(_hooks.WATCHERS), len(_hooks._ALLOCATORS)) == (before[0] - 1, before[1] - 1)


@pytest.mark.parametrize("make", [
    lambda p: optim.Adam(p, lr=0.1), lambda p: optim.RowWiseAdagrad(p, lr=0.1),
    lambda p: optim.Adagrad(p, lr=0.1)])
def test_an_optimizer_takes_its_state_from_the_table_s_allocator(make) -> None:
    layer = LookupLinear(10, 4, sparse=True)
    made: dict[str, torch.Tensor] = {}

    def allocate(name: str, shape: tuple[int, ...], fill: float = 0.0,
                 dtype: torch.dtype | None = None) -> torch.Tensor:
        made[name] = torch.full(shape, fill, dtype=dtype or layer.weight.dtype)
        return made[name]

    _hooks.provide_state(layer.weight, allocate)
    opt = make([layer.weight])
    layer(torch.tensor([1, 3, 3])).sum().backward()
    opt.step()
    state = opt.state[layer.weight]
    provided = {t.untyped_storage().data_ptr() for t in made.values()}
    held = {t.untyped_storage().data_ptr() for t in state.values()
            if isinstance(t, torch.Tensor) and t.dim() > 0}
    assert made and held <= provided
