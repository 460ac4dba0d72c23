"""halfprec.errors.require: optional imports fail with the extra to install."""

from __future__ import annotations

import pytest

from halfprec.errors import MissingExtraError, require


def test_require_returns_the_module() -> None:
    json = require("json", "core", "tests")
    assert json.dumps([1]) == "[1]"


def test_require_names_the_package_extra_and_purpose() -> None:
    with pytest.raises(MissingExtraError) as info:
        require("halfprec_absent_pkg.sub", "plot", "--plot")
    message = str(info.value)
    assert message == (
        "--plot needs the package 'halfprec_absent_pkg', which is not installed; "
        "install it with: pip install 'halfprec[plot]'"
    )
    assert info.value.extra == "plot"
    assert isinstance(info.value, ImportError)
