"""Project tooling: the support matrix and what is built from it (standard library only).

A package, imported from the repository root (``from tools import matrix``): the noxfile puts the
root on ``sys.path``; the scripts run as modules from the root, e.g. ``python -m tools.run_matrix``.
"""
