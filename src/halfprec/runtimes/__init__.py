"""Other runtimes as deploy targets: OpenVINO and onnxruntime, called like the torch model.

:func:`~halfprec.runtimes.targets.build_runtime` turns an fp32 model and an example batch
into a :class:`~halfprec.runtimes.module.RuntimeModule` that takes the model's inputs and
returns torch tensors in the model's output structure. ``halfprec.deploy(...,
runtimes=...)`` and ``halfprec bench --variants openvino-fp32,...`` time and check them
like every other variant.
"""

from halfprec.runtimes.module import RuntimeModule
from halfprec.runtimes.targets import RUNTIMES, build_runtime, runtime_dtypes, unavailable

__all__ = ["RUNTIMES", "RuntimeModule", "build_runtime", "runtime_dtypes", "unavailable"]
