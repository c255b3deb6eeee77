"""Print a ``PYENV_VERSION`` value that makes every Python of the matrix visible.

The newest installed patch of each ``3.X`` the matrix (and lint) uses, the lint Python first, so
that a plain ``python`` is that one. Fails, naming what is missing, where pyenv lacks one:

    export PYENV_VERSION=$(python -m tools.pyenv_pythons)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple

from compatfn import matrix
from tools import sessions


def installed() -> Dict[str, Tuple[int, ...]]:
    """``{"3.11": (3, 11, 7), ...}``: the newest pyenv CPython of each minor."""
    listed = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True)
    bare = listed.stdout.split() if listed.returncode == 0 else []
    newest: Dict[str, Tuple[int, ...]] = {}
    for name in bare:
        if re.fullmatch(r"\d+\.\d+\.\d+", name):
            version = tuple(int(part) for part in name.split("."))
            minor = f"{version[0]}.{version[1]}"
            newest[minor] = max(newest.get(minor, version), version)
    return newest


def needed() -> List[str]:
    minors = [sessions.LINT_PYTHON] + [row.python for row in matrix.ROWS]
    return list(dict.fromkeys(minors))


def main() -> int:
    if shutil.which("pyenv") is None:
        print("pyenv is not installed: put the matrix's Pythons on PATH instead", file=sys.stderr)
        return 1
    found = installed()
    missing = [minor for minor in needed() if minor not in found]
    if missing:
        print(f"pyenv has no Python {', '.join(missing)}: pyenv install them", file=sys.stderr)
        return 1
    print(":".join(".".join(map(str, found[minor])) for minor in needed()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
