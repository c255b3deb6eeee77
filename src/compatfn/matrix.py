"""Every torch release compatfn supports, as data: test a library on all of them.

One :class:`Row` per torch minor release, pinned to its newest patch, with the CPython that has
Linux x86_64 wheels for it, the pins that keep it importable there and the torchvision and
torchaudio releases built for it. compatfn's own noxfile, ``tox.toml``, CI and support table are
built from :data:`ROWS`; so are the sessions :func:`nox_sessions` gives a downstream noxfile and
the output of ``compatfn matrix``.

Standard library only, 3.8 syntax, and ``import compatfn.matrix`` never imports torch: a noxfile
runs where torch is not installed, and compatfn's own tests load this module on every Python of
the table.

Example::

    >>> from compatfn import matrix
    >>> [row.torch for row in matrix.rows(min_torch="2.13")]
    ['2.13.0', '2.14.1', '2.15.0']
    >>> matrix.row("1.8").python
    '3.8'
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = [
    "CPU_INDEX",
    "DISCARD_ENV",
    "INDEX_ENV",
    "ROWS",
    "MatrixError",
    "Row",
    "github_matrix",
    "install_torch",
    "nox_sessions",
    "row",
    "rows",
    "session_name",
    "torch_index",
    "tox_envs",
]

#: PyTorch's index of CPU-only wheels (a few hundred MB; PyPI's Linux torch is a CUDA build of
#: several GB). :func:`nox_sessions` installs torch from it where :attr:`Row.cpu_wheels`.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: Overrides the index :func:`nox_sessions` installs torch from: a URL, or ``pypi`` for the default
#: index (PyPI's builds, or whatever pip and uv are configured to use).
INDEX_ENV = "COMPATFN_TORCH_INDEX"
#: Set to ``1``, each session of :func:`nox_sessions` deletes its environment when it ends, passed
#: or failed: a run then holds one torch on disk at a time (a CUDA build takes 2-7 GB), for CI
#: machines with little disk. ``nox -r`` finds nothing to reuse then.
DISCARD_ENV = "COMPATFN_NOX_DISCARD"

#: torch 1.x was built against NumPy 1 and breaks on NumPy 2; torch up to 2.3 warns about it.
NUMPY_1 = "numpy<2"
#: torch 1.10 imports ``pkg_resources`` at import, inductor on torch <= 2.3 when compiling: uv venvs
#: have no setuptools, and setuptools>=70 no longer provides what they use.
PKG_RESOURCES = "setuptools<70"

#: torch 1.11 is the first release whose install instructions use the CPU index as a package
#: index (``--index-url .../whl/cpu``); 1.8-1.10 were a ``--find-links`` page
#: (https://pytorch.org/get-started/previous-versions/).
_FIRST_CPU_INDEX = (1, 11)


class MatrixError(ValueError):
    """A torch release outside the table, or filters that leave no row."""


@dataclass(frozen=True)
class Row:
    """One supported torch release and the interpreter to test it on.

    Example::

        >>> r = row("1.13")
        >>> r.torch, r.python, r.requirements()
        ('1.13.1', '3.11', ['torch==1.13.1', 'numpy<2', 'setuptools<70'])
    """

    torch: str
    """Exact torch release (``==`` pin): the newest patch of its minor."""
    python: str
    """CPython ``major.minor`` to run it on (one with Linux x86_64 wheels of it)."""
    pins: Tuple[str, ...] = ()
    """Requirements this torch needs next to it to import and compile in a fresh venv."""
    torchvision: Optional[str] = None
    """The torchvision release built for this torch on :attr:`python`, if there is one."""
    torchaudio: Optional[str] = None
    """The torchaudio release built for this torch on :attr:`python`, if there is one."""

    @property
    def release(self) -> Tuple[int, ...]:
        """The release as integers, e.g. ``(1, 13, 1)``."""
        return _release(self.torch)

    @property
    def key(self) -> str:
        """``major.minor``, as users name a row: ``1.13``."""
        return "{}.{}".format(*self.release[:2])

    @property
    def slug(self) -> str:
        """``major-minor``, the row's part of a session name: ``tests-1-13``."""
        return "{}-{}".format(*self.release[:2])

    @property
    def factor(self) -> str:
        """The tox factor: ``torch113``."""
        return "torch{}{}".format(*self.release[:2])

    @property
    def setup_context(self) -> bool:
        """Whether this torch has ``setup_context`` (2.0+): only then does ``COMPATFN_LEGACY=1``
        run a decorated Function differently, so only these rows get a legacy twin."""
        return self.release >= (2, 0)

    @property
    def cpu_wheels(self) -> bool:
        """Whether :data:`CPU_INDEX` serves this torch as a package index."""
        return self.release[:2] >= _FIRST_CPU_INDEX

    def requirements(self, *companions: str) -> List[str]:
        """torch pinned exactly, its :attr:`pins`, and the named companions pinned.

        Raises :class:`MatrixError` for a companion not built for this row.

        Example::

            >>> row("2.4").requirements("torchvision")
            ['torch==2.4.1', 'numpy', 'setuptools', 'torchvision==0.19.1']
        """
        pinned = [f"torch=={self.torch}", *self.pins]
        built = {"torchvision": self.torchvision, "torchaudio": self.torchaudio}
        for name in companions:
            if name not in built:
                raise MatrixError(f"unknown companion {name!r}: torchvision or torchaudio")
            version = built[name]
            if version is None:
                raise MatrixError(
                    f"no {name} release is built for torch {self.torch} on Python {self.python}"
                )
            pinned.append(f"{name}=={version}")
        return pinned


