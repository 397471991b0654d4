"""The report's text: Markdown from the measured operators, and that Markdown as HTML.

:func:`markdown` lays out a summary table (the last step of each operator against its
baseline, numpy and PyTorch), then per operator the table of runtimes and speedups per
step, the AutoTVM result, and each step's lowered-code diff, diagram and memory table.
:func:`html` turns the subset of Markdown it writes (headings, tables, fenced code, images,
paragraphs) into a standalone HTML page, so that no Markdown package is needed.
"""

from __future__ import annotations

import html as _html
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .assignment import OperatorReport


def fmt_seconds(s: float | None) -> str:
    """``1.23 ms``-style text, ``-`` for None."""
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _ratio(base: float | None, s: float | None) -> str:
    return "-" if base is None or s is None or s <= 0 else f"{base / s:.2f}x"


def _size(size: tuple[int, ...]) -> str:
    return " x ".join(map(str, size))


def step_table(rep: OperatorReport) -> str:
    """Runtimes and speedups per step: against the baseline, the step before, numpy and
    PyTorch (a speedup above 1 is faster than the reference)."""
    refs = rep.references
    torch_key = next((k for k in refs if k.startswith("PyTorch")), "PyTorch")
    base = rep.steps[0].measured.seconds if rep.steps else None
    rows = ["| step | status | time | vs baseline | vs step before | vs numpy | "
            f"vs {torch_key} |", "|---|---|---|---|---|---|---|"]
    before = None
    for i, st in enumerate(rep.steps):
        s = st.measured.seconds
        rows.append(f"| {i}. {st.title} | {st.measured.status} | {fmt_seconds(s)} | "
                    f"{_ratio(base, s)} | {_ratio(before, s) if i else '-'} | "
                    f"{_ratio(refs.get('numpy'), s)} | {_ratio(refs.get(torch_key), s)} |")
        before = s
    for name, s in refs.items():
        rows.append(f"| {name} | {'ok' if s is not None else 'not installed'} | "
                    f"{fmt_seconds(s)} | {_ratio(base, s)} | - | - | - |")
    if rep.tuned is not None:
        t = rep.tuned
        label = f"AutoTVM ({t.trials} of {t.space} configs)" if t.space else "AutoTVM"
        rows.append(f"| {label} | {t.status} | "
                    f"{fmt_seconds(t.seconds)} | {_ratio(base, t.seconds)} | - | "
                    f"{_ratio(refs.get('numpy'), t.seconds)} | "
                    f"{_ratio(refs.get(torch_key), t.seconds)} |")
    return "\n".join(rows)


def summary_table(reports: list[OperatorReport]) -> str:
    """One row per operator: baseline and last step, and the speedup between them."""
    rows = ["| operator | size | baseline | last step | speedup | numpy | PyTorch |",
            "|---|---|---|---|---|---|---|"]
    for rep in reports:
        first, last = rep.steps[0].measured, rep.steps[-1].measured
        torch = next((s for k, s in rep.references.items() if k.startswith("PyTorch")), None)
        last_text = fmt_seconds(last.seconds) if last.seconds is not None else last.status
        rows.append(f"| {rep.op.title} | {_size(rep.size)} | {fmt_seconds(first.seconds)} | "
                    f"{last_text} | {_ratio(first.seconds, last.seconds)}"
                    f" | {fmt_seconds(rep.references.get('numpy'))} | {fmt_seconds(torch)} |")
    return "\n".join(rows)


def _operator_section(rep: OperatorReport) -> list[str]:
    trace = _size(rep.op.sizes["trace"])
    out = [f"## {rep.op.title} (`examples/assignment/{rep.op.example}.py`)", "",
           f"Size {_size(rep.size)}, target `{rep.op.target}`.", "", step_table(rep), ""]
    if rep.tuned is not None and rep.tuned.config:
        out += [f"AutoTVM's best config: `{rep.tuned.config}`.", ""]
    for i, st in enumerate(rep.steps):
        out += [f"### {i}. {st.title}", ""]
        if i == 0:
            out += [f"Lowered code (size {trace}):", "", "```", st.lowered, "```", ""]
        else:
            out += [f"What this step changes in the lowered code (size {trace}):", "",
                    "```diff", st.diff or "(no change)", "```", ""]
        if st.figure:
            out += [f"![{rep.op.name} {st.title}]({st.figure})", ""]
        if st.memory:
            out += [st.memory, ""]
    return out


def markdown(reports: list[OperatorReport], *, quick: bool = False) -> str:
    """The whole report as Markdown."""
    sizes = "quick sizes (`--quick`)" if quick else "the course's sizes"
    lines = ["# The assignment, step by step", "",
             f"kiln's solutions of the assignment's operators at {sizes}: each step checked "
             "against numpy and timed (median), next to numpy and PyTorch and a short "
             "AutoTVM run of the operator's template. GPU steps run only where a GPU "
             "exists. The FPGA part (last section) runs on kiln's VTA simulator, in "
             "simulated cycles.", "",
             summary_table(reports), ""]
    for rep in reports:
        lines += _operator_section(rep)
    return "\n".join(lines)


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")
_CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> str:
    text = _html.escape(text, quote=False)
    text = _IMAGE.sub(lambda m: f'<img alt="{m[1]}" src="{m[2]}">', text)
    return _CODE.sub(lambda m: f"<code>{m[1]}</code>", text)


def _table(rows: list[str]) -> str:
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    head, body = cells[0], [r for r in cells[1:] if not all(set(c) <= set("-:") for c in r)]
    out = ["<table>", "<tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body]
    return "\n".join(out + ["</table>"])


def html(text: str, title: str = "report") -> str:
    """The Markdown subset :func:`markdown` writes, as a standalone HTML page."""
    body: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")),
                       len(lines))
            body.append("<pre>" + _html.escape("\n".join(lines[i + 1:end])) + "</pre>")
            i = end + 1
        elif line.startswith("|"):
            end = next((j for j in range(i, len(lines)) if not lines[j].startswith("|")),
                       len(lines))
            body.append(_table(lines[i:end]))
            i = end
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
            i += 1
        else:
            if line.strip():
                body.append(f"<p>{_inline(line)}</p>")
            i += 1
    style = ("body{font-family:sans-serif;max-width:60em;margin:auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
             "pre{background:#f6f6f6;padding:6px;overflow-x:auto}img{max-width:100%}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>"
            f"{_html.escape(title)}</title><style>{style}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
