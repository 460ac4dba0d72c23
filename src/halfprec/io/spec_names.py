"""What a MODEL spec names, read without importing torch: the built-in models and the
spec's form, so the command line can list them and refuse a missing file at once."""

from __future__ import annotations

from pathlib import Path

from halfprec.readfile import refusal

BUILTIN_MODELS: dict[str, str] = {
    "minilm": "all-MiniLM-L6-v2, real weights, real sentences",
    "bert-base": "BERT-base from config, random weights, batch 8 x 128",
    "gpt2": "GPT-2 small from config, random weights, logits",
    "cnn": "ResNet-style CNN with BatchNorm, sklearn photos",
}
"""name -> one line on what ``builtin:NAME`` builds (:mod:`halfprec.io.zoo` builds them)."""

SPEC_HELP = (
    "MODEL must be builtin:NAME (" + ", ".join(BUILTIN_MODELS) + "), package.module:factory, "
    "path/to/file.py:factory, a Hugging Face model directory, or a TorchScript file"
)

_FILE_SUFFIXES = (".py", ".pt", ".pth", ".ts", ".jit")


def spec_problem(spec: str) -> str | None:
    """Why ``spec`` cannot name a model, judged from its text and the file system alone
    (an unknown built-in, a path that does not exist, no known form); None if it may."""
    spec = spec.strip()
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name in BUILTIN_MODELS:
            return None
        return f"unknown builtin model {name!r}; choose one of: {', '.join(BUILTIN_MODELS)}"
    path = Path(spec)
    if path.exists():
        return None
    if ":" in spec:
        target = spec.rpartition(":")[0]
        return refusal("model file", target) if target.endswith(".py") else None
    if spec.endswith(_FILE_SUFFIXES) or "/" in spec:
        problem = refusal("model file or directory", path)
        return problem or f"model file or directory {spec!r} not found"
    return f"unknown MODEL {spec!r}; {SPEC_HELP}"