_OLD = (NUMPY_1, PKG_RESOURCES)
# numpy: without it torch warns "Failed to initialize NumPy" at import; setuptools: inductor's C++
# builder imports it (measured on 2.4-2.6) and uv venvs, like Python >= 3.12's, have none.
_NEW = ("numpy", "setuptools")

# The companions: the torchvision and torchaudio wheels for the row's Python whose metadata requires
# the row's torch, read from PyPI with `pip install --dry-run --no-deps --report - --python-version
# <row's Python> torchvision==X`: `Requires-Dist: torch==<row's torch>` up to torchvision 0.29.0
# and torchaudio 2.10.0. torchvision 0.29.1+ requires `torch>=2.14.0` and torchaudio 2.11.1
# `torch>=2.11` (2.11.0 names no torch): each is the companion of the release its bound names only.
# None: no wheel on PyPI (torchvision 0.14.1 and torchaudio 0.13.1 have none for Python 3.11;
# nothing is built for torchaudio after 2.11 or torchvision after 2.14).
ROWS: Tuple[Row, ...] = (
    Row("1.8.1", "3.8", _OLD, "0.9.1", "0.8.1"),
    Row("1.9.1", "3.9", _OLD, "0.10.1", "0.9.1"),
    Row("1.10.2", "3.9", _OLD, "0.11.3", "0.10.2"),
    Row("1.11.0", "3.10", _OLD, "0.12.0", "0.11.0"),
    Row("1.12.1", "3.10", _OLD, "0.13.1", "0.12.1"),
    Row("1.13.1", "3.11", _OLD, None, None),
    Row("2.0.1", "3.11", _OLD, "0.15.2", "2.0.2"),
    Row("2.1.2", "3.11", _OLD, "0.16.2", "2.1.2"),
    Row("2.2.2", "3.11", _OLD, "0.17.2", "2.2.2"),
    Row("2.3.1", "3.11", _OLD, "0.18.1", "2.3.1"),
    Row("2.4.1", "3.11", _NEW, "0.19.1", "2.4.1"),
    Row("2.5.1", "3.11", _NEW, "0.20.1", "2.5.1"),
    Row("2.6.0", "3.11", _NEW, "0.21.0", "2.6.0"),
    Row("2.7.1", "3.11", _NEW, "0.22.1", "2.7.1"),
    Row("2.8.0", "3.11", _NEW, "0.23.0", "2.8.0"),
    Row("2.9.1", "3.11", _NEW, "0.24.1", "2.9.1"),
    Row("2.10.0", "3.11", _NEW, "0.25.0", "2.10.0"),
    Row("2.11.0", "3.11", _NEW, "0.26.0", "2.11.1"),
    Row("2.12.1", "3.12", _NEW, "0.27.1", None),
    Row("2.13.0", "3.12", _NEW, "0.28.0", None),
    Row("2.14.1", "3.13", _NEW, "0.29.2", None),
    Row("2.15.0", "3.13", _NEW, None, None),
)


def _release(version: str) -> Tuple[int, ...]:
    """``"2.4.1"`` -> ``(2, 4, 1)``; :class:`MatrixError` for anything else."""
    parts = version.strip().split(".")
    if not 2 <= len(parts) <= 3 or not all(part.isdigit() for part in parts):
        raise MatrixError(f"{version!r} is not a torch release such as 2.4 or 2.4.1")
    return tuple(int(part) for part in parts)


def _known() -> str:
    return f"the table has torch {ROWS[0].key} to {ROWS[-1].key}"


