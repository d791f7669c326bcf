"""Every ```python block in docs/*.md runs as written.

As tests/test_readme.py does for README.md; the blocks of one file run in order in one
namespace, so a later block may use what an earlier one defined (a page reads top to bottom).
"""

import re
from pathlib import Path

import pytest

DOCS = sorted((Path(__file__).resolve().parents[1] / "docs").glob("*.md"))
PAGES = {
    p: re.findall(r"```python\n(.*?)```", p.read_text(encoding="utf-8"), flags=re.S)
    for p in DOCS
}


def test_docs_have_python_examples() -> None:
    assert any(PAGES.values()), "docs/*.md lost their python examples"


@pytest.mark.parametrize("page", [p for p, blocks in PAGES.items() if blocks],
                         ids=lambda p: p.name)
def test_doc_blocks_run(page: Path) -> None:
    namespace: dict[str, object] = {}
    for i, code in enumerate(PAGES[page]):
        try:
            exec(compile(code, f"{page.name} block {i}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"{page.name}, python block {i} failed:\n{code}") from e
