# /// script
# dependencies = ["nox", "compatfn"]
# ///
"""softclip's tests on every torch compatfn supports: `nox -l` lists them."""

import nox

from compatfn import matrix

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True


@matrix.nox_sessions()
def tests(session, row):
    session.install(".[test]")
    session.run("pytest", *session.posargs)
