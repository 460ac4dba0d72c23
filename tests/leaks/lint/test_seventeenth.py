"""Round sixteen's class A from freezes G and H (issue 41), each on small models written for
this test, none copied from a library:

- ``t.to(<device>)`` is a move, not a cast, decided from the data flow (:mod:`.devices`):
  a helper of this or another file, a method or property of the class that returns a
  device, a name bound to one, a parameter annotated or defaulting as one, an index, and
  by name where nothing resolves; ``.to(x)``, ``.to(x.dtype)``, ``.to(dev, dtype)``,
  ``.type_as`` and ``.to(**kwargs)`` stay casts;
- a torch layer's subclass holds half ``weight``/``bias`` (with or without a ``forward``
  of its own), and a value that reaches the output directly is reported even when it also
  goes through a submodule the lint cannot see;
- a keyed store ``td.set(key, t)`` holds ``t`` under ``key``; a value computed from the
  entry it replaces makes that entry fp32 (:mod:`.keyedstores`);
- a fix reads only a receiver bound and not None on its path (:mod:`.receivers`).

Each test fails on the rules before this round; its silent siblings are asserted beside.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from halfprec.leaks.lint import fix_source, lint_paths
from support.lint_models import HEAD_F, Snippets, package

LINT = Snippets(HEAD_F, prefix="HP")
_found, _module = LINT.found, LINT.model


def _fixes(body: str) -> list[tuple[int, str | None]]:
    return [(n, f.fix.text if f.fix else None) for n, f in LINT.findings(body)]


# -- a move to a device is not a cast ---------------------------------------------------------
_HELPER = """\
def module_place(module):
    return next(module.parameters()).device
"""

_GENERATOR = """\
import torch
from torch import nn

from .place import module_place


class Sampler(nn.Module):
    def __init__(self, z):
        super().__init__()
        self.z = z
        self.head = nn.Linear(z, 8)

    def forward(self, noise=None, n=2):
        if noise is None:
            noise = torch.randn(n, self.z)
        {move}
        return self.head(noise)
"""

_MOVES = {
    "inline helper": "noise = noise.to(module_place(self))",
    "helper bound to a name": "at = module_place(self)\n        noise = noise.to(at)",
}


def _package(tmp_path: Path, move: str) -> Path:
    files = {"place.py": _HELPER, "sampler.py": _GENERATOR.format(move=move)}
    return package(tmp_path / "gen", files)


@pytest.mark.parametrize("form", sorted(_MOVES))
def test_noise_moved_by_a_device_helper_of_another_file_is_reported(
    tmp_path: Path, form: str
) -> None:
    pkg = _package(tmp_path, _MOVES[form])
    found = [
        (Path(f.path).name, f.line, f.code) for r in lint_paths([pkg]).files for f in r.findings
    ]
    assert found == [("sampler.py", 15, "HP101")]
    sys.path.insert(0, str(tmp_path))
    try:
        model = importlib.import_module("gen.sampler").Sampler(4).to(torch.bfloat16)
        with pytest.raises(RuntimeError):  # fp32 noise meets the bf16 weight
            model()
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "gen" or n.startswith("gen.")]:
            del sys.modules[name]


_ONE_FILE = """\
def pick_place(t):
    return t.device


class Sampler(nn.Module):
    def __init__(self, z):
        super().__init__()
        self.z = z
        self.head = nn.Linear(z, 8)

    def _home(self):
        return self.head.weight.device

    @property
    def where(self):
        return torch.device("cpu")

    def _kind(self):
        return self.head.weight.dtype

    def forward(self, x, spot: torch.device, slot="cpu", dtype=None, n=2, **kw):
        noise = torch.randn(n, self.z)
        {move}
        return self.head(noise) + x
