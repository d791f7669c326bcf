"""The API reference (``make docs``) builds with warnings as errors and holds every public name.

Public names are those of ``lookuplinear._EXPORTS`` and the ``__all__`` of each public
subpackage (``lookuplinear.optim``, ``.parallel``, ``.sklearn``, ``.text``). The site is built
once, as ``make docs`` builds it, and its ``objects.inv`` (Sphinx's index of documented
objects) is read back.
"""

import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import lookuplinear

# installed, asked without importing them here: Sphinx runs in a process of its own, and a
# module named sphinx in this one changes what SciPy's import does (scipy.stats imports
# sphinx.ext.autodoc where it finds one; a sphinx without it then fails every later test
# module that imports scikit-learn)
for _extra in ("sphinx", "numpydoc", "myst-parser"):
    try:
        importlib.metadata.version(_extra)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"the [docs] extra builds the API reference ({_extra} is not installed)",
                    allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]


#: the command line (``lookuplinear train/test/predict/report ...``), documented by its ``--help``
#: and the narrative pages rather than as a Python API
COMMAND_LINE = {"cli", "report"}

#: the folders of the implementation, by concept: their public names are re-exported by
#: ``lookuplinear`` itself (one table, ``lookuplinear._EXPORTS``) and documented there
IMPLEMENTATION = {"ids", "modules", "ops", "quant", "sparse", "storage"}


def public_subpackages() -> list[str]:
    """Every subpackage of lookuplinear but the private (``_``), command-line and implementation
    ones."""
    return sorted(m.name for m in pkgutil.iter_modules(lookuplinear.__path__)
                  if m.ispkg and not m.name.startswith("_")
                  and m.name not in COMMAND_LINE | IMPLEMENTATION)


def public_names() -> list[str]:
    """Every public name, qualified as users import it."""
    names = [f"lookuplinear.{name}" for name in lookuplinear._EXPORTS]
    for package in public_subpackages():
        module = importlib.import_module(f"lookuplinear.{package}")
        names.append(module.__name__)
        names += [f"{module.__name__}.{name}" for name in module.__all__]
    return names


def read_inventory(path: Path) -> dict[str, str]:
    """``objects.inv``: documented name -> its role (``py:class``, ``py:function``, ...)."""
    header, _, body = path.read_bytes().partition(b"zlib.\n")
    assert header.startswith(b"# Sphinx inventory version 2"), header
    entries = {}
    for line in zlib.decompress(body).decode().splitlines():
        name, role, _ = line.split(" ", 2)
        entries[name] = role
    return entries


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
         "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert build.returncode == 0, f"make docs fails (warnings are errors):\n{build.stderr}"
    return out / "html"


def test_public_subpackages_are_found() -> None:
    assert {"optim", "parallel", "sklearn", "text"} <= set(public_subpackages())


def test_reference_builds_without_warnings(site: Path) -> None:
    assert (site / "index.html").is_file()
    for package in ["lookuplinear", *public_subpackages()]:
        assert (site / "api" / f"{package}.html").is_file(), f"no reference page for {package}"


def test_every_public_name_is_in_the_reference(site: Path) -> None:
    documented = read_inventory(site / "objects.inv")
    missing = [name for name in public_names()
               if not documented.get(name, "").startswith("py:")]
    assert not missing, f"public names missing from the API reference: {missing}"


def test_narrative_pages_link_into_the_reference(site: Path) -> None:
    # docs/layer.md's first mention of the layer is a link to its entry
    assert 'href="api/lookuplinear.html#lookuplinear.LookupLinear"' in (
        site / "layer.html").read_text(encoding="utf-8")
