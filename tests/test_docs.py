"""The design is in the repository (issue 54, item 8): no file cites a document that lives beside
it (a design note or a research file a fresh clone does not have), every docs/ page a file names
exists, and every link in the README and docs/ leads to a file and a heading that exist."""

from __future__ import annotations

import re

from repo_files import repo_files

from conftest import ROOT

TEXT = {".py", ".md", ".js", ".json", ".h", ".c", ".sh", ".ps1", ".toml", ".txt", ".yml", ".cfg", ".spec"}
# a design note or research file outside the repository, by the names they had there
OUTSIDE = re.compile(r"\bDESIGN(\.md)?\s*(§|section\b)|\bDESIGN\.md\b|(?<![\w/.])research/[\w-]+\.md|\.\./shared/"
                     r"|\bshared/(research|review|eval)/")
PAGE = re.compile(r"(?<![\w/.])docs/[\w-]+\.md\b")  # ours, not another repository's (a URL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ME = ("tests/test_docs.py", "tests/test_fresh_machine.py")  # these two hold the patterns they look for


def texts() -> list[tuple[str, str]]:
    out = []
    for f in repo_files():
        rel = f.relative_to(ROOT).as_posix()
        if f.suffix in TEXT and rel not in ME and f.is_file():
            out.append((rel, f.read_text("utf-8", errors="replace")))
    return out


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_no_file_cites_a_document_outside_the_repository():
    hits = [f"{rel}:{i}: {line.strip()[:120]}" for rel, text in texts()
            for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, "cites a document that is not in the repository (bring it into docs/):\n" + "\n".join(hits)


def test_every_docs_page_a_file_names_exists():
    missing = sorted({f"{rel}: {m}" for rel, text in texts() for m in PAGE.findall(text) if not (ROOT / m).is_file()})
    assert not missing, "\n".join(missing)


def test_every_link_in_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 3, "docs/ holds the design"
    bad = []
    for page in pages:
        for target in LINK.findall(page.read_text("utf-8")):
            if re.match(r"[a-z]+:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.is_file():
                bad.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            elif anchor and dest.suffix == ".md":
                heads = {slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text("utf-8"), re.M)}
                if anchor not in heads:
                    bad.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_citation_outside():
    beside = "/".join(("..", "shared", "eval", "x.jsonl"))  # joined: tests/test_fresh_machine.py looks for it whole
    for line in ("see DESIGN.md §2", "(DESIGN §7.9)", "research/draft-recipe.md §1.2", beside,
                 "`shared/research/gpu-batch-invariance.md`"):
        assert OUTSIDE.search(line), line
    for line in ("docs/training.md", "gguf_tools/random_targets/real.py", "a design choice", "bench/out/x.md"):
        assert not OUTSIDE.search(line), line
