"""``python -m lich``: the same as the ``lich`` command."""

from lich.cli import main

if __name__ == "__main__":
    main()
