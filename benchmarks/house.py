"""The size and shape of gate/: lines, modules over 400 lines, duplicate pairs, import circles.

* lines: every line of every `.py` file under gate/ (as `wc -l` counts them), and what they are:
  blank, comment, docstring (a module's, class's or function's), field docstring (a string right
  after a class attribute: with `use_attribute_docstrings` a pydantic field's description, which the
  JSON schemas in schemas/ carry) and the rest, code;
* modules over 400 lines: their paths and sizes, largest first;
* duplicate pairs: the `duplicates` command (on PATH) over gate/ (its default: runs of 6 or more
  identical or same-shape lines), the count from its first line, boilerplate pairs included; then
  by kind, from its rows: the same text, the same shape (alike but for names and values), and of
  those the ones it marks boilerplate (most of what they share is punctuation and keywords, or a
  shape that recurs across a folder);
* import circles: the strongly connected components of more than one module in gate/'s import
  graph (grimp, as lint-imports builds it), type-only imports (`if TYPE_CHECKING:`) and imports
  inside functions included; each circle once, with its modules. A second count leaves the
  type-only imports out, so a circle made only of them shows as such.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/house.py --out benchmarks/house.md
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 400


def line_counts(package: Path) -> dict[str, int]:
    """Lines per `.py` file under `package`, keyed by its path relative to the repository root."""
    return {
        str(path.relative_to(ROOT)): len(path.read_bytes().splitlines())
        for path in sorted(package.rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def composition(package: Path) -> dict[str, int]:
    """Lines under `package` by kind: blank, comment, docstring, field docstring, code (the rest)."""
    kinds = dict.fromkeys(("blank", "comment", "docstring", "field docstring", "code"), 0)
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        text = path.read_text()
        lines = text.splitlines()
        kinds["blank"] += sum(1 for line in lines if not line.strip())
        kinds["comment"] += sum(1 for line in lines if line.strip().startswith("#"))
        for node in ast.walk(ast.parse(text)):
            body = getattr(node, "body", None)
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not body:
                continue
            for i, stmt in enumerate(body):
                if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                    continue
                if not isinstance(stmt.value.value, str):
                    continue
                n = (stmt.end_lineno or stmt.lineno) - stmt.lineno + 1
                if i == 0:
                    kinds["docstring"] += n
                elif isinstance(node, ast.ClassDef) and isinstance(body[i - 1], (ast.AnnAssign, ast.Assign)):
                    kinds["field docstring"] += n
        kinds["code"] += len(lines)
    kinds["code"] -= sum(v for k, v in kinds.items() if k != "code")
    return kinds


def duplicate_pairs(package: Path) -> tuple[int, list[str]]:
    """The count of duplicate pairs under `package` and the rows `duplicates` prints (at most 200)."""
    if shutil.which("duplicates") is None:
        sys.exit("house.py: the `duplicates` command is not on PATH")
    out = subprocess.run(
        ["duplicates", "--repo", str(package), "--most", "200", "--seconds", "120"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    head = re.match(r"(\d+) pairs", out[0]) if out else None
    if head is None:
        if out and out[0].startswith("no duplicates"):
            return 0, []
        sys.exit(f"house.py: unexpected first line from duplicates: {out[:1]}")
    incomplete = [line for line in out if line.startswith("incomplete:")]
    if incomplete:
        sys.exit(f"house.py: duplicates did not read the whole tree: {incomplete[0]}")
    return int(head.group(1)), [line for line in out[1:] if re.match(r"D\d+ ", line)]


def by_kind(rows: list[str], pairs: int) -> str:
    """The pairs `rows` lists, split by kind: same text, same shape (boilerplate among them)."""
    shape = [row for row in rows if " shape" in row]
    boilerplate = sum(" boilerplate" in row for row in shape)
    listed = "" if len(rows) == pairs else f" (of the {len(rows)} listed)"
    return f"{len(rows) - len(shape)}, {len(shape)} ({boilerplate}){listed}"


def circles(package: str, *, type_only: bool) -> list[list[str]]:
    """The import graph's strongly connected components of two or more modules (Tarjan's, iterative)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=not type_only, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def report() -> str:
    package = ROOT / "gate"
    sizes = line_counts(package)
    large = sorted(((n, p) for p, n in sizes.items() if n > LIMIT), reverse=True)
    kinds = composition(package)
    pairs, rows = duplicate_pairs(package)
    all_circles = circles("gate", type_only=True)
    runtime = circles("gate", type_only=False)
    lines = [
        "# The house: gate/'s size and shape",
        "",
        "Measured by `PYTHONPATH=$PWD .venv/bin/python benchmarks/house.py --out benchmarks/house.md` "
        "(definitions in its docstring).",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| lines in gate/ (.py, {len(sizes)} files) | {sum(sizes.values())} |",
        f"| modules over {LIMIT} lines | {len(large)} |",
        f"| duplicate pairs in gate/ (`duplicates`, 6+ lines) | {pairs} |",
        f"| ... of the same text, of the same shape (of these, boilerplate) | {by_kind(rows, pairs)} |",
        f"| import circles, type-only imports included | {len(all_circles)} |",
        f"| import circles, type-only imports left out | {len(runtime)} |",
        "",
        "## What the lines are",
        "",
        "| kind | lines |",
        "| --- | --- |",
        *(f"| {kind} | {n} |" for kind, n in kinds.items()),
        "",
        f"## Modules over {LIMIT} lines",
        "",
        "| module | lines |",
        "| --- | --- |",
        *(f"| {path} | {n} |" for n, path in large),
        "",
        "## Import circles (type-only imports included)",
        "",
        *(f"- {len(c)} modules: {', '.join(c)}" for c in all_circles),
        *(["- none"] if not all_circles else []),
        "",
        "## Duplicate pairs (`duplicates --repo gate --most 200`)",
        "",
        "```",
        *rows,
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table here (Markdown)")
    args = parser.parse_args()
    text = report()
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
