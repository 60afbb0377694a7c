"""The docs cite files that exist: every path with a directory in it (`jit/running.py`,
`spmd/sharding/partition.py`, `tests/ir/test_op_names.py`, `passes/combine.py`) named in
README.md or docs/*.md is a file of the repository, whole or as the tail of one's path. A
renamed or moved file that a page still names fails here. (Bare file names, `train.py`,
are the user's scripts in the examples: not checked.)"""
import pathlib
import re

from paths import ROOT

ROOT = pathlib.Path(ROOT)
SKIP_DIRS = {".git", "__pycache__", "build", ".hypothesis", ".pytest_cache"}
CITED = re.compile(r"(?<![\w/.])((?:[\w.-]+/)+[\w-]+\.py)\b")


def repository_files(root):
    return {p.relative_to(root).as_posix() for p in root.rglob("*.py")
            if not SKIP_DIRS & set(p.relative_to(root).parts)}


def missing_citations(root, pages):
    files = repository_files(root)
    tails = {f.split("/", i)[-1] for f in files for i in range(f.count("/") + 1)}
    out = []
    for page in pages:
        text = (root / page).read_text()
        for m in CITED.finditer(text):
            if m.group(1) not in tails:
                out.append(f"{page}:{text.count(chr(10), 0, m.start()) + 1} cites {m.group(1)}")
    return out


def pages(root):
    return ["README.md"] + sorted(p.relative_to(root).as_posix() for p in (root / "docs").glob("*.md"))


def test_every_cited_path_exists():
    missing = missing_citations(ROOT, pages(ROOT))
    assert not missing, "the docs cite files that do not exist:\n" + "\n".join(missing)


def test_the_check_sees_a_stale_path(tmp_path):
    (tmp_path / "spmd" / "jit").mkdir(parents=True)
    (tmp_path / "spmd" / "jit" / "running.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("See `spmd/jit/running.py` and jit/running.py; run train.py.\n")
    (tmp_path / "docs" / "a.md").write_text("one\n`runtime/context.py`, (spmd/jit/lowering.py)\n")
    assert missing_citations(tmp_path, pages(tmp_path)) == [
        "docs/a.md:2 cites runtime/context.py", "docs/a.md:2 cites spmd/jit/lowering.py"]
