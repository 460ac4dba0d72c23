"""``python -m halfprec`` is the ``halfprec`` command."""

from halfprec.cli import main

if __name__ == "__main__":  # not again in `lint --jobs` workers, which import it
    main(prog_name="halfprec")  # usage and --version name the tool, not `python -m`