def row(version: str) -> Row:
    """The row of torch ``version``: ``major.minor`` (``"2.4"``) or the row's exact release.

    Example::

        >>> row("2.4").torch
        '2.4.1'
    """
    wanted = _release(version)
    for candidate in ROWS:
        if candidate.release[: len(wanted)] == wanted:
            return candidate
    raise MatrixError(f"no torch {version} in the matrix; {_known()}")


def rows(
    min_torch: Optional[str] = None,
    max_torch: Optional[str] = None,
    only: Optional[Iterable[str]] = None,
    ends: bool = False,
) -> List[Row]:
    """The rows between ``min_torch`` and ``max_torch`` (both included, compared to the precision
    given: ``max_torch="2.4"`` keeps 2.4.1, ``"2.4.0"`` does not), or ``only`` the releases named;
    with ``ends``, only the oldest and the newest of those.

    Raises :class:`MatrixError` for a release outside the table or when no row is left.

    Example::

        >>> [r.key for r in rows(min_torch="1.13", ends=True)]
        ['1.13', '2.15']
    """
    low = _release(min_torch) if min_torch else None
    high = _release(max_torch) if max_torch else None
    picked = list(ROWS) if only is None else [row(version) for version in only]
    kept = [
        r
        for r in picked
        if (low is None or r.release[: len(low)] >= low)
        and (high is None or r.release[: len(high)] <= high)
    ]
    if not kept:
        bounds = f"min_torch={min_torch}, max_torch={max_torch}"
        raise MatrixError(f"no torch release is left by {bounds}; {_known()}")
    kept = sorted(set(kept), key=lambda r: r.release)
    return [kept[0], kept[-1]] if ends and len(kept) > 1 else kept


def session_name(kind: str, row: Row, legacy: bool = False) -> str:
    """The nox session that runs ``kind`` (``tests``, ``cuda``, ...) on ``row``.

    Dashes only, never a dot: nox reads a ``-s`` value as a Python expression, so ``tests-2.1``
    would also select ``tests-2.10`` (both read ``tests - 2.1``), while ``tests-2-1`` and
    ``tests-2-10`` stay apart.

    Example::

        >>> session_name("tests", row("2.1"), legacy=True)
        'tests-2-1-legacy'
    """
    return f"{kind}-{row.slug}" + ("-legacy" if legacy else "")


def _variants(selected: Sequence[Row], legacy: bool) -> List[Tuple[Row, bool]]:
    """Each row, followed by its ``COMPATFN_LEGACY=1`` twin where it has one and ``legacy``."""
    return [
        (r, forced)
        for r in selected
        for forced in ((False, True) if legacy and r.setup_context else (False,))
    ]


def github_matrix(
    selected: Optional[Sequence[Row]] = None, name: str = "tests", legacy: bool = True
) -> Dict[str, List[Dict[str, Any]]]:
    """A GitHub Actions ``strategy.matrix``: one entry per session of :func:`nox_sessions`, with
    its ``session`` name, ``python``, ``torch``, ``pins`` (space-separated) and ``legacy``.

    Example::

        >>> github_matrix([row("1.8")])["include"][0]["session"]
        'tests-1-8'
    """
    include = [
        {
            "session": session_name(name, r, legacy=forced),
            "python": r.python,
            "torch": r.torch,
            "pins": " ".join(r.pins),
            "legacy": forced,
        }
        for r, forced in _variants(list(ROWS if selected is None else selected), legacy)
    ]
    return {"include": include}


def tox_envs(
    selected: Optional[Sequence[Row]] = None,
    legacy: bool = True,
    set_env: Optional[Callable[[Row], Dict[str, str]]] = None,
) -> Dict[str, str]:
    """One ``tox.toml`` table per row (``torch113``, ``torch215-legacy`` ...), by env name: its
    interpreter, torch and pins as ``deps`` and ``set_env(row)`` (plus ``COMPATFN_LEGACY=1`` on a
    twin). The project itself and its test requirements come from the file's ``env_run_base``.

    Example::

        >>> print(tox_envs([row("1.8")])["torch18"])
        [env.torch18]
        description = "torch 1.8.1 on Python 3.8"
        base_python = ["python3.8"]
        deps = ["torch==1.8.1", "numpy<2", "setuptools<70"]
    """
    tables = {}
    for r, forced in _variants(list(ROWS if selected is None else selected), legacy):
        env = dict(set_env(r) if set_env else {}, **({"COMPATFN_LEGACY": "1"} if forced else {}))
        name = r.factor + ("-legacy" if forced else "")
        lines = [
            f"[env.{name}]",
            f'description = "torch {r.torch} on Python {r.python}'
            + (' with COMPATFN_LEGACY=1"' if forced else '"'),
            f'base_python = ["python{r.python}"]',
            "deps = [" + ", ".join(f'"{dep}"' for dep in r.requirements()) + "]",
        ]
        if env:
            pairs = ", ".join(f'{key} = "{value}"' for key, value in env.items())
            lines.append(f"set_env = {{ {pairs} }}")
        tables[name] = "\n".join(lines)
    return tables


