"""Generate docs/api_parity.md: classic TVM's public Python API, name by name, against kiln.

Guarantees: the table lists every name of ``api_parity/tvm_names.txt`` (TVM 0.8-0.13 names with
their API_PRIORITY tier), each resolved under kiln's ``tvm`` alias by import + getattr only
(no GPU, nothing compiled) as ``present`` or ``missing``; ``tested`` is a text heuristic over
``tests/`` (see ``Mentions.mention``); ``reason`` comes from ``api_parity/reasons.txt``.

    python scripts/api_parity.py           # rewrite docs/api_parity.md
    python scripts/api_parity.py --check   # exit 1 when docs/api_parity.md is stale, or a
                                           # tier 1-3 gap has no line in reasons.txt
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "api_parity"
DOC = ROOT / "docs" / "api_parity.md"

# Sections of the table, in order; a name whose first component is none of these is top level.
MODULES = (
    "te", "tir", "topi", "relay", "autotvm", "rpc", "contrib", "testing", "ir", "transform",
    "runtime", "nd", "target", "driver", "auto_scheduler",
)
TOP_LEVEL = "tvm"


@dataclass(frozen=True)
class Entry:
    """One classic name and kiln's status for it."""

    name: str  # dotted, after ``tvm.``
    tier: str  # "1".."3" or "-"
    present: bool
    tested: bool
    reason: str

    @property
    def module(self) -> str:
        head = self.name.split(".")[0]
        return head if head in MODULES and "." in self.name else TOP_LEVEL


def read_table(path: Path) -> list[tuple[str, str]]:
    """Rows of a whitespace-separated data file: first field, rest of line; ``#`` comments."""
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, rest = line.partition(" ")
            rows.append((key, rest.strip()))
    return rows


def sets_in_init(cls: type, attr: str) -> bool:
    """Whether some ``__init__`` of ``cls``'s MRO assigns ``self.<attr>`` (an instance attribute,
    which getattr on the class cannot see)."""
    pattern = re.compile(rf"\bself\.{re.escape(attr)}\s*[:=]")
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            if pattern.search(inspect.getsource(init)):
                return True
        except (OSError, TypeError):  # a builtin's __init__ has no source
            continue
    return False


def resolve(name: str) -> bool:
    """Whether ``tvm.<name>`` resolves under kiln: getattr, importing submodules as needed."""
    obj = importlib.import_module("tvm")
    path = "tvm"
    parts = name.split(".")
    for i, part in enumerate(parts):
        path = f"{path}.{part}"
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            pass
        except ImportError:  # a lazily loaded submodule whose optional dependency is absent
            return False
        if isinstance(obj, type) and i == len(parts) - 1:
            return sets_in_init(obj, part)
        try:
            obj = importlib.import_module(path)
        except ImportError:
            return False
    return True


@dataclass(frozen=True)
class Mentions:
    """The identifiers the test sources use: bare words, attribute names (``x.leaf``) and
    adjacent dotted pairs (``parent.leaf``), collected once for the ``tested`` heuristic."""

    words: frozenset[str]
    attributes: frozenset[str]
    pairs: frozenset[str]

    @classmethod
    def scan(cls, tests_dir: Path) -> Mentions:
        words: set[str] = set()
        attributes: set[str] = set()
        pairs: set[str] = set()
        for path in sorted(tests_dir.rglob("*.py")):
            text = path.read_text("utf-8", "replace")
            attributes.update(re.findall(r"\.([A-Za-z_]\w*)", text))  # also s[B].split, f().x
            for chain in re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", text):
                parts = chain.split(".")
                words.update(parts)
                pairs.update(f"{a}.{b}" for a, b in itertools.pairwise(parts))
        return cls(frozenset(words), frozenset(attributes), frozenset(pairs))

    def mention(self, name: str) -> bool:
        """Heuristic: a test uses ``parent.leaf`` (``te.compute``, ``nd.array``), or, for a
        method or property written on its class (``te.Stage.split``), ``<anything>.leaf``.
        A hit means "mentioned in a test", not "checked"."""
        parts = name.split(".")
        if len(parts) == 1:
            return name in self.words
        if parts[-2][:1].isupper():
            return parts[-1] in self.attributes
        return f"{parts[-2]}.{parts[-1]}" in self.pairs


