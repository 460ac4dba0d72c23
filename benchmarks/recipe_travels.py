"""Does the recipe travel? Issue 19's acceptance run, printed as one table.

For every hazard model of ``testbed`` (tests/testbed) and a 10-architecture subset of
the breadth set (their stressed twins), in fp16 and bf16:

1. ``tune`` gives a recipe and a tuned model; the tuned model is saved;
2. a *fresh process* loads each file with ``halfprec.load(path, into=builder)`` and no
   config, runs the batches and reports whether every output is bit-identical to the tuned
   in-memory model's (``load``);
3. streaming ``convert_file`` of the fp32 checkpoint with the same recipe writes the same
   tensors as ``save(convert(model, recipe))`` (``stream``);
4. ``copy.deepcopy``, ``pickle`` and ``torch.save``/``torch.load`` give identical outputs
   (``copies``);
5. ``torch._dynamo.explain`` graph counts: fp32, converted with defaults, tuned; and
   whether ``torch.compile(fullgraph=True)`` traces the tuned model (``graphs``).

Then the graph counts of MiniLM (real weights), BERT-base and GPT-2.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python3 benchmarks/recipe_travels.py [--quick]
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch._dynamo as dynamo
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

import halfprec
from halfprec.batch import call
from halfprec.io.stream import convert_file
from halfprec.timing import now
from halfprec.tree import flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testbed/
from testbed import breadth_models  # noqa: E402
from testbed.hazards import HAZARDS  # noqa: E402
from testbed.root_hazards import ROOT_HAZARDS  # noqa: E402

BREADTH = ("bert", "gpt2", "llama", "t5", "vit", "distilbert", "mistral", "bart", "opt", "albert")


def _cases(quick: bool) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    for name, h in {**HAZARDS, **ROOT_HAZARDS}.items():
        cases[name] = h.build
    for name in BREADTH[: 3 if quick else None]:
        a = breadth_models.arch(name)

        def build(a: Any = a) -> tuple[nn.Module, list[Any]]:
            return breadth_models.build(a, stress=True), [breadth_models.example_batch(a)]

        cases[f"hf-{name}"] = build
    return dict(list(cases.items())[:6]) if quick else cases


def _outputs(model: nn.Module, batches: list[Any]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for i, b in enumerate(batches):
            for k, v in flatten(call(model, b)).items():
                out[f"{i}/{k}"] = v.detach().contiguous()
    return out


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _graphs(model: nn.Module, batch: Any) -> int:
    dynamo.reset()
    args, kwargs = (batch, {}) if isinstance(batch, tuple) else ((), batch)
    return int(dynamo.explain(model)(*args, **kwargs).graph_count)


def _fullgraph(model: nn.Module, batch: Any) -> bool:
    dynamo.reset()
    try:
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        with torch.no_grad():
            call(compiled, batch)
    except Exception:  # noqa: BLE001 - any failure is the finding
        return False
    return True


def _copies(model: nn.Module, batches: list[Any], expected: dict[str, torch.Tensor]) -> bool:
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    others = [
        copy.deepcopy(model),
        pickle.loads(pickle.dumps(model)),
        torch.load(buf, weights_only=False),
    ]
    return all(_same(_outputs(m, batches), expected) for m in others)


def _stream(model: nn.Module, build: Any, recipe: halfprec.Recipe, tmp: Path) -> bool:
    src, streamed, memory = tmp / "fp32.st", tmp / "s.safetensors", tmp / "m.safetensors"
    halfprec.save(model, src.with_suffix(".safetensors"))
    convert_file(src.with_suffix(".safetensors"), streamed, lambda: build()[0], recipe)
    halfprec.save(halfprec.convert(model, recipe), memory)
    with safe_open(str(streamed), "pt") as a, safe_open(str(memory), "pt") as b:
        same = set(a.keys()) == set(b.keys())
        same = same and all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())  # noqa: SIM118
        return same and a.metadata()["recipe"] == b.metadata()["recipe"]


def _child(plan_path: str) -> None:
    """The fresh process: load each file with no config, compare with the saved outputs."""
    plan = json.loads(Path(plan_path).read_text())
    cases = _cases(plan["quick"])
    verdicts = {}
    for key, item in plan["items"].items():
        build = cases[item["case"]]
        _, batches = build()
        loaded = halfprec.load(item["file"], into=lambda build=build: build()[0])
        verdicts[key] = _same(_outputs(loaded, batches), load_file(item["outputs"]))
    print(json.dumps(verdicts))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="6 cases, for a smoke run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    start = now()
    rows: list[dict[str, Any]] = []
    plan: dict[str, Any] = {"quick": args.quick, "items": {}}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for case, build in _cases(args.quick).items():
            model, batches = build()
            for dtype in ("fp16", "bf16"):
                key = f"{case}/{dtype}"
                row: dict[str, Any] = {"case": case, "dtype": dtype}
                result = halfprec.tune(model, batches, dtype, max_evaluations=16)
                recipe = result.recipe
                tuned = result.model
                if recipe is None or tuned is None:  # nothing passed: still a recipe to test
                    tuned = halfprec.convert(model, dtype)
                    recipe = halfprec.recipe_of(tuned)
                assert recipe is not None
                row["tuned"] = result.passed
                row["islands"] = f"{len(recipe.keep_fp32)}m+{len(recipe.op_islands)}op"
                expected = _outputs(tuned, batches)
                file = tmp / f"{len(plan['items'])}.safetensors"
                halfprec.save(tuned, file)
                save_file(expected, str(file.with_suffix(".out")))
                plan["items"][key] = {
                    "case": case,
                    "file": str(file),
                    "outputs": str(file.with_suffix(".out")),
                }
                row["copies"] = _copies(tuned, batches, expected)
                row["stream"] = _stream(model, build, recipe, tmp)
                first = batches[0]
                row["graphs"] = (
                    f"{_graphs(model, first)}/{_graphs(halfprec.convert(model, dtype), first)}"
                    f"/{_graphs(tuned, first)}"
                )
                row["fullgraph"] = _fullgraph(tuned, first)
                rows.append(row)
                print(json.dumps(row), flush=True)
        plan_path = tmp / "plan.json"
        plan_path.write_text(json.dumps(plan))
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
        child = subprocess.run(
            [sys.executable, __file__, "--child", str(plan_path)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        loaded = json.loads(child.stdout.strip().splitlines()[-1])
    for row in rows:
        row["load"] = loaded[f"{row['case']}/{row['dtype']}"]
    print(
        "\n| case | dtype | tuned | islands | load (fresh process) | stream | copies "
        "| graphs fp32/convert/tuned | fullgraph |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['dtype']} | {r['tuned']} | {r['islands']} | {r['load']} | "
            f"{r['stream']} | {r['copies']} | {r['graphs']} | {r['fullgraph']} |"
        )
    ok = lambda k: sum(bool(r[k]) for r in rows)  # noqa: E731
    same_graphs = sum(len(set(r["graphs"].split("/"))) == 1 for r in rows)
    print(
        f"\n{len(rows)} runs: load bit-identical {ok('load')}, stream identical {ok('stream')}, "
        f"copies identical {ok('copies')}, equal graph counts {same_graphs}, fullgraph "
        f"{ok('fullgraph')}; {now() - start:.0f} s"
    )
    if not args.quick:
        _zoo_graphs()


def _zoo_graphs() -> None:
    from halfprec.io.zoo import BUILTINS

    print("\n| model | dtype | graphs fp32 | graphs converted | fullgraph |")
    print("|---|---|---|---|---|")
    for name in ("minilm", "bert-base", "gpt2"):
        model, batches = BUILTINS[name].build()
        batch = batches[0]
        for dtype in ("fp16", "bf16"):
            half = halfprec.convert(model, dtype)
            print(
                f"| {name} | {dtype} | {_graphs(model, batch)} | {_graphs(half, batch)} | "
                f"{_fullgraph(half, batch)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
