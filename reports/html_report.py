"""report.html: one self-explaining page per run (or per sweep), images referenced by path.

The page opens with what was run and a short glossary, then the summary table (a column per
allocator), every figure with a caption saying how to read it, the configuration and the
trace summary. Images are separate files referenced by relative paths, so the page stays small
and the images can be reused; everything else is inline (no scripts, no external CSS).
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

from reports.tables import Row

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1150px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em;
       margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
thead th { background: #f2f2f2; } tbody tr:nth-child(even) { background: #fafafa; }
figure { margin: 1.2em 0 2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.93em; max-width: 60em; }
.lead { font-size: 1.05em; } .note { color: #666; font-style: italic; }
.unit { color: #777; font-weight: normal; } nav a { margin-right: 1em; }
"""


@dataclass(frozen=True, slots=True)
class FigureEntry:
    """One figure of a report: its file (None when skipped, with the reason in ``note``)."""

    slug: str
    title: str
    caption: str
    path: Path | None = None
    note: str = ""


def table_html(header: list[str], rows: list[Row], corner: str = "") -> str:
    """A table whose first column is a label with its unit, then one cell per column."""
    head = "".join(f"<th>{escape(h)}</th>" for h in [corner, *header])
    body = []
    for label, unit, cells in rows:
        unit_html = f' <span class="unit">({escape(unit)})</span>' if unit else ""
        body.append(f"<tr><th>{escape(label)}{unit_html}</th>"
                    + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def pairs_html(pairs: list[tuple[str, str]]) -> str:
    """A two-column key/value table."""
    body = "".join(f'<tr><th>{escape(k)}</th><td class="text">{escape(v)}</td></tr>'
                   for k, v in pairs)
    return f"<table><tbody>{body}</tbody></table>"


def figures_html(figures: list[FigureEntry], base: Path) -> str:
    """Every figure with its caption; skipped ones as a note."""
    parts = []
    for fig in figures:
        if fig.path is None:
            parts.append(f'<h3 id="{fig.slug}">{escape(fig.title)}</h3>'
                         f'<p class="note">Not drawn: {escape(fig.note)}</p>')
            continue
        src = fig.path.relative_to(base).as_posix()
        parts.append(f'<figure id="{fig.slug}"><h3>{escape(fig.title)}</h3>'
                     f'<img src="{escape(src)}" alt="{escape(fig.title)}">'
                     f"<figcaption>{escape(fig.caption)}</figcaption></figure>")
    return "\n".join(parts)


def page(title: str, sections: list[tuple[str, str, str]], lead: list[str],
         footer: str) -> str:
    """A whole page: ``sections`` are (anchor, heading, inner HTML), listed in a nav bar."""
    nav = "".join(f'<a href="#{a}">{escape(h)}</a>' for a, h, _ in sections)
    body = "\n".join(f'<h2 id="{a}">{escape(h)}</h2>\n{inner}' for a, h, inner in sections)
    lead_html = "".join(f'<p class="lead">{escape(line)}</p>' for line in lead)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
            f"<h1>{escape(title)}</h1>{lead_html}<nav>{nav}</nav>\n{body}\n"
            f'<hr><p class="note">{escape(footer)}</p></body></html>\n')
