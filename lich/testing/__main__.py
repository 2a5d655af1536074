"""``python -m lich.testing serve``: the scripted model server alone (:mod:`lich.testing.cli`)."""

from lich.testing.cli import main

if __name__ == "__main__":
    main(prog_name="python -m lich.testing")
