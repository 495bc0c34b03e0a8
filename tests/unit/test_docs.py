"""The README is an entry point and docs/ the reference: every relative link in them
resolves to a file of this repository (and an anchor to a heading of that file), none
leaves the repository, and the README stays short enough to read in five minutes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def link_problems(page: Path, text: str | None = None) -> list[str]:
    """Links in `page` (or in `text`, read as if it were `page`) that do not resolve."""
    problems = []
    text = FENCE.sub("", page.read_text() if text is None else text)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not a file of this repository
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(ROOT)}: ({target})"
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{where} leaves the repository")
        elif not resolved.exists():
            problems.append(f"{where} does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert link_problems(page) == []


def test_a_broken_link_is_found():
    page = ROOT / "docs" / "testing.md"
    text = (
        "# Title\n[a](../README.md#the-two-commands) [b](nowhere.md) "
        "[c](../../outside.md) [d](#no-such-heading) [e](https://example.com)\n"
    )
    assert link_problems(page, text) == [
        "docs/testing.md: (nowhere.md) does not exist",
        "docs/testing.md: (../../outside.md) leaves the repository",
        "docs/testing.md: (#no-such-heading): no heading #no-such-heading in docs/testing.md",
    ]


def test_the_readme_is_short_and_starts_with_what_a_user_needs():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300
    first_screen = "\n".join(lines[:60])
    for heading in ("## The two commands", "## Make it yours"):
        assert heading in first_screen
    assert "**Contents**" in first_screen


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_repository_in_words(page):
    text = page.read_text()
    assert "shared/seeds" not in text and "../shared" not in text


def test_the_layout_names_every_module_and_java_class():
    """docs/layout.md is the module list with one-line purposes: a module or Java operator
    added without a line there fails here."""
    layout = (ROOT / "docs" / "layout.md").read_text()
    listed = set(re.findall(r"[\w./]+", layout))
    missing = [
        str(path.relative_to(ROOT))
        for pattern in (
            "pipelines/**/*.py",
            "pipelines_dev/**/*.py",
            "bench/*.py",
            "jars/src/**/*.java",
        )
        for path in ROOT.glob(pattern)
        if not path.name.startswith("_")
        and path.parent.name != "scaffold"
        and path.name not in listed
        and path.stem not in listed
    ]
    assert missing == []
