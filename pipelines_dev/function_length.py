"""`make lint`: no function (or method) longer than a screen, 80 lines from its first
decorator to its last line. ruff's PLR0915 counts statements, not lines; this counts lines.

    python -m pipelines_dev.function_length pipelines [--max 80]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

MAX_LINES = 80


def long_functions(path: Path, max_lines: int = MAX_LINES) -> list[str]:
    """'<path>:<line>: <name> is N lines (at most M)' for each function of `path` over."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - start + 1
            if lines > max_lines:
                found.append(f"{path}:{start}: {node.name} is {lines} lines (at most {max_lines})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines_dev.function_length")
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--max", type=int, default=MAX_LINES, dest="max_lines")
    args = parser.parse_args(argv)
    found = [
        line
        for root in args.roots
        for path in sorted(root.rglob("*.py") if root.is_dir() else [root])
        for line in long_functions(path, args.max_lines)
    ]
    print("\n".join(found) if found else f"no function over {args.max_lines} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
