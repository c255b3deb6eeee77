"""A pytest plugin that seeds torch, random and numpy before each test (and its fixtures).

For ``compatfn migrate --verify`` on a library whose tests draw unseeded inputs (``--verify``
compares calls only when both runs give them the same inputs)::

    PYTHONPATH=/path/to/compatfn/tools python -m compatfn migrate mylib --verify \\
        python -m pytest -p seed_each_test tests
"""

from __future__ import annotations

import random


def pytest_runtest_setup(item: object) -> None:
    """pytest's hook before each test's setup: seed every generator the test may draw from."""
    import torch

    random.seed(0)
    torch.manual_seed(0)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(0)
