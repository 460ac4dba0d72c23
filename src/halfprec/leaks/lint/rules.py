"""The registry of lint rules: one code, name and fix safety per rule.

Codes follow ruff's shape (``HP101``). ``--select``/``--ignore`` take codes or prefixes
(``HP1`` is every factory rule, ``HP`` is all of them).
"""

from __future__ import annotations

from dataclasses import dataclass

FIX_SAFE = "safe"  # the rewrite gives identical results in fp32
FIX_UNSAFE = "unsafe"  # the rewrite changes fp32 values (only with --unsafe-fixes)
FIX_NONE = "none"


@dataclass(frozen=True)
class Rule:
    """One lint rule."""

    code: str
    name: str
    summary: str
    fix: str

    def __post_init__(self) -> None:
        if self.fix not in (FIX_SAFE, FIX_UNSAFE, FIX_NONE):
            raise ValueError(
                f"rule {self.code}: fix must be safe, unsafe or none, got {self.fix!r}"
            )


RULES: dict[str, Rule] = {
    r.code: r
    for r in (
        Rule(
            "HP101",
            "factory-without-dtype",
            "tensor factory without dtype in forward while a tensor to inherit from is in scope",
            FIX_SAFE,
        ),
        Rule(
            "HP201",
            "explicit-upcast",
            "`.float()`/`.double()`/`.to(torch.float32)` in forward",
            FIX_NONE,
        ),
        Rule(
            "HP202", "hardcoded-fp32-dtype", "`dtype=torch.float32` hard-coded in forward", FIX_NONE
        ),
        Rule("HP203", "default-dtype", "`torch.get_default_dtype()` used in forward", FIX_SAFE),
        Rule(
            "HP301",
            "fill-out-of-range",
            "constant beyond the fp16 range (|x| > 65504) used as a fill/mask value",
            FIX_UNSAFE,
        ),
        Rule(
            "HP302",
            "finfo-fp32",
            "`torch.finfo(torch.float32)` where the tensor's own dtype was meant",
            FIX_SAFE,
        ),
    )
}


def codes_matching(prefix: str) -> list[str]:
    """Rule codes that start with ``prefix`` (case-insensitive)."""
    p = prefix.strip().upper()
    return [c for c in RULES if c.startswith(p)] if p else []
