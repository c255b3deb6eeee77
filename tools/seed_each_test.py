"""A pytest plugin that makes a library's test inputs the same in every run: it seeds torch,
random and numpy once before collection (values test modules draw at import) and again before
each test (and its fixtures), and turns on ``torch.use_deterministic_algorithms``, under which
``torch.empty`` and its kind fill their memory (NaN for floats) instead of leaving what was there.

For ``compatfn migrate --verify`` on a library whose tests draw unseeded inputs (``--verify``
compares calls only when both runs give them the same inputs)::

    PYTHONPATH=/path/to/compatfn/tools python -m compatfn migrate mylib --verify \\
        python -m pytest -p seed_each_test tests

Tests that draw with hypothesis also need ``--hypothesis-seed=0``.
"""

from __future__ import annotations

import random


def _seed() -> None:
    """Seed every generator a test may draw from; fill uninitialized memory."""
    import torch

    torch.use_deterministic_algorithms(True)
    random.seed(0)
    torch.manual_seed(0)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(0)


def pytest_configure(config: object) -> None:
    """pytest's hook before collection, which imports the test modules."""
    _seed()


def pytest_runtest_setup(item: object) -> None:
    """pytest's hook before each test's setup."""
    _seed()
