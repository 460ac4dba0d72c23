"""``python -m halfprec`` is the ``halfprec`` command."""

from halfprec.cli import main

main()
