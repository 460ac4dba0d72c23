"""Layerwise diagnosis: which module breaks in half precision, and why.

``diagnose(model, inputs, recipe)`` runs the fp32 model and a half copy on the same inputs
with hooks on every module and reports, per module in execution order:

- the largest fp32 activation (``fp32_max_abs``) and how many values lie beyond the
  dtype's range (fp16 max 65504);
- the **local** error: the module run in half on its own fp32 inputs, with every module it
  calls replaced by that callee's recorded fp32 result (cast to half). This isolates the
  error that the module's *own* code adds, so a hand-written softmax inside an attention
  block is charged to the attention block and not to the Linear that reads its output;
- the **accumulated** error: the module's output inside the full half run;
- flags: inf/NaN, results flushed to zero, exceptions raised in half, and dtype leaks
  (fp32 tensors reaching half modules, a half module returning fp32).

It names the first module where the half run diverges and the *culprit*: the module whose
own half computation breaks (the divergence itself, an enclosing module, or the closest
earlier module that broke). Each module's own code runs once in half for the local errors,
so a diagnosis costs about one fp32 and two half forward passes per batch, whatever the
depth of the model. Shared modules and loops are handled per call; nested and dict inputs
follow :mod:`halfprec.batch`.

Layout: :mod:`~halfprec.diagnose.core` (``diagnose``, ``naive_half``),
:mod:`~halfprec.diagnose.local` (module attribution: local errors),
:mod:`~halfprec.diagnose.ops` (op attribution inside a module),
:mod:`~halfprec.diagnose.divergence` (accumulated errors, divergence and culprit),
:mod:`~halfprec.diagnose.results` (result types), :mod:`~halfprec.diagnose.problems`
(reasons in words) and :mod:`~halfprec.diagnose.recording` (hooks and records).
"""

from halfprec.diagnose.core import diagnose, naive_half
from halfprec.diagnose.results import Diagnosis, Divergence, ModuleDiagnosis

__all__ = ["ModuleDiagnosis", "Divergence", "Diagnosis", "diagnose", "naive_half"]
