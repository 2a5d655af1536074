"""``python -m lich``."""

from lich.cli import main

main()
