"""Which names a fix may anchor on: a fix writes ``x.new_zeros(...)`` or ``x.dtype``, so
``x`` must be a tensor, not merely a name the data flow follows into the computation.

A name is *not* a tensor (never an anchor) when some use of it in the function says so:

- a mapping: ``out["loss"]``, ``"likelihoods" in out``, ``f(**out)``;
- a list, dict or set: ``out.append(...)``, ``out.items()``, ``out.get("x")``...;
- an object with fields (a model output, a dataclass, a config): ``out.logits`` read where a
  tensor has no such attribute;
- a callable (a module, a function): ``out(h)``;
- a tuple unpacked by an assignment: ``a, b = out``;
- a list of tensors: ``out[0].device`` or ``out[0].dtype`` read for the first element's;
- a counter: its remainder compared with a number as a branch's test
  (``if (step + 1) % k == 0:``);
- documented as integers or booleans by the function's docstring
  (``:param crowd: Tensor (int): ...``, ``crowd (LongTensor): ...``): a flag, not a value.

The check is over the whole function, whatever the binding, so a name reused for a list and
then a tensor loses its fix (it is still reported): a fix that does not run is worse.
"""

from __future__ import annotations

import ast
import re

from halfprec.leaks.lint.nodes import walk, words

_CONTAINER_METHODS = words(
    "items keys values get append extend insert pop popitem update setdefault copy index "
    "count remove clear reverse add discard"
)
# attributes a tensor has that are read without a call (its methods are called)
_TENSOR_FIELDS = words(
    "shape dtype device T mT H mH data real imag grad requires_grad ndim is_cuda is_cpu "
    "is_meta is_mps is_xpu is_sparse is_quantized is_leaf is_nested is_mkldnn grad_fn layout "
    "names itemsize nbytes output_nr retains_grad"
)


def _is_key(node: ast.AST) -> bool:
    """A string key: ``"loss"`` or an f-string."""
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _attribute_use(node: ast.Attribute, called: set[int]) -> str | None:
    """The name whose attribute ``node`` reads, when that read says it is no tensor."""
    name = _name(node.value)
    if name is None:
        return None
    if id(node) in called:
        return name if node.attr in _CONTAINER_METHODS else None
    return name if node.attr not in _TENSOR_FIELDS else None


def _shown(node: ast.AST, called: set[int]) -> list[str | None]:
    """The names that ``node`` shows are no tensor (``None`` where it shows none)."""
    if isinstance(node, ast.Subscript) and _is_key(node.slice):
        return [_name(node.value)]
    if isinstance(node, ast.Compare):
        lefts = [node.left, *node.comparators]
        return [
            _name(right)
            for op, left, right in zip(node.ops, lefts, node.comparators, strict=False)
            if isinstance(op, (ast.In, ast.NotIn)) and _is_key(left)
        ]
    if isinstance(node, ast.Call):
        return [_name(node.func), *(_name(k.value) for k in node.keywords if k.arg is None)]
    if isinstance(node, ast.Attribute) and _element_field(node):
        assert isinstance(node.value, ast.Subscript)
        return [_name(node.value.value)]  # xs[0].device: a list of tensors
    if isinstance(node, ast.Attribute):
        return [_attribute_use(node, called)]
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], (ast.Tuple, ast.List)):
        return [_name(node.value)]  # a, b = out: a tuple (a tensor's rows are rarely named)
    if isinstance(node, (ast.If, ast.While)) and _step_test(node.test):
        assert isinstance(node.test, ast.Compare)
        return [_name(n) for n in walk(node.test.left)]  # if (step + 1) % k == 0: a counter
    return []


def _step_test(test: ast.AST) -> bool:
    """``(step + 1) % k == 0`` as a branch's test: a counter's remainder compared with a
    number, which a tensor would have to hold one element to pass."""
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.BinOp)
        and isinstance(test.left.op, ast.Mod)
        and all(isinstance(c, ast.Constant) for c in test.comparators)
    )


def _element_field(node: ast.Attribute) -> bool:
    """``xs[0].device`` or ``xs[0].dtype``: the device or dtype of a first element, read
    where a tensor's own would do."""
    item = node.value
    if not (isinstance(item, ast.Subscript) and isinstance(item.slice, ast.Constant)):
        return False
    return node.attr in ("device", "dtype") and item.slice.value == 0


# ``:param name: Tensor (int): ...`` (Sphinx) or ``name (Tensor[int]): ...`` (Google)
_PARAM_DOC = re.compile(r"^\s*(?::param\s+(\w+)\s*:(.*)|(\w+)\s*(\([^)]*\))\s*:)")
_INTEGER_DOC = re.compile(
    r"\b(int|ints|int8|int16|int32|int64|long|longtensor|bool|boolean)\b",
    re.I,
)
_FLOAT_DOC = re.compile(r"float|half|double", re.I)


def _documented_integers(fn: ast.AST) -> set[str]:
    """The parameters the docstring of ``fn`` gives an integer or boolean type."""
    first = fn.body[0] if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    value = first.value if isinstance(first, ast.Expr) else None
    doc = value.value if isinstance(value, ast.Constant) else None
    if not isinstance(doc, str) or not ("int" in doc or "bool" in doc or "ong" in doc):
        return set()  # a substring test first: most docstrings name no such type
    out: set[str] = set()
    for line in doc.splitlines():
        m = _PARAM_DOC.match(line)
        if m is None:
            continue
        name, kind = (m.group(1), m.group(2)[:40]) if m.group(1) else (m.group(3), m.group(4))
        if _INTEGER_DOC.search(kind) and not _FLOAT_DOC.search(kind):
            out.add(name)
    return out


def not_tensors(fn: ast.AST) -> frozenset[str]:
    """The names of ``fn`` that some use shows are no tensor (see the module docstring)."""
    called: set[int] = set()
    out: set[str | None] = set()
    for node in walk(fn):  # breadth first: a call comes before its callee expression
        if isinstance(node, ast.Call):
            called.add(id(node.func))
        out.update(_shown(node, called))
    out |= _documented_integers(fn)
    out.discard("self")
    return frozenset(n for n in out if n is not None)
