"""One self-contained HTML page (figures inlined as base64 PNG, no scripts, no network).

The page is built from :class:`Section` objects: a title, paragraphs of HTML and figures.
:func:`steps_html` renders the walkthrough's steps; :func:`markdown_table_html` the pipe tables
of :mod:`lookuplinear.report.summary`.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Section", "image_tag", "markdown_table_html", "render_html", "steps_html", "verdict"]

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto;
       max-width: 1150px; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.9rem; margin-bottom: .2rem; } h2 { border-bottom: 2px solid #eee;
     padding-bottom: .2rem; margin-top: 2.2rem; } h3 { margin-bottom: .3rem; }
.sub { color: #666; margin-top: 0; }
.ok, .fail { display: inline-block; padding: .1rem .55rem; border-radius: .3rem;
             font-weight: 600; color: white; } .ok { background: #2e7d32; }
.fail { background: #c62828; }
pre { background: #f6f8fa; padding: .6rem .8rem; border-radius: .3rem; overflow-x: auto;
      font-size: .8rem; }
table { border-collapse: collapse; font-size: .82rem; margin: .6rem 0 1rem; }
th, td { border: 1px solid #ddd; padding: .2rem .5rem; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .85rem; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: .8rem; }
.tensor { display: inline-block; vertical-align: top; margin-right: 1rem; }
ul.checks { list-style: none; padding-left: .2rem; }
"""


@dataclass
class Section:
    """A part of the page: ``body`` is trusted HTML, ``figures`` are (png path, caption)."""

    title: str
    body: list[str] = field(default_factory=list)
    figures: list[tuple[Path, str]] = field(default_factory=list)
    anchor: str = ""
    figures_first: bool = False


def verdict(ok: bool, yes: str = "EQUIVALENT", no: str = "DIFFERENT") -> str:
    """A coloured badge.

    Examples
    --------
    >>> verdict(True)
    '<span class="ok">EQUIVALENT</span>'
    """
    return f'<span class="{"ok" if ok else "fail"}">{html.escape(yes if ok else no)}</span>'


def image_tag(path: Path, alt: str) -> str:
    """An ``<img>`` with the PNG inlined as a data URI."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _tensor_text(t: Any) -> str:
    arr = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
    with np.printoptions(precision=4, suppress=True, linewidth=90, threshold=200, edgeitems=3):
        return str(arr)


def steps_html(steps: list[Any]) -> str:
    """The walkthrough's steps: prose, tensors, stated equalities and equivalence reports."""
    parts = []
    for s in steps:
        parts.append(f"<h3>{html.escape(s.title)} {verdict(s.ok)}</h3>")
        parts.append(f"<p>{html.escape(s.text)}</p>")
        for name, t in s.tensors.items():
            parts.append(f'<div class="tensor"><b>{html.escape(name)}</b>'
                         f"<pre>{html.escape(_tensor_text(t))}</pre></div>")
        items = [f"<li>{'✓' if ok else '✗'} {html.escape(name)}</li>"
                 for name, ok in s.equal.items()]
        parts.append(f'<ul class="checks">{"".join(items)}</ul>')
        for c in s.checks:
            parts.append(f"<pre>{html.escape(str(c))}</pre>")
    return "\n".join(parts)


def markdown_table_html(text: str) -> str:
    """Pipe-table Markdown (with an optional caption paragraph before it) as HTML.

    Examples
    --------
    >>> markdown_table_html("| a | b |\\n|---|---|\\n| 1 | 2 |")
    '<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>'
    """
    out: list[str] = []
    rows: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(set(c) <= {"-", ":"} for c in cells):
                continue
            tag = "th" if not rows else "td"
            rows.append("<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells)
                        + "</tr>")
        elif line.strip():
            out.append(f"<p><i>{html.escape(line)}</i></p>")
    if rows:
        out.append("<table>" + "".join(rows) + "</table>")
    return "".join(out)


def render_html(
    title: str, subtitle: str, sections: list[Section], intro: str = ""
) -> str:
    """The whole page as one string; ``intro`` (trusted HTML) comes before the contents."""
    toc = "".join(f'<li><a href="#{s.anchor or i}">{html.escape(s.title)}</a></li>'
                  for i, s in enumerate(sections))
    body = []
    for i, s in enumerate(sections):
        body.append(f'<h2 id="{s.anchor or i}">{html.escape(s.title)}</h2>')
        figs = [f"<figure>{image_tag(p, cap)}<figcaption>{html.escape(cap)}</figcaption>"
                "</figure>" for p, cap in s.figures]
        body.extend(figs + s.body if s.figures_first else s.body + figs)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p class=\"sub\">{subtitle}</p>"
        f"{intro}<ol>{toc}</ol>" + "\n".join(body) + "</body></html>\n"
    )