"""

MOVED = {
    "method returning a weight's device": "noise = noise.to(self._home())",
    "property returning torch.device": "noise = noise.to(self.where)",
    "function of the file": "noise = noise.to(pick_place(x))",
    "name bound to x.device": "d = x.device\n        noise = noise.to(d)",
    "name bound to strings": 'd = "cuda" if x.is_cuda else "cpu"\n        noise = noise.to(d)',
    "parameter annotated torch.device": "noise = noise.to(spot)",
    "parameter defaulting to a string": "noise = noise.to(slot)",
    "device index": "noise = noise.to(0)",
}

# read as moves before this round too: the same shape must stay reported beside each form
ALREADY = {
    "device keyword": "noise = noise.to(device=self._home())",
    "cpu()": "noise = noise.cpu()",
    "x.device": "noise = noise.to(x.device)",
    "not moved at all": "pass",
}

CAST = {
    "another tensor": "noise = noise.to(x)",
    "its dtype": "noise = noise.to(x.dtype)",
    "a dtype parameter": "noise = noise.to(dtype)",
    "device then dtype": "noise = noise.to(self._home(), x.dtype)",
    "type_as": "noise = noise.type_as(x)",
    "keyword arguments": "noise = noise.to(**kw)",
    "method returning a dtype": "noise = noise.to(self._kind())",
}


@pytest.mark.parametrize("form", sorted(MOVED))
def test_a_move_to_a_device_is_not_a_cast(form: str) -> None:
    assert _found(_ONE_FILE.format(move=MOVED[form])) == [(22, "HP101")]
    for move in ALREADY.values():
        assert _found(_ONE_FILE.format(move=move)) == [(22, "HP101")]


def test_a_cast_stays_a_cast() -> None:
    for form, move in CAST.items():
        assert _found(_ONE_FILE.format(move=move)) == [], form


def test_a_device_named_only_by_an_unseen_helper_is_a_move() -> None:
    body = """\
        from accel_tools import find_device


        class Sampler(nn.Module):
            def __init__(self, z):
                super().__init__()
                self.head = nn.Linear(z, 8)

            def forward(self, n=2):
                noise = torch.randn(n, 8).to(find_device(self))
                return self.head(noise)
        """
    assert _found(body) == [(10, "HP101")]
    unnamed = body.replace("find_device", "find_home")
    assert _found(unnamed) == []  # an unseen helper may return a dtype


# -- torch layers subclassed, and the output reached past an unseen submodule ----------------------
def test_noise_fed_to_a_subclass_of_a_torch_layer_is_reported() -> None:
    body = """\
        class ScaledLinear(nn.Linear):
            def __init__(self, a, b, gain=2.0):
                super().__init__(a, b)
                self.gain = gain


        class NormedLinear(nn.Linear):
            def forward(self, x):
                return F.linear(x, self.weight / self.weight.norm(), self.bias)


        class Sampler(nn.Module):
            def __init__(self, z, normed):
                super().__init__()
                self.head = NormedLinear(z, 8) if normed else ScaledLinear(z, 8)
                self.tail = ScaledLinear(z, 8)

            def forward(self, n=2):
                a = torch.randn(n, 4)
                b = torch.randn(n, 4)
                return self.head(a), self.tail(b)
        """
    assert _found(body) == [(19, "HP101"), (20, "HP101")]
    model = _module(body, "Sampler")(4, True).to(torch.bfloat16)
    with pytest.raises(RuntimeError):
        model()


def test_a_value_returned_directly_and_through_an_unseen_submodule_is_reported() -> None:
    body = """\
        from registry import build


        class Sampler(nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.mapping = build(cfg)

            def forward(self, n=2, keep=False):
                noise = torch.randn(n, 8)
                styles = self.mapping(noise)
                out = dict(image=styles, noise=noise)
                return out
        """
    assert _found(body) == [(10, "HP101")]
    hidden = body.replace("out = dict(image=styles, noise=noise)", "out = dict(image=styles)")
    assert _found(hidden) == []  # only the unseen submodule: not known


# -- keyed stores ---------------------------------------------------------------------------
_STORE = """\
class Shifter(nn.Module):
    def __init__(self, d, key="act"):
        super().__init__()
        self.net = nn.Linear(d, d)
        self.key = key

    def _shift(self, td: "TensorDict"):
        {body}
        return td

    def forward(self, td: "TensorDict"):
        td = self._shift(td)
        return td
"""

READ_BACK = {
    "cat onto the entry": (
        "td.set(self.key, torch.cat([td.get(self.key)[1:], torch.zeros(1, 4)]))"
    ),
    "entry read through a name": (
        "a = td.get(self.key).clone()\n"
        "        a = torch.cat([a[1:], torch.zeros(1, 4)])\n"
        "        td.set(self.key, a)"
    ),
    "entry plus noise": "td.set(self.key, td.get(self.key) + 0.1 * torch.randn(3, 4))",
    "value keyword": "td.set(self.key, value=td.get(self.key) + torch.rand(3, 4))",
}

SILENT_STORES = {
    "cast to the entry's dtype": (
        "old = td.get(self.key)\n"
        "        td.set(self.key, torch.cat([old[1:], torch.zeros(1, 4).to(old.dtype)]))"
    ),
    "an integer counter": "td.set('steps', torch.zeros(3, dtype=torch.long))",
}


@pytest.mark.parametrize("form", sorted(READ_BACK))
def test_an_entry_rewritten_from_itself_with_fp32_is_reported(form: str) -> None:
    found = _found(_STORE.format(body=READ_BACK[form]))
    assert [code for _, code in found] == ["HP101"]
    for silent, body in SILENT_STORES.items():
        assert _found(_STORE.format(body=body)) == [], silent


def test_a_read_under_another_key_is_not_the_stored_value() -> None:
    body = """\
        class Reader(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.net = nn.Linear(d, d)

            def forward(self, td: "TensorDict"):
                td.set("scratch", torch.zeros(3, 4))
                return self.net(td.get("obs"))
        """
    assert _found(body) == []
    same = body.replace('td.get("obs")', 'td.get("scratch")')
    assert _found(same) == [(7, "HP101")]


def test_a_state_made_on_a_first_call_and_added_to_the_entry_is_reported() -> None:
    body = """\
        class Drift(nn.Module):
            def __init__(self, key="act"):
                super().__init__()
                self.key = key

            def _state(self, td: "TensorDict"):
                if "state" not in td.keys():
                    state = torch.zeros(td.get(self.key).shape)
                    td.set("state", state)
                else:
                    state = td.get("state").clone()
                return state

            def forward(self, td: "TensorDict"):
                prev = self._state(td)
                step = prev * 0.9 + 0.1 * torch.randn_like(prev)
                td.set("state", step)
                td.set(self.key, td.get(self.key) + step)
                return td
        """
    assert _found(body) == [(8, "HP101")]
    one = """\
        import contextvars

        LAST = contextvars.ContextVar("last")


        class Tap(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.net = nn.Linear(d, d)

            def forward(self, x):
                seen = torch.zeros(4)
                LAST.set(seen)
                return self.net(x)
        """
    assert _found(one) == []  # ContextVar.set(v): no key, not a keyed store


# -- fixes read only receivers that are there ---------------------------------------------------
_DROPPER = """\
class Dropper(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x, keep=None):
        if keep is None:
            keep = self.draw(ref=x, shape=x.shape)
        return x * keep

    def draw(self, *, ref=None, shape=None):
        m = None
        {body}
        return F.dropout(m, self.p)
"""

NONE_HERE = {
    "body of is None": "if ref is None:\n            m = torch.ones(shape)",
    "else of is not None": (
        "if ref is not None:\n            m = torch.ones_like(ref)\n"
        "        else:\n            m = torch.ones(shape)"
    ),
    "elif under is not None": (
        "if ref is not None:\n            m = torch.ones_like(ref)\n"
        "        elif shape is not None:\n            m = torch.ones(shape)"
    ),
    "body of not": "if not ref:\n            m = torch.ones(shape)",
    "conditional expression": "m = torch.ones(shape) if ref is None else torch.ones_like(ref)",
    "unguarded optional": "m = torch.ones(shape)",
    "else of isinstance": (
        "if isinstance(ref, torch.Tensor):\n            m = torch.ones_like(ref)\n"
        "        else:\n            m = torch.ones(shape)"
    ),
}

THERE = {
    "guarded by is not None": "if ref is not None:\n            m = torch.ones(shape)",
    "after an assert": "assert ref is not None\n        m = torch.ones(shape)",
    "after a raise": (
        "if ref is None:\n            raise ValueError('ref')\n        m = torch.ones(shape)"
    ),
}


@pytest.mark.parametrize("form", sorted(NONE_HERE))
def test_a_fix_never_reads_a_receiver_that_is_none_on_its_path(form: str) -> None:
    found = _fixes(_DROPPER.format(body=NONE_HERE[form]))
    assert found and all(text is None for _, text in found), found  # reported, by hand
    for there in THERE.values():  # where ref surely is a tensor, the fix inherits from it
        assert [text for _, text in _fixes(_DROPPER.format(body=there))] == ["ref.new_ones"]
    released = _DROPPER.replace("ref=None", "ref").format(
        body="m = torch.ones(shape)\n        ref = None"
    )
    assert [text for _, text in _fixes(released)] == ["ref.new_ones"]  # None only after


def test_the_fixed_model_runs_where_the_receiver_is_none() -> None:
    body = _DROPPER.format(body=NONE_HERE["elif under is not None"])
    fixed = fix_source(LINT.source(body))
    scope: dict[str, object] = {}
    exec(compile(fixed, "<fixed>", "exec"), scope)  # noqa: S102
    model = scope["Dropper"](0.5)
    assert isinstance(model, nn.Module)
    mask = model.draw(shape=(2, 4))  # raised "'NoneType' object has no attribute 'new_ones'"
    assert mask.shape == (2, 4)
