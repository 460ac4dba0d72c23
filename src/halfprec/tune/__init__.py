"""Search for a small set of fp32 islands that makes a half model meet a tolerance.

``tune(model, inputs, recipe, tolerance=...)``:

1. runs the fp32 reference on every calibration batch, and once more on the first batch:
   when fp32 does not reproduce itself (dropout left in train mode, random ops) no recipe
   can meet the tolerance, and tune says so (:class:`ToleranceUnreachableError`);
2. converts with no extra islands; done if every batch meets the tolerance;
3. otherwise diagnoses that conversion (:func:`halfprec.diagnose`) and ranks candidates:
   modules whose own half computation breaks (raises, inf/NaN, error above the threshold)
   first, then the rest by local error. A candidate whose fp32 inputs or outputs do not fit
   the dtype is lifted to its enclosing module, since an island hands back the caller's
   dtype;
4. tries the broken modules together, then growing prefixes of the ranking (doubling, then
   bisection), and finally drops members one by one, largest first, while the tolerance
   still holds. Sets may be non-contiguous; each try converts afresh and runs the batches,
   stopping at the first batch that fails;
5. with dtype ``"auto"`` does this for every candidate dtype (fp16 and bf16 where the
   device runs them) and keeps the fastest variant that
   meets the tolerance, timed on this device.

Every forward pass of the full model is counted in ``report.passes``.

Layout: :mod:`~halfprec.tune.core` (``tune``: the reference check, the search per dtype,
the choice between dtypes), :mod:`~halfprec.tune.search` (the island search for one dtype)
and :mod:`~halfprec.tune.results` (the options and result types).
"""

from halfprec.tune.core import tune
from halfprec.tune.results import (
    Evaluation,
    ToleranceUnreachableError,
    TuneReport,
    TuneResult,
    TuneVariant,
)

__all__ = [
    "Evaluation",
    "TuneVariant",
    "TuneReport",
    "TuneResult",
    "ToleranceUnreachableError",
    "tune",
]
