"""Every reference in the code, the tests and the docs points into the repository (or to a public
URL): a path a comment or a document names must exist, and nothing may send a reader to a
folder that only the original authors had.

What is checked, in the .py files under src/, tests/ and bench/ and in the Markdown files (the
root ones and docs/):

- paths from the repository root (``docs/...``, ``src/...``, ``tests/...``, ``bench/...``,
  ``scripts/...``, ``examples/...``) exist (a ``*`` in one matches at least one file);
- every ``*.md`` named exists at the root, beside the file naming it, or under docs/;
- in Markdown, every module named in backticks (``storage/engine/log.py``, ``isr.py``) is a file
  of the repository, matched by its trailing path, as the docs name modules relative to their
  package;
- no file names the folders of the material the project was seeded from;
- ARCHITECTURE.md's map of the packages: every file named in a package's entry is in that
  package (``session.py`` under ``network/`` must be ``server/network/session.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".venv", "__pycache__", ".git", "build", "dist", ".pytest_cache", ".ruff_cache"}

# Built from parts so that this file does not name what it forbids.
FORBIDDEN = ("seeds" + "/", "shared" + "/", "shared" + " folder")

ROOT_PATH = re.compile(
    r"(?<![\w./-])(?:docs|src|tests|bench|scripts|examples)/[\w*.-]+(?:/[\w*.-]+)*"
)
MD_NAME = re.compile(r"(?<![\w./-])([\w-]+(?:/[\w-]+)*\.md)\b")
BACKTICKED_MODULE = re.compile(r"`([\w/]+\.(?:py|c))`")


def _files(suffixes: tuple[str, ...]) -> list[Path]:
    found = []
    for top in ("src", "tests", "bench", "docs", "examples"):
        for path in (ROOT / top).rglob("*"):
            parts = path.relative_to(ROOT).parts
            skipped = SKIP_DIRS & set(parts) or any(p.endswith(".egg-info") for p in parts)
            if path.suffix in suffixes and not skipped:
                found.append(path)
    found += [p for p in ROOT.glob("*") if p.suffix in suffixes]
    return sorted(found)


# This file's own examples of bad references are data, not references.
SCANNED = [p for p in _files((".py", ".md")) if p != Path(__file__).resolve()]
REPO_FILES = [p.relative_to(ROOT).as_posix() for p in _files((".py", ".c", ".md"))]


def _exists(ref: str) -> bool:
    ref = ref.rstrip(".")
    if "*" in ref:
        return any(ROOT.glob(ref))
    return (ROOT / ref).exists()


def _md_exists(name: str, referrer: Path) -> bool:
    return any((base / name).exists() for base in (ROOT, referrer.parent, ROOT / "docs"))


def _module_exists(ref: str) -> bool:
    return any(f == ref or f.endswith("/" + ref) for f in REPO_FILES)


def _problems(path: Path, text: str | None = None) -> list[str]:
    """What is wrong with the references in ``path`` (or in ``text``, judged as if it were that
    file's)."""
    if text is None:
        text = path.read_text(encoding="utf-8", errors="replace")
    rel = path.relative_to(ROOT).as_posix()
    problems = []
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{lineno}"
        for word in FORBIDDEN:
            if word in line:
                problems.append(f"{where}: names {word!r}, which is not in the repository")
        for match in ROOT_PATH.finditer(line):
            if "://" in line[max(0, match.start() - 60) : match.start()]:
                continue  # part of a URL
            if not _exists(match.group(0)):
                problems.append(f"{where}: {match.group(0)} does not exist")
        for match in MD_NAME.finditer(line):
            if "://" in line[max(0, match.start() - 60) : match.start()]:
                continue
            if not _md_exists(match.group(1), path):
                problems.append(f"{where}: {match.group(1)} does not exist")
        if path.suffix == ".md":
            for match in BACKTICKED_MODULE.finditer(line):
                if not _module_exists(match.group(1)):
                    problems.append(f"{where}: module {match.group(1)} does not exist")
    return problems


def test_the_scan_covers_the_code_and_the_docs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SCANNED}
    assert {"README.md", "ARCHITECTURE.md", "docs/design.md", "docs/proposals.md"} <= names
    assert "src/logkeel/storage/errors.py" in names


@pytest.mark.parametrize(
    "line, bad",
    [
        ("see DESIGN.md in the project notes", True),
        ("the incident in " + "seeds" + "/", True),
        ("see `docs/no-such-file.md`", True),
        ("`storage/engine/no_such_module.py` does it", True),
        ("see docs/design.md and `storage/engine/log.py`", False),
        ("https://github.com/org/repo/blob/main/docs/elsewhere.md", False),
    ],
)
def test_the_check_catches_a_missing_file(line: str, bad: bool) -> None:
    problems = _problems(ROOT / "docs" / "design.md", line)
    assert bool(problems) == bad, problems


def test_every_reference_points_into_the_repository() -> None:
    problems = [p for path in SCANNED for p in _problems(path)]
    assert not problems, "\n".join(problems)


# -- ARCHITECTURE.md's map: each file where its entry places it ------------------------------

PACKAGE_ROOT = ROOT / "src" / "logkeel"
TOP_ENTRY = re.compile(r"^([a-z_]+)/\s")  # "server/    asyncio broker..."
SUB_ENTRY = re.compile(r"^  (?:([a-z_]+)/|\(root\))\s")  # "  network/    framing..." or "  (root)"
TOP_FILE = re.compile(r"^([a-z_]+\.py)\s")  # "ports.py    the one picker..."
FILE_NAME = re.compile(r"(?<![\w./-])((?:[\w]+/)*[\w]+\.(?:py|c))\b")


def _map_problems(text: str) -> list[str]:
    """Files named in the package map (the first fenced block) that are not in the package
    their entry is about (or below it); one named with its package (``server/broker.py``) is
    looked up from src/logkeel/."""
    block = text.split("```", 2)[1]
    problems = []
    package: Path | None = None
    for line in block.splitlines():
        if top := TOP_ENTRY.match(line):
            package = PACKAGE_ROOT / top.group(1)
        elif file := TOP_FILE.match(line):
            package = PACKAGE_ROOT
            if not (PACKAGE_ROOT / file.group(1)).exists():
                problems.append(f"{file.group(1)} is not in src/logkeel/")
            continue
        elif (sub := SUB_ENTRY.match(line)) and package is not None:
            top_package = package if package.parent == PACKAGE_ROOT else package.parent
            package = top_package / sub.group(1) if sub.group(1) else top_package
        if package is None:
            continue
        for match in FILE_NAME.finditer(line):
            name = match.group(1)
            if "/" in name and (PACKAGE_ROOT / name).exists():
                continue  # another package's file, named from src/logkeel/
            if not any(
                p.relative_to(package).as_posix().endswith(name)
                for p in package.rglob(Path(name).name)
            ):
                problems.append(f"{name} is not in {package.relative_to(ROOT).as_posix()}/")
    return problems


def test_the_map_check_catches_a_misplaced_file() -> None:
    misplaced = "```\nserver/     the broker\n  network/    one Connection (session.py)\n```"
    assert _map_problems(misplaced) == ["session.py is not in src/logkeel/server/network/"]
    placed = "```\nserver/     the broker\n  (root)      session.py: a session\n```"
    assert _map_problems(placed) == []


def test_architecture_places_each_file_in_its_package() -> None:
    problems = _map_problems((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)
