"""Measure ``halfprec lint`` on a model library's source it was never tuned on.

    pip download --no-deps --only-binary=:all: timm -d /tmp/wheels
    unzip -q /tmp/wheels/timm-*.whl -d /tmp/corpus/timm
    PYTHONPATH=src:benchmarks python benchmarks/lint_corpus.py timm /tmp/corpus/timm \
        [--seed 0] [--sample 25] [--fix]

1. Lints every ``.py`` file under the folder with the default rules and times it.
2. Draws a seeded sample: every HP101 finding where there are at most 50 (else 50), and
   ``--sample`` of the *non-findings*: calls ``torch.<factory>(...)`` without ``dtype=`` in a
   function on a forward path that the lint leaves alone (the plain count of
   benchmarks/lint_transformers.py).
   A later run keeps the earlier sample's non-findings that are still non-findings and
   tops it up with seeded draws, so a rule change asks only for the new sites' verdicts.
   Every HP3 finding (at most 50) is drawn too: its verdict is ``leak`` when the constant
   does end up out of range in a half tensor (it overflows or raises), else ``no leak``.
   A judged finding that the rules no longer report and the draw leaves out is kept as an
   ``earlier finding`` (HP3: ``earlier HP3 finding``) with its verdict, outside the figures.
3. Reads the verdicts from benchmarks/data/lint_corpus/LIB.json (``leak`` or ``no leak`` and
   a one-line reason per item, filled in by hand; a new sample is written with empty verdicts)
   and prints precision and recall with 95% Wilson intervals. A *leak*: in the model
   converted to half, the fp32 tensor meets a half tensor in a floating op, or reaches the
   module's output, with no cast in between.
4. With ``--fix``: applies every fix (``--unsafe-fixes`` too) to every file and checks that
   each fixed file still compiles.

Recall: the sampled miss rate times the number of non-findings estimates the leaks missed;
its Wilson interval bounds them, and recall = found leaks / (found leaks + missed leaks).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
from pathlib import Path
from typing import Any

from halfprec import ops
from halfprec.leaks.lint import LintConfig, fix_source, lint_paths
from halfprec.leaks.lint.scope import forward_paths, imports_of
from halfprec.leaks.lint.source import split_lines
from halfprec.timing import now

DATA = Path(__file__).parent / "data" / "lint_corpus"
MAX_FINDINGS = 50
Site = tuple[str, int, int]


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion ``hits / n``."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def plain_sites(root: Path, path: Path) -> set[Site]:
    """Every ``torch.<factory>(...)`` without ``dtype=`` in a function on a forward path."""
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    torch_names = imports_of(tree).torch
    rel = str(path.relative_to(root))
    out: set[Site] = set()
    lines = split_lines(source)
    for fp in forward_paths(tree, lines):
        for node in ast.walk(fp.function):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            if not (isinstance(owner, ast.Name) and owner.id in torch_names):
                continue
            if not ops.is_factory(node.func.attr):
                continue
            if any(k.arg in ("dtype", None) for k in node.keywords):
                continue
            # ast counts columns in UTF-8 bytes, the lint (like ruff) in characters
            head = lines[node.lineno - 1].encode()[: node.col_offset]
            out.add((rel, node.lineno, len(head.decode(errors="replace")) + 1))
    return out


def _line(root: Path, site: Site) -> str:
    lines = (root / site[0]).read_text(encoding="utf-8", errors="replace").splitlines()
    return lines[site[1] - 1].strip()


def sample(
    lib: str,
    root: Path,
    found: set[Site],
    plain: set[Site],
    seed: int,
    size: int,
    hp3: dict[Site, str] | None = None,
) -> dict[str, Any]:
    path = DATA / f"{lib}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    rng = random.Random(seed)
    left = plain - found
    # a sample kept across rule changes: the earlier sample's sites that are still
    # non-findings stay, topped up by seeded draws from the rest (a uniform sample of
    # the new non-findings still), so only the sites new to it need a verdict
    kept = [
        (i["path"], i["line"], i["col"])
        for i in old.get("items", [])
        if old.get("seed") == seed and i["kind"] == "non-finding"
    ]
    kept = [site for site in kept if site in left][:size]
    rest = sorted(left - set(kept))
    hp3 = hp3 or {}
    picked = {
        "finding": rng.sample(sorted(found), min(MAX_FINDINGS, len(found))),
        "non-finding": kept + rng.sample(rest, min(size - len(kept), len(rest))),
        "HP3 finding": rng.sample(sorted(hp3), min(MAX_FINDINGS, len(hp3))),
    }
    verdicts = {(i["path"], i["line"], i["col"]): i for i in old.get("items", [])}
    items = []
    for kind, sites in picked.items():
        for site in sorted(sites):
            was = verdicts.get(site, {})
            rule = {"rule": hp3[site]} if kind == "HP3 finding" else {}
            items.append(
                {
                    "kind": kind,
                    **rule,
                    "path": site[0],
                    "line": site[1],
                    "col": site[2],
                    "code": _line(root, site),
                    "verdict": was.get("verdict"),
                    "why": was.get("why", ""),
                }
            )
    items += _earlier(old, found, {s for sites in picked.values() for s in sites})
    data = {
        "library": lib,
        "seed": seed,
        "findings": len(found),
        "non_findings": len(plain - found),
        "items": items,
    }
    if data != old:
        DATA.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {path}")
    return data


def _earlier(old: dict[str, Any], found: set[Site], picked: set[Site]) -> list[dict[str, Any]]:
    """The judged findings of an earlier run that the rules no longer report and the seeded
    sample did not draw: kept with their verdicts as ``earlier finding`` (an HP3 one as
    ``earlier HP3 finding``; a re-judged verdict stays on record), outside the figures."""
    kept = []
    for i in old.get("items", []):
        site = (i["path"], i["line"], i["col"])
        hp3 = i["kind"] in ("HP3 finding", "earlier HP3 finding")
        was_found = hp3 or i["kind"] in ("finding", "earlier finding")
        if was_found and i.get("verdict") and site not in found and site not in picked:
            kept.append({**i, "kind": "earlier HP3 finding" if hp3 else "earlier finding"})
    return kept


def measure(data: dict[str, Any]) -> None:
    items = data["items"]
    if any(i["verdict"] not in ("leak", "no leak") for i in items):
        print("precision/recall: hand-check the verdicts first")
        return
    flagged = [i for i in items if i["kind"] == "finding"]
    left = [i for i in items if i["kind"] == "non-finding"]
    tp = sum(i["verdict"] == "leak" for i in flagged)
    missed = sum(i["verdict"] == "leak" for i in left)
    if flagged:
        lo, hi = wilson(tp, len(flagged))
        share = tp / len(flagged)
        print(f"HP101 precision: {tp}/{len(flagged)} = {share:.0%} (95% Wilson {lo:.0%}-{hi:.0%})")
    else:
        print("HP101 precision: no findings")
    checked = [i for i in items if i["kind"] == "HP3 finding"]
    if checked:
        right = sum(i["verdict"] == "leak" for i in checked)
        lo, hi = wilson(right, len(checked))
        print(f"HP3 precision: {right}/{len(checked)} (95% Wilson {lo:.0%}-{hi:.0%})")
    found_leaks = tp / len(flagged) * data["findings"] if flagged else 0.0
    every = len(left) == data["non_findings"]  # the sample is every non-finding: exact
    m_lo, m_hi = (missed / len(left),) * 2 if every and left else wilson(missed, len(left))
    est = missed / len(left) * data["non_findings"] if left else 0.0

    def recall(m: float) -> str:
        return f"{found_leaks / (found_leaks + m):.0%}" if found_leaks + m else "n/a (no leaks)"

    span = (
        "exact: every non-finding checked"
        if every
        else (f"95%: {recall(m_hi * data['non_findings'])}-{recall(m_lo * data['non_findings'])}")
    )
    if not found_leaks and not every:
        span = f"95%: at most {m_hi * data['non_findings']:.0f} leaks missed"
    print(
        f"HP101 recall: {missed}/{len(left)} sampled non-findings are leaks -> ~{est:.0f} of "
        f"{data['non_findings']} missed; recall {recall(est)} ({span})"
    )


def fix_all(root: Path, files: list[Path]) -> None:
    config = LintConfig(select=("HP",), unsafe_fixes=True)
    changed = broken = 0
    for path in files:
        source = path.read_text(encoding="utf-8", errors="replace")
        fixed = fix_source(source, config)
        if fixed == source:
            continue
        changed += 1
        try:
            compile(fixed, str(path), "exec")
        except SyntaxError as exc:
            broken += 1
            print(f"does not compile after --fix: {path.relative_to(root)}: {exc}")
    print(f"--fix --unsafe-fixes --select HP: {changed} files rewritten, {broken} do not compile")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("lib")
    parser.add_argument("root", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=25)
    parser.add_argument("--fix", action="store_true")
    args = parser.parse_args()
    root: Path = args.root
    start = now()
    report = lint_paths([root], LintConfig())
    took = now() - start
    print(f"{args.lib}: {len(report.files)} files linted in {took:.2f} s; {report.counts()}")
    found = {
        (str(Path(f.path).relative_to(root)), f.line, f.col)
        for f in report.findings
        if f.code == "HP101"
    }
    plain: set[Site] = set()
    for r in report.files:
        plain |= plain_sites(root, Path(r.path))
    hp3 = {
        (str(Path(f.path).relative_to(root)), f.line, f.col): f.code
        for f in report.findings
        if f.code.startswith("HP3")
    }
    print(f"factory calls without dtype on forward paths: {len(plain)}; HP101: {len(found)}")
    measure(sample(args.lib, root, found, plain, args.seed, args.sample, hp3))
    if args.fix:
        fix_all(root, [Path(r.path) for r in report.files])


if __name__ == "__main__":
    main()