def torch_index(r: Row) -> Optional[str]:
    """The index to install ``r``'s torch from: :data:`INDEX_ENV` if set (``pypi``: None, the
    default index), else :data:`CPU_INDEX` where the row has CPU wheels, else None."""
    chosen = os.environ.get(INDEX_ENV, "").strip()
    if chosen:
        return None if chosen.lower() == "pypi" else chosen
    return CPU_INDEX if r.cpu_wheels else None


def install_torch(session: Any, r: Row, *companions: str) -> None:
    """Install ``r``'s torch (and ``companions``) into a nox session, then its pins.

    torch and the companions come from :func:`torch_index` (torch's own dependencies too, which
    PyTorch's indexes carry), the pins from the default index.
    """
    wheels = [req for req in r.requirements(*companions) if req not in r.pins]
    index = torch_index(r)
    session.install(*wheels, *(["--index-url", index] if index else []))
    if r.pins:
        session.install(*r.pins)


def nox_sessions(
    selected: Optional[Sequence[Row]] = None,
    *,
    legacy: bool = True,
    companions: Sequence[str] = (),
    name: Optional[str] = None,
    **session_options: Any,
) -> Callable[[Callable[[Any, Row], None]], Callable[[Any, Row], None]]:
    """Make a function of ``(session, row)`` one nox session per row: ``tests-1-8`` ... and, on
    rows with ``setup_context``, a ``tests-2-15-legacy`` twin that runs with ``COMPATFN_LEGACY=1``.

    Each session runs on the row's Python and has its torch (CPU wheels where
    :data:`CPU_INDEX` has them; see :data:`INDEX_ENV`), its pins and the ``companions``
    (``"torchvision"``, ``"torchaudio"``) installed before the function is called; the function
    installs the project and runs its tests. With :data:`DISCARD_ENV` set to ``1`` when the
    noxfile loads, each session deletes its environment when it ends. ``selected`` defaults to
    every row (see :func:`rows`); ``name`` to the function's name; ``session_options`` go to
    ``nox.session`` (``tags``, ``default``, ``reuse_venv`` ...).

    Example (a noxfile)::

        import nox
        from compatfn import matrix

        @matrix.nox_sessions(matrix.rows(min_torch="1.13"))
        def tests(session, row):
            session.install(".", "pytest")
            session.run("pytest", *session.posargs)
    """
    import nox  # the noxfile's own nox; this module stays importable without it

    chosen = list(ROWS if selected is None else selected)
    if not chosen:
        raise MatrixError("nox_sessions got no rows: pass matrix.rows(...) or leave it out")
    for r in chosen:
        r.requirements(*companions)  # a companion a row lacks: MatrixError now, not in a session

    discard = os.environ.get(DISCARD_ENV) == "1"

    def define(func: Callable[[Any, Row], None]) -> Callable[[Any, Row], None]:
        prefix = name or func.__name__
        for r, forced in _variants(chosen, legacy):
            session = _session(func, r, forced, companions, discard)
            nox.session(
                name=session_name(prefix, r, legacy=forced), python=r.python, **session_options
            )(session)
        return func

    return define


def _session(
    func: Callable[[Any, Row], None],
    r: Row,
    forced: bool,
    companions: Sequence[str],
    discard: bool,
) -> Callable[[Any], None]:
    """The nox session function of one row (``forced``: with ``COMPATFN_LEGACY=1``; ``discard``:
    its environment deleted when it ends)."""

    def session(session: Any) -> None:
        if forced:
            session.env["COMPATFN_LEGACY"] = "1"
        try:
            install_torch(session, r, *companions)
            func(session, r)
        finally:
            if discard:
                shutil.rmtree(session.virtualenv.location, ignore_errors=True)

    forced_text = " with COMPATFN_LEGACY=1" if forced else ""
    session.__name__ = session.__qualname__ = func.__name__
    session.__doc__ = f"{func.__name__} on torch {r.torch} (Python {r.python}){forced_text}"
    return session
