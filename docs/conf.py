"""Sphinx configuration: the narrative pages (docs/*.md, README.md) and the API reference.

``make docs`` builds the site into ``out/docs`` with warnings as errors. The reference pages
(``docs/api/*.rst``) each hold one ``lookuplinear-api`` directive, which documents every name of
a namespace's public table (``_EXPORTS`` for ``lookuplinear``, ``__all__`` for a subpackage), so
a new public name is in the reference without anyone listing it again.

The Markdown pages stay what they are on GitHub (and what tests/test_docs.py runs); MyST reads
them into the site unchanged. They link into the reference as
``[`LookupLinear`](#lookuplinear.LookupLinear)``: MyST resolves ``#name`` to the object's entry,
and a name that is not documented fails the build. On GitHub such a link goes nowhere.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

import lookuplinear

project = "lookuplinear"
author = "lookuplinear contributors"
copyright = "lookuplinear contributors"
release = version = lookuplinear.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
]

exclude_patterns = ["_build"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
html_theme = "alabaster"
html_title = "lookuplinear"

# GitHub's heading anchors (docs/*.md link to ``performance.md#kernels``), checked by the build
myst_heading_anchors = 4

# every public member with its signature, documented or not (dataclass fields, properties)
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    "member-order": "bysource",
    "show-inheritance": True,
}
autodoc_typehints = "signature"
autosummary_generate = False
# a class's methods are documented below it by autodoc; numpydoc's member tables would need
# a generated page per member
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = False


def public_names(module_name: str) -> list[str]:
    """The public table of a namespace: ``_EXPORTS`` for the package, ``__all__`` elsewhere."""
    module = importlib.import_module(module_name)
    table = getattr(module, "_EXPORTS", None)
    return sorted(table) if table is not None else list(module.__all__)


def _attribute_doc(module: types.ModuleType, name: str) -> list[str]:
    """The ``#:`` comment above ``name = ...`` in the module (or submodule) that assigns it."""
    candidates = [module.__name__]
    if hasattr(module, "__path__"):
        candidates += [f"{module.__name__}.{m.name}" for m in pkgutil.iter_modules(module.__path__)]
    for candidate in candidates:
        docs = ModuleAnalyzer.for_module(candidate).find_attr_docs()
        if ("", name) in docs:
            return list(docs["", name])
    return []


class PublicApi(SphinxDirective):
    """``lookuplinear-api MODULE``: a summary table, then every name of MODULE's public table."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module_name = self.arguments[0]
        module = importlib.import_module(module_name)
        names = public_names(module_name)
        lines = [f".. currentmodule:: {module_name}", "", ".. autosummary::", ""]
        lines += [f"   {name}" for name in names]
        lines.append("")
        for name in names:
            lines += _entry(module, name)
        content = StringList(lines, source=f"<lookuplinear-api {module_name}>")
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, content, node)
        return node.children


def _entry(module: types.ModuleType, name: str) -> list[str]:
    qualified = f"{module.__name__}.{name}"
    obj: Any = getattr(module, name)
    if isinstance(obj, types.ModuleType):
        return []  # a subpackage has its own page; the summary table links to it
    if inspect.isclass(obj):
        kind = "autoexception" if issubclass(obj, BaseException) else "autoclass"
        return [f".. {kind}:: {qualified}", ""]
    if callable(obj):
        return [f".. autofunction:: {qualified}", ""]
    doc = _attribute_doc(module, name)
    return [f".. py:data:: {name}", f"   :value: {obj!r}", "", *(f"   {d}" for d in doc), ""]


def _skip_member(app: Sphinx, what: str, name: str, obj: object, skip: bool,
                 options: object) -> bool | None:
    """scikit-learn's metadata-routing methods (``set_fit_request`` ...), documented there."""
    return True if re.fullmatch(r"set_\w+_request", name) else None


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("lookuplinear-api", PublicApi)
    app.connect("autodoc-skip-member", _skip_member)
    return {"parallel_read_safe": True}
