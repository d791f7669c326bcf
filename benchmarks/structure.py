"""The structure of the package, measured: import cycles, module sizes, Python calls per step.

Run from the repository root:

    .venv/bin/python benchmarks/structure.py
    .venv/bin/python benchmarks/structure.py --calls   # the calls by function

Prints, for ``src/lookuplinear``:

* the import cycles between its modules (module-level imports, and all imports including those
  inside functions), found as strongly connected components of the import graph, and the same
  between its packages and top-level modules (``ops``, ``modules``, ``errors``...), with the
  count of imports inside functions that cross from one of them to another;
* the largest modules by lines;
* how many calls of the library's own Python functions (and in how many modules) one forward,
  and one backward with its fused ``RowWiseAdagrad`` update, make for a sparse
  ``LookupCollection`` batch over tables of three widths (``sys.setprofile``; deterministic);
  the same collection's forward without a fused optimizer (``collection_forward_calls_unfused``),
  and one ``LookupLinear(..., sparse=True)`` forward on bags given as ``(indices, offsets)`` and
  on an index tensor (``layer_forward_calls``);
* the names of the attributes the library sets on tensors and optimizers (string constants
  ``"_lookuplinear_*"``);
* how many ops one forward dispatches from Python on another device than the CPU
  (``device_ops_per_forward``): on a GPU each is at least one kernel launch, whose host-side
  cost a small lookup shows. Counted on the meta device (shapes only, every op dispatched; a
  stand-in for a GPU, where the lookups take the same path), beside ``nn.EmbeddingBag`` on the
  same batch; an operator counts once, whatever it runs inside.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1] / "src" / "lookuplinear"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_pkg: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph(top_level_only: bool) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        nodes = tree.body if top_level_only else list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, ast.If) and top_level_only:  # TYPE_CHECKING blocks: not imports
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = (_resolve(name, is_pkg, node.level, node.module) if node.level
                       else node.module or "")
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("lookuplinear"):
                    if name.startswith(t + ".") or t == "lookuplinear":
                        continue  # a package's own __init__ is imported by its modules anyway
                    graph[name].add(t)
    return graph


def _unit(module: str) -> str:
    """The package or top-level module of ``module``: ``lookuplinear.ops._rows`` -> ``ops``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between packages and top-level modules."""
    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        edges = out.setdefault(_unit(name), set())
        edges.update(_unit(t) for t in targets if _unit(t) != _unit(name))
    for edges in list(out.values()):
        for t in edges:
            out.setdefault(t, set())
    return out


def crossing_imports_in_functions() -> int:
    """Imports inside functions (or classes) from one package or top-level module to another."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    count = 0
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for block in tree.body:  # TYPE_CHECKING and other guarded blocks: module level too
            if isinstance(block, ast.If | ast.Try):
                top |= {id(n) for n in ast.walk(block)}
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in top or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                targets = [_resolve(name, is_pkg, node.level, node.module) if node.level
                           else node.module or ""]
            if any(t.startswith("lookuplinear.") and _unit(t) != _unit(name)
                   and _unit(name) != "lookuplinear" for t in targets):
                count += 1
    return count


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def largest(n: int = 5) -> list[tuple[str, int]]:
    sizes = [(str(p.relative_to(ROOT.parent)), len(p.read_text(encoding="utf-8").splitlines()))
             for p in ROOT.rglob("*.py")]
    return sorted(sizes, key=lambda s: -s[1])[:n]


def stamped_attributes() -> list[str]:
    names: set[str] = set()
    for p in ROOT.rglob("*.py"):
        names |= set(re.findall(r"[\"'](_lookuplinear_\w+)[\"']", p.read_text(encoding="utf-8")))
    return sorted(names)


def _counted(fn: Any, by_function: bool = False) -> Counter[str]:
    """The calls ``fn()`` makes of the library's Python functions, by file (or by function)."""
    hits: Counter[str] = Counter()
    pkg = str(ROOT)

    def prof(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(pkg):
            name = code.co_filename[len(pkg) + 1:]
            hits[f"{name}:{code.co_qualname}" if by_function else name] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return hits


def calls_per_step(by_function: bool = False) -> dict[str, Any]:
    """Library Python calls in one forward (a layer's, a collection's) and in the backward +
    fused update of one collection batch; with ``by_function``, the calls of each function."""
    import torch

    from lookuplinear import KeyedBags, LookupCollection, LookupLinear, TableConfig, optim

    torch.manual_seed(0)
    tables = [TableConfig("t8", 1_000, 8, ["f8"]), TableConfig("t16", 50_000, 16, ["f16"]),
              TableConfig("t32", 200_000, 32, ["f32", "g32"])]
    model = LookupCollection(tables, sparse=True)
    unfused = LookupCollection(tables, sparse=True)
    opt = optim.RowWiseAdagrad(model.parameters(), lr=0.1, fused=True)
    layer = LookupLinear(50_000, 16, sparse=True)
    n = 256
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 6, (4 * n,), generator=gen)
    sizes = [1_000, 50_000, 200_000, 200_000]
    values = torch.cat([torch.randint(0, s, (int(lengths[i * n:(i + 1) * n].sum()),),
                                      generator=gen) for i, s in enumerate(sizes)])
    kb = KeyedBags(["f8", "f16", "f32", "g32"], values, lengths=lengths)
    ids = torch.randint(0, 50_000, (n,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths[:n].cumsum(0)])
    indices = torch.randint(0, 50_000, (int(offsets[-1]),), generator=gen)
    offsets = offsets[:-1]  # nn.EmbeddingBag's start offsets

    for _ in range(2):  # warm: lazy imports and first-call caches out of the count
        opt.zero_grad()
        model(kb).values().sum().backward()
        opt.step()
        unfused(kb)
        layer(indices, offsets)
        layer(ids)
    holder: dict[str, Any] = {}

    def forward() -> None:
        holder["out"] = model(kb).values().sum()

    def backward() -> None:
        holder["out"].backward()
        opt.step()

    opt.zero_grad()
    runs = {"forward": forward, "backward_and_update": backward,
            "collection_forward_unfused": lambda: unfused(kb),
            "layer_forward_bags": lambda: layer(indices, offsets),
            "layer_forward_index": lambda: layer(ids)}
    counts = {name: _counted(fn, by_function) for name, fn in runs.items()}
    if by_function:
        return {name: dict(c.most_common()) for name, c in counts.items()}
    out: dict[str, Any] = {}
    for name in ("forward", "backward_and_update"):
        out[f"{name}_calls"] = sum(counts[name].values())
        out[f"{name}_modules"] = len(counts[name])
    out["collection_forward_calls_unfused"] = sum(counts["collection_forward_unfused"].values())
    out["layer_forward_calls"] = {"bags": sum(counts["layer_forward_bags"].values()),
                                  "index": sum(counts["layer_forward_index"].values())}
    return out


