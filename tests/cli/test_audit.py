"""``halfprec audit``: exit codes and JSON, through the real MODEL loader."""

from __future__ import annotations

import json

from support.leaky import LEAKY, marked_leaks


# -- CLI, through the real MODEL loader -----------------------------------------------------
def test_cli_audit_exit_codes_and_json() -> None:
    from support.cli import run_cli

    found = run_cli("audit", f"{LEAKY}:upcast_model", "--json")
    assert found.returncode == 1, found.stderr
    data = json.loads(found.stdout)
    assert [(leak["kind"], leak["line"]) for leak in data["leaks"]] == [
        ("upcast", next(n for n, k in marked_leaks() if k == "upcast"))
    ]
    assert data["leaks"][0]["file"].endswith("leaky.py")
    table = run_cli("audit", f"{LEAKY}:upcast_model")
    assert table.returncode == 1 and "upcast" in table.stdout
    clean = run_cli("audit", "builtin:minilm", "--dtype", "bf16")
    assert clean.returncode == 0 and "no dtype leaks in bf16" in clean.stdout, clean.stderr
    bad = run_cli("audit", "builtin:minilm", "--dtype", "fp8")
    assert bad.returncode == 2 and "unknown dtype 'fp8'" in bad.stderr
    unknown = run_cli("audit", "nope")
    assert unknown.returncode == 2 and "unknown MODEL 'nope'" in unknown.stderr
