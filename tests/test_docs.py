"""The README stays a page read in minutes, its links whole; the reference in docs/ builds
with mkdocs --strict (links and anchors checked); every pointer from the code into the
docs names a file and a heading that exist; ARCHITECTURE.md names every module."""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify
from mkdocs.commands.build import build
from mkdocs.config import load_config

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fastmon", "probe", "advisor", "tui", "common")
POINTER = re.compile(r'(docs/[\w-]+\.md|ARCHITECTURE\.md|README)[,]?\s+"([^"]+)"')
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(path: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")}


def test_the_readme_is_read_in_minutes_and_its_links_are_whole():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for target in LINK.findall(text):
        if target.startswith("http"):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), target
        if anchor:
            assert anchor in {slugify(h, "-") for h in headings(ROOT / path)}, target


def test_the_reference_builds_with_its_links_and_anchors_checked(tmp_path):
    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(tmp_path / "site"))
    build(config)  # strict: any warning (a broken link or anchor) aborts


def test_every_pointer_from_the_code_into_the_docs_names_a_heading_there():
    pointers = []
    for package in PACKAGES:
        for source in (ROOT / package).rglob("*.py"):
            text = " ".join(source.read_text().split())  # a heading's words may wrap in a docstring
            for page, heading in POINTER.findall(text):
                pointers.append((source.relative_to(ROOT), page, heading))
    assert len(pointers) >= 5
    for source, page, heading in pointers:
        target = ROOT / ("README.md" if page == "README" else page)
        assert heading in headings(target), f"{source} points at {page} \"{heading}\", which has no such heading"


def test_architecture_names_every_module():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    unnamed = [str(module.relative_to(ROOT)) for package in PACKAGES for module in sorted((ROOT / package).rglob("*.py"))
               if module.name != "__init__.py" and module.name not in text]
    assert unnamed == []