def device_ops_per_forward() -> dict[str, int]:
    """Ops dispatched from Python in one forward on the meta device: ``LookupLinear`` (a 20-ID
    bag as ``Bags`` and as ``(indices, offsets)``, one ID), ``lookuplinear.EmbeddingBag``, a
    ``LookupCollection`` of 8 sum tables (one ID a bag, and bags), each beside
    ``nn.EmbeddingBag`` (one per table)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import lookuplinear
    from lookuplinear import Bags, KeyedBags, LookupCollection, LookupLinear, TableConfig

    class Dispatched(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            self.count += 1
            return func(*args, **(kwargs or {}))

    meta, n, f = torch.device("meta"), 256, 8
    layer = LookupLinear(50_000, 16, bias=False, sparse=True, device=meta)
    drop_in = lookuplinear.EmbeddingBag(50_000, 16, mode="sum", sparse=True, device=meta)
    stock = torch.nn.EmbeddingBag(50_000, 16, mode="sum", sparse=True, device=meta)
    collection = LookupCollection([TableConfig(f"t{i}", 50_000, 16, [f"f{i}"])
                                   for i in range(f)], sparse=True, device=meta)
    tables = [torch.nn.EmbeddingBag(50_000, 16, mode="sum", sparse=True, device=meta)
              for _ in range(f)]
    ids = torch.empty(n, dtype=torch.long, device=meta)
    indices = torch.empty(20 * n, dtype=torch.long, device=meta)
    starts = torch.empty(n, dtype=torch.long, device=meta)
    bags = Bags(indices, torch.empty(n + 1, dtype=torch.long, device=meta))
    keys = [f"f{i}" for i in range(f)]
    one_id = KeyedBags(keys, torch.empty(f * n, dtype=torch.long, device=meta),
                       lengths=torch.empty(f * n, dtype=torch.long, device=meta))
    keyed = KeyedBags(keys, torch.empty(f * 20 * n, dtype=torch.long, device=meta),
                      lengths=torch.empty(f * n, dtype=torch.long, device=meta))
    runs = {
        "nn.EmbeddingBag, bags": lambda: stock(indices, starts),
        "nn.EmbeddingBag, one ID": lambda: stock(ids.view(-1, 1)),
        "LookupLinear, Bags": lambda: layer(bags),
        "LookupLinear, (indices, offsets)": lambda: layer(indices, starts),
        "LookupLinear, one ID": lambda: layer(ids),
        "lookuplinear.EmbeddingBag, bags": lambda: drop_in(indices, starts),
        "8 x nn.EmbeddingBag, one ID": lambda: [t(ids.view(-1, 1)) for t in tables],
        "LookupCollection, 8 tables, one ID": lambda: collection(one_id).values(),
        "LookupCollection, 8 tables, bags": lambda: collection(keyed).values(),
    }
    counts = {}
    for name, run in runs.items():
        run()  # warm: lazy imports, cached layouts
        with Dispatched() as seen:
            run()
        counts[name] = seen.count
    return counts


def main() -> None:
    if "--calls" in sys.argv[1:]:  # where the calls go: each function's count, per run
        print(json.dumps(calls_per_step(by_function=True), indent=1))
        return
    top = cycles(import_graph(top_level_only=True))
    every_graph = import_graph(top_level_only=False)
    every = cycles(every_graph)
    result = {
        "import_cycles_module_level": top,
        "import_cycles_any_import": every,
        "package_cycles_module_level": cycles(package_graph(import_graph(top_level_only=True))),
        "package_cycles_any_import": cycles(package_graph(every_graph)),
        "imports_in_functions_between_packages": crossing_imports_in_functions(),
        "largest_modules": largest(),
        "attributes_set_on_tensors_and_optimizers": stamped_attributes(),
        **calls_per_step(),
        "device_ops_per_forward": device_ops_per_forward(),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
