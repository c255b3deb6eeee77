"""Project tooling: compatfn's own sessions and what is built from the support matrix (standard
library only).

A package, imported from the repository root (``from tools import sessions``): the noxfile puts the
root on ``sys.path``; the scripts run as modules from the root, e.g. ``python -m tools.run_matrix``.
The matrix itself is ``compatfn.matrix``: where no ``compatfn`` is imported yet (a script run with
any Python, compatfn installed or not), it is read from this checkout's ``src/``; in a test session
the installed compatfn that the tests import comes first, so the tests check the wheel's copy.
"""

import sys
from pathlib import Path

if "compatfn" not in sys.modules:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
