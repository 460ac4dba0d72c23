"""Which compiled candidates are worth compiling: a ``+compile`` (or ``+autotune``) twin is
compiled only while it can still win, judged from its eager twin, measured before it.

``torch.compile`` runs the operations of the eager module it wraps, fused, so a compiled
twin is at most as accurate as the eager one, and at most a bounded factor faster
(:data:`COMPILE_GAINS`, from the measurements in docs/benchmarks.md). The runner times
every uncompiled candidate before any compiled one; a compiled twin is then skipped,
never compiled, when at every batch size its eager twin

- failed the tolerance, or
- is beaten even at that bound: its per-round times relative to eager fp32, divided by the
  gain, still lose to a candidate the choice may pick by the race's comparison
  (:class:`~halfprec.bench.race.Race`): after at least the race's ``early_rounds`` of both,
  its fastest round is slower than the other's slowest by the race's ``margin``. The gain
  bound is itself the wide margin an early verdict needs. Load only slows calls down, so a
  noisy reading can keep a compile, never skip one.

Compiled fp32 gains less still on CPU: the default recipe compiles fp32 unfrozen, and
inductor then calls the same GEMM kernels as eager fp32 (ATen's ``mm``/``addmm``) at the
same shapes, fusing only what lies between them. Its call takes at least those products'
time, so it gains at most the eager call's time over theirs (Amdahl): the fp32 seconds
that the GEMM limit timed at the model's recorded products (:class:`~halfprec.bench.limit.
GemmLimit` ``fp32_s``, each product's fastest sample, operands hot in cache: below their
time inside the model) against the fastest timed round of eager fp32 at that batch size
(:attr:`Twin.gemm_share`), widened by :data:`GEMM_SLACK`. BERT-base spends about
0.74-0.93 of an fp32 call in them by that measure (1.69x-1.34x at most with the slack;
compiling measured 1.01-1.15x), MiniLM about 0.43 (2.9x; measured 1.27x). Without a limit
(``--no-limit``, ``--quick``) the device's bound applies.

Without a race (``BenchConfig(race=None)``, ``--no-race``) every candidate is compiled,
as every candidate is then timed to the end. Where no bound is known (GPUs, whose CUDA
graphs can gain several times at small batches) only the accuracy rule applies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from halfprec.bench.interleave import Standings
from halfprec.bench.race import Race
from halfprec.bench.results import VariantResult
from halfprec.bench.variants import COMPILE_RECIPES, CompileRecipe, Variant

# The most ``torch.compile`` is taken to gain over the eager module, per device type:
# (+compile, +autotune); inf: no bound. Measured on CPUs (docs/benchmarks.md): BERT-base
# fp32 1.01-1.15x, bf16 frozen 1.29x; MiniLM under load naive-bf16 2.84x over its eager
# twin. +autotune on AMX reached 1.42x over +compile, with no eager figure: unbounded.
COMPILE_GAINS: dict[str, tuple[float, float]] = {"cpu": (3.0, math.inf)}

# the GEMM share's bound is widened by this much: the share is read from a few fastest
# samples, and quiet it read 0.93 on BERT-base (1.07x) where compiled fp32 once measured
# 1.15x; a share that reads high must not skip a compile that could win
GEMM_SLACK = 1.25

_FP32 = Variant("fp32")


@dataclass(frozen=True)
class Twin:
    """A compiled candidate's eager twin at one batch size: its row (None: not run), the
    standings of the candidates timed there (:class:`Standings`) and, for eager fp32, the
    share of its call spent in the model's matrix products (``gemm_share``: the limit's
    fp32 seconds over the fastest timed round; None where not measured)."""

    row: VariantResult | None
    standings: Standings
    gemm_share: float | None = None
    runtimes: frozenset[Variant] = frozenset()
    """Runtime targets timed there within tolerance: deploy may pick them
    (:func:`~halfprec.bench.runtime_choice.with_runtimes`), so a twin that cannot beat one
    cannot be chosen either."""


def gemm_share(gemm_s: Sequence[float | None], rounds: Sequence[float]) -> float | None:
    """The share of eager fp32's call spent in its matrix products: the least of the
    limits' fp32 seconds (``gemm_s``, one per half dtype timed, each product's fastest
    sample) over the fastest of fp32's timed ``rounds``; None without either. Fastest
    against fastest, as the race compares: load that slows some calls changes neither.
    None too where the share would exceed 1: a call's matrix products are part of the call,
    so the two timings disagree (a 2-thread MiniLM b1 deploy read 31.77, and bounded
    compiling's gain at 0.04x), and no bound is drawn from them."""
    known = [s for s in gemm_s if s is not None and s > 0]
    if not known or not rounds or min(rounds) <= 0:
        return None
    share = min(known) / min(rounds)
    return share if share <= 1.0 else None


@dataclass(frozen=True)
class CompileGate:
    """The rule of the module docs for one device type and race (None: compile all)."""

    device: torch.device
    race: Race | None

    def gain(self, variant: Variant, gemm_share: float | None = None) -> float | None:
        """The bound on what compiling ``variant`` gains here (None: unknown): the
        device's, and for fp32 compiled unfrozen on CPU at most ``GEMM_SLACK / gemm_share`` (see
        the module docs)."""
        gains = COMPILE_GAINS.get(self.device.type)
        gain = None if gains is None else gains[1] if variant.autotune else gains[0]
        if gain is None or not math.isfinite(gain):
            return None
        if gemm_share is not None and gemm_share > 0 and self._same_gemms(variant):
            return min(gain, GEMM_SLACK / gemm_share)
        return gain

    def _same_gemms(self, variant: Variant) -> bool:
        """Whether compiled ``variant`` calls eager's GEMM kernels: fp32, on CPU, with
        neither the recipe nor inductor's global setting freezing it (frozen, inductor
        may prepack the weights for oneDNN) and not max-autotune (GEMM templates)."""
        if variant.dtype != torch.float32 or variant.autotune or self.device.type != "cpu":
            return False
        import torch._inductor.config as inductor_config

        recipe = COMPILE_RECIPES.get(self.device.type, CompileRecipe())
        return not (recipe.freezes(torch.float32) or inductor_config.freezing)

    def skip(self, variant: Variant, twins: Sequence[Twin]) -> str | None:
        """Why compiled ``variant`` need not be compiled, given its eager twin at each batch
        size; None to compile it."""
        if not variant.compiled or self.race is None or not twins:
            return None
        reasons = [self._reason(variant, twin) for twin in twins]
        if any(r is None for r in reasons):
            return None
        return reasons[0]

    def _reason(self, variant: Variant, twin: Twin) -> str | None:
        eager = Variant(variant.kind, variant.dtype)
        row = twin.row
        if row is None or row.status != "ok":
            return None
        if row.comparison is not None and not row.comparison.passed:
            return (
                f"not compiled: {eager.name} is out of tolerance eager, and compiling runs "
                "the same operations"
            )
        gain = self.gain(variant, twin.gemm_share)
        if gain is None:
            return None
        why = (
            f": eager spends {twin.gemm_share:.2f} of a call in GEMMs, which compiling keeps"
            if gain != self.gain(variant) and twin.gemm_share is not None
            else ""
        )
        winner = self._beaten_by(eager, gain, twin.standings, twin.runtimes)
        if winner is None:
            return None
        return (
            f"not compiled: {eager.name} is slower than {winner.name} by more than "
            f"torch.compile gains on {self.device.type} (at most {gain:.3g}x{why}; docs/bench.md)"
        )

    def _beaten_by(
        self,
        eager: Variant,
        gain: float,
        standings: Standings,
        runtimes: frozenset[Variant] = frozenset(),
    ) -> Variant | None:
        """An eligible candidate (or accurate runtime target) that beats ``eager``'s rounds
        sped up by ``gain``."""
        assert self.race is not None
        race = self.race
        ones = [1.0] * race.early_rounds  # fp32 relative to itself, exactly
        relative = ones if eager == _FP32 else standings.relative.get(eager)
        if not relative:
            return None
        best = [t / gain for t in relative]
        eligible = {v: standings.relative.get(v, []) for v in standings.eligible | runtimes}
        eligible[_FP32] = ones
        for v, theirs in eligible.items():
            rounds = min(len(best), len(theirs))
            if (
                v != eager
                and rounds >= race.early_rounds
                and min(best) > (1 + race.margin) * max(theirs)
            ):
                return v
        return None
