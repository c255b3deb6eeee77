"""What this torch's schema parser and ``infer_schema`` read and write, and c10's enum numbers
the dispatcher passes for a dtype, layout or quantization scheme, detected once (facts as in
``_facts``; the probes run on first use)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict

import torch

__all__ = [
    "DTYPE_OF_NUMBER",
    "ENUM_NUMBERS",
    "SCALAR_TYPE_NUMBERS",
    "infers_from_string_annotations",
    "int_type",
    "parser_reads_dtype_names",
]


@functools.lru_cache(maxsize=None)
def int_type() -> str:
    """``SymInt`` where this torch's schema parser knows it (torch >= 2.0), else ``int``."""
    try:
        torch._C.parse_schema("f(SymInt x) -> ()")
    except RuntimeError:
        return "int"
    return "SymInt"


@functools.lru_cache(maxsize=None)
def parser_reads_dtype_names() -> bool:
    """Whether the schema parser takes a dtype default by name (``ScalarType d=float64``, what
    torch 2.4+'s ``infer_schema`` writes); torch 1.13-2.3 refuse it ("invalid numeric default
    value", measured) and take the ScalarType's number."""
    try:
        torch._C.parse_schema("f(ScalarType d=float64) -> ()")
    except RuntimeError:
        return False
    return True


_ANNOTATED_PROBES = """
from typing import List, Optional, Sequence, Tuple


def probe(
    x: torch.Tensor,
    y: Optional[torch.Tensor],
    z: Sequence[torch.Tensor],
    w: typing.Sequence[Optional[torch.Tensor]],
    n: Optional[int] = None,
    s: float = 1.0,
    d: Optional[torch.dtype] = None,
) -> Tuple[torch.Tensor, torch.Tensor]: ...


def probe_one(x: torch.Tensor, ns: List[int]) -> typing.Tuple[torch.Tensor]: ...


def probe_list(x: torch.Tensor) -> List[torch.Tensor]: ...


def probe_refused(x: dict) -> torch.Tensor: ...
"""


@functools.lru_cache(maxsize=None)
def infers_from_string_annotations() -> bool:
    """Whether torch's own ``torch.library.infer_schema`` reads string annotations (``from
    __future__ import annotations``) as it reads the same annotations written as objects
    (See NOTE: [string annotations]): torch 2.4 refuses them, later releases misread some."""
    infer = getattr(getattr(torch, "library", None), "infer_schema", None)  # torch >= 2.5
    if infer is None:
        return False
    schemas = []
    for header in ("", "from __future__ import annotations\n"):
        namespace: Dict[str, Any] = {}
        exec(header + "import typing\nimport torch\n" + _ANNOTATED_PROBES, namespace)
        try:
            schemas.append(
                [infer(namespace[n], mutates_args=()) for n in ("probe", "probe_one", "probe_list")]
            )
        except Exception:  # a supported annotation refused: this torch does not
            return False
        if not _refuses(infer, namespace["probe_refused"]):
            return False
    return schemas[0] == schemas[1]


def _refuses(infer: Callable, fn: Callable) -> bool:
    """Whether ``infer`` refuses ``fn``'s unsupported annotation with torch's ValueError."""
    try:
        infer(fn, mutates_args=())
    except ValueError:
        return True
    except Exception:  # another error (torch 2.7/2.8's AttributeError for "dict")
        return False
    return False


#: c10's ScalarType numbers (fixed in c10/core/ScalarType.h since torch 1.0; a new dtype gets the
#: next number), for the schema default of a dtype parameter on torch < 2.4, an int given for a
#: dtype, and a dtype given for a number (the dispatcher passes its number). The dtypes this
#: torch lacks are left out where the tables are read.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/c10/core/ScalarType.h
SCALAR_TYPE_NUMBERS: Dict[str, int] = {
    name: number
    for number, name in enumerate(
        [
            "uint8",
            "int8",
            "int16",
            "int32",
            "int64",
            "float16",
            "float32",
            "float64",
            "complex32",
            "complex64",
            "complex128",
            "bool",
            "qint8",
            "quint8",
            "qint32",
            "bfloat16",
            "quint4x2",
            "quint2x4",
            "bits1x8",
            "bits2x4",
            "bits4x2",
            "bits8",
            "bits16",
            "float8_e5m2",
            "float8_e4m3fn",
            "float8_e5m2fnuz",
            "float8_e4m3fnuz",
            "uint16",
            "uint32",
            "uint64",
            "uint1",
            "uint2",
            "uint3",
            "uint4",
            "uint5",
            "uint6",
            "uint7",
            "int1",
            "int2",
            "int3",
            "int4",
            "int5",
            "int6",
            "int7",
            "float8_e8m0fnu",
            "float4_e2m1fn_x2",
        ]
    )
}
#: ScalarType number -> dtype: the dispatcher takes an int for a ``ScalarType`` (True is 1), and
#: the schema parser gives a dtype default as its number.
DTYPE_OF_NUMBER = {
    number: getattr(torch, name)
    for name, number in SCALAR_TYPE_NUMBERS.items()
    if isinstance(getattr(torch, name, None), torch.dtype)
}
#: c10's Layout and QScheme numbers: the dispatcher passes them for a layout or a quantization
#: scheme given for a number (measured on torch 2.13: ``torch.sparse_csc`` is 4).
# Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/c10/core/Layout.h
# Upstream: https://github.com/pytorch/pytorch/blob/v2.13.0/c10/core/QScheme.h
_ENUM_NAMES = {
    "strided": 0,
    "sparse_coo": 1,
    "sparse_csr": 2,
    "_mkldnn": 3,
    "sparse_csc": 4,
    "sparse_bsr": 5,
    "sparse_bsc": 6,
    "jagged": 7,
    "per_tensor_affine": 0,
    "per_channel_affine": 1,
    "per_tensor_symmetric": 2,
    "per_channel_symmetric": 3,
    "per_channel_affine_float_qparams": 4,
}
#: dtype, layout or quantization scheme -> the number the dispatcher passes for it as a number.
ENUM_NUMBERS: Dict[Any, int] = {
    **{dtype: number for number, dtype in DTYPE_OF_NUMBER.items()},
    **{
        getattr(torch, name): number
        for name, number in _ENUM_NAMES.items()
        if isinstance(getattr(torch, name, None), (torch.layout, torch.qscheme))
    },
}