def collect() -> list[Entry]:
    """Resolve every listed name under kiln's ``tvm`` alias."""
    sys.path.insert(0, str(ROOT))
    import kiln

    kiln.install_as_tvm()
    reasons = dict(read_table(DATA / "reasons.txt"))
    mentions = Mentions.scan(ROOT / "tests")
    return [
        Entry(name, tier or "-", resolve(name), mentions.mention(name), reasons.get(name, ""))
        for name, tier in read_table(DATA / "tvm_names.txt")
    ]


def by_module(entries: list[Entry]) -> dict[str, list[Entry]]:
    """Entries grouped by section, in ``MODULES`` order after the top level; empty ones dropped."""
    groups: dict[str, list[Entry]] = {m: [] for m in (TOP_LEVEL, *MODULES)}
    for e in entries:
        groups[e.module].append(e)
    return {m: es for m, es in groups.items() if es}


def tier_gaps(entries: list[Entry]) -> list[Entry]:
    """API_PRIORITY tier 1-3 names that are not both present and tested."""
    return [e for e in entries if e.tier != "-" and not (e.present and e.tested)]


def render(entries: list[Entry]) -> str:
    """The markdown page: summary per module, tier 1-3 gaps, then one table per module."""
    groups = by_module(entries)
    out = [
        "# Classic TVM API parity",
        "",
        "Generated by `python scripts/api_parity.py` (do not edit by hand; "
        "`--check` fails when stale). Names: TVM 0.8-0.13's public Python API as classic "
        "programs spell it after `import tvm` (`scripts/api_parity/tvm_names.txt`, tiers from "
        "API_PRIORITY.md); methods are written on their class (`s[T].split` is `te.Stage.split`).",
        "",
        "- **status**: `present` when `tvm.<name>` resolves under `kiln.install_as_tvm()` "
        "(import and getattr only; behaviour is covered by the tests, not by this table).",
        "- **tested**: a text heuristic: the name (`parent.leaf`, or `.leaf` for a member "
        "written on its class) appears in `tests/`; `yes` means mentioned, not proven correct.",
        "- **reason**: why a name is missing or untested (`scripts/api_parity/reasons.txt`).",
        "",
        "## Summary",
        "",
        "| module | present | missing | total |",
        "|---|---:|---:|---:|",
    ]
    for module, es in groups.items():
        present = sum(e.present for e in es)
        out.append(f"| {module} | {present} | {len(es) - present} | {len(es)} |")
    present = sum(e.present for e in entries)
    out += [f"| **all** | {present} | {len(entries) - present} | {len(entries)} |", ""]
    gaps = tier_gaps(entries)
    out += ["## Tier 1-3 names not present and tested", ""]
    if gaps:
        out += ["| name | tier | status | tested | reason |", "|---|---|---|---|---|"]
        out += [_row(e) for e in gaps]
    else:
        out.append("None: every tier 1-3 name is present and mentioned in a test.")
    out.append("")
    for module, es in groups.items():
        title = "top level (`tvm.*`)" if module == TOP_LEVEL else f"`tvm.{module}`"
        out += [f"## {title}", "", "| name | tier | status | tested | reason |",
                "|---|---|---|---|---|"]
        out += [_row(e) for e in es]
        out.append("")
    return "\n".join(out)


def _row(e: Entry) -> str:
    status = "present" if e.present else "**missing**"
    tested = "yes" if e.tested else "no"
    return f"| `tvm.{e.name}` | {e.tier} | {status} | {tested} | {e.reason} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the doc is stale")
    args = parser.parse_args(argv)
    entries = collect()
    text = render(entries)
    if args.check:
        unexplained = [e.name for e in tier_gaps(entries) if not e.reason]
        if unexplained:
            print(f"tier 1-3 names neither present and tested nor given a reason: {unexplained}")
            return 1
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC.relative_to(ROOT)} is stale: run python scripts/api_parity.py")
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
