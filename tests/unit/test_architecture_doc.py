"""docs/ARCHITECTURE.md against the tree: every module of the package is named in it, and every
module path it names exists, so the document cannot drift from the layout.

A module is named by its path under `compaction/` (`steps/scan.py`, with or without the
`compaction/` prefix) or, when no other module has the same file name, by that name alone
(`round.py`)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "compaction"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
FOLDERS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _modules() -> list[Path]:
    """Every module of the package, relative to it, `__init__.py` files left out."""
    return sorted(
        p.relative_to(PACKAGE)
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def _named_paths(text: str) -> set[str]:
    """The module paths the document names, relative to `compaction/`: `compaction/x/y.py`, and
    `x/y.py` for a folder `x` of the package (not a path under some other directory)."""
    full = {m.group(1) for m in re.finditer(r"\bcompaction/([\w/]+\.py)\b", text)}
    folders = "|".join(map(re.escape, FOLDERS))
    short = {m.group(0) for m in re.finditer(rf"(?<![\w/.-])(?:{folders})/\w+\.py\b", text)}
    return full | short


def test_the_package_has_modules_to_check():
    assert len(_modules()) > 50 and {"format", "kernels", "policy", "steps", "spark"} <= set(FOLDERS)


def test_every_module_is_named_in_the_architecture_doc():
    text = DOC.read_text(encoding="utf-8")
    paths = _named_paths(text)
    counts = Counter(m.name for m in _modules())
    missing = []
    for module in _modules():
        by_name = counts[module.name] == 1 and re.search(rf"(?<![\w/]){re.escape(module.name)}\b", text)
        if module.as_posix() not in paths and not by_name:
            missing.append(module.as_posix())
    assert not missing, f"modules not named in docs/ARCHITECTURE.md: {missing}"


def test_every_module_path_the_doc_names_exists():
    text = DOC.read_text(encoding="utf-8")
    absent = sorted(p for p in _named_paths(text) if not (PACKAGE / p).is_file())
    assert not absent, f"docs/ARCHITECTURE.md names modules that do not exist: {absent}"
