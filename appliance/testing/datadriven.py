"""Reader and rewriter for data-driven test files in etcd's `datadriven` style.

A file is a sequence of cases separated by blank lines:

    command arg key=value key=(a,b)
    ----
    expected output lines

Lines starting with '#' before a command are comments and are kept on rewrite. Output never
contains blank lines (the renderers guarantee it), so a blank line always ends a case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Case:
    line: int
    comments: tuple[str, ...]
    command: str
    args: tuple[str, ...]
    options: dict[str, str] = field(default_factory=dict)
    expected: str = ""

    def header(self) -> str:
        parts = [self.command, *self.args]
        parts += [f"{key}={value}" for key, value in self.options.items()]
        return " ".join(parts)


def parse_command(text: str) -> tuple[str, tuple[str, ...], dict[str, str]]:
    words = text.split()
    assert words, "empty command"
    args: list[str] = []
    options: dict[str, str] = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if sep:
            options[key] = value.strip("()")
        else:
            args.append(word)
    return words[0], tuple(args), options


def read_cases(text: str) -> list[Case]:
    cases: list[Case] = []
    lines = text.splitlines()
    position = 0
    while position < len(lines):
        comments: list[str] = []
        while position < len(lines) and (not lines[position].strip() or lines[position].startswith("#")):
            if lines[position].startswith("#"):
                comments.append(lines[position])
            position += 1
        if position >= len(lines):
            break
        start = position + 1
        command, args, options = parse_command(lines[position])
        position += 1
        assert position < len(lines) and lines[position] == "----", f"line {start}: expected ----"
        position += 1
        output: list[str] = []
        while position < len(lines) and lines[position].strip():
            output.append(lines[position])
            position += 1
        cases.append(Case(start, tuple(comments), command, args, options, "\n".join(output)))
    return cases


def render_cases(cases: list[tuple[Case, str]]) -> str:
    blocks = []
    for case, output in cases:
        block = [*case.comments, case.header(), "----", output if output else "ok"]
        blocks.append("\n".join(block))
    return "\n\n".join(blocks) + "\n"


def run_file(path: Path, handler: Callable[[Case], str], *, rewrite: bool) -> list[str]:
    """Run every case; returns mismatch reports (empty when all match). Rewrites the file if asked."""
    cases = read_cases(path.read_text())
    results: list[tuple[Case, str]] = []
    mismatches: list[str] = []
    for case in cases:
        output = handler(case).rstrip("\n") or "ok"
        assert "\n\n" not in output, f"{path}:{case.line}: output must not contain blank lines"
        results.append((case, output))
        if output != (case.expected or "ok"):
            mismatches.append(f"{path.name}:{case.line}: {case.header()}\n--- expected\n{case.expected}\n"
                              f"--- got\n{output}")
    if rewrite:
        path.write_text(render_cases(results))
        return []
    return mismatches
