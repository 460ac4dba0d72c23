"""Print README.md's set-up command or its quick-start lines, one per line, as README has them.

    python3 scripts/readme_blocks.py setup        the bash block under "## Set-up"
    python3 scripts/readme_blocks.py quickstart   the bash block under "## Quick start"

scripts/readme-check.sh runs what this prints, so the CI step follows README word for word
and cannot drift from it; tests/test_readme.py checks the extraction.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
SECTIONS = {"setup": "Set-up", "quickstart": "Quick start"}


def bash_lines(text: str, heading: str) -> list[str]:
    """The non-blank lines of the first bash block under ``## heading`` (before the next ``##``)."""
    section = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if section is None:
        raise SystemExit(f"readme_blocks: README.md has no '## {heading}' section")
    block = re.search(r"^```bash\n(.*?)^```", section.group(1), re.M | re.S)
    if block is None:
        raise SystemExit(f"readme_blocks: README.md's '## {heading}' has no bash block")
    return [line for line in block.group(1).splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in SECTIONS:
        print(f"usage: readme_blocks.py {{{'|'.join(SECTIONS)}}}", file=sys.stderr)
        return 2
    print("\n".join(bash_lines(README.read_text(encoding="utf-8"), SECTIONS[argv[0]])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
