"""report.md: the run (or sweep) summary as Markdown, for terminals and pull requests.

Same content as report.html in a compact form: the headline, the summary table (a column per
allocator), links to the figure files, then the configuration and the trace summary as
``key | value`` tables. Table cells escape the pipe character so any value is safe.
"""
from __future__ import annotations

from pathlib import Path

from reports.html_report import FigureEntry
from reports.tables import Row


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_md(header: list[str], rows: list[Row], corner: str = "metric") -> str:
    """A Markdown table: label (unit), then one cell per column."""
    lines = ["| " + " | ".join([corner, *map(_cell, header)]) + " |",
             "|" + "---|" + "---:|" * len(header)]
    for label, unit, cells in rows:
        name = f"{label} ({unit})" if unit else label
        lines.append("| " + " | ".join([_cell(name), *map(_cell, cells)]) + " |")
    return "\n".join(lines)


def pairs_md(pairs: list[tuple[str, str]]) -> str:
    """A two-column key/value table."""
    lines = ["| key | value |", "|---|---|"]
    lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in pairs]
    return "\n".join(lines)


def figures_md(figures: list[FigureEntry], base: Path) -> str:
    """A list of links to the figure files (skipped figures with the reason)."""
    lines = []
    for fig in figures:
        if fig.path is None:
            lines.append(f"- {fig.title}: not drawn ({fig.note})")
        else:
            lines.append(f"- [{fig.title}]({fig.path.relative_to(base).as_posix()})")
    return "\n".join(lines)


def document(title: str, lead: list[str], sections: list[tuple[str, str]]) -> str:
    """A whole Markdown document from (heading, body) sections."""
    parts = [f"# {title}", "", *lead, ""]
    for heading, body in sections:
        parts += [f"## {heading}", "", body, ""]
    return "\n".join(parts)
