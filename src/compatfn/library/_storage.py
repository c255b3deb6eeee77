"""Tensors as the dispatcher sees them: storage identity and torch's aliasing rule, backends
other than dense, the views and ZeroTensors its fallbacks materialize, and the generated source
testing each of them."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from compatfn.library._facts import (
    HAS_LAZY_CONJ,
    HAS_NESTED,
    HAS_ZERO_TENSOR,
    is_alias_of,
    storage_id,
)
from compatfn.library._utils import dispatch_key, tensors_in

__all__ = [
    "aliases_any",
    "backend_of",
    "distinct_output_returned",
    "distinct_output_test",
    "distinct_storage_source",
    "fallback_source",
    "is_dense",
    "other_backend",
    "storage_key",
]


# NOTE: [storage identity]
# torch's aliasing rule for custom ops (no output shares storage with an input or another output)
# compares storages. Where torch has ``torch._C.storage_id`` (1.13+) that is the identity;
# torch 1.8 has none, so the full check compares ``t.storage()._cdata`` (the address of the
# StorageImpl, measured on 1.8: the same for views, also of empty tensors); the generated call's
# quick test compares data pointers: a storage's data pointer is the data pointer of any tensor on
# it at storage offset 0, and it identifies nothing for an empty tensor (every empty storage may
# have pointer 0), so the quick test fails there and the full check decides. Meta tensors have
# no data to alias, and tensors of other layouts (sparse, mkldnn) no storage: torch 2.13's own op
# leaves both out of the rule (a sparse output equal to its sparse input passes; measured), so
# ``storage_key`` does; torch 1.8-1.12 raise for their data pointer, so there the quick test runs
# in a ``try`` (``distinct_output_test``) and the full check decides.
# ``storage_key`` applies the rule to one tensor (the full check); ``distinct_storage_source``
# writes the cheapest exact test that one output shares no storage with given tensors, for the
# op's generated call: when it fails, the call falls back to the full check.


def storage_key(t: torch.Tensor) -> Optional[int]:
    """What identifies ``t``'s storage, or None where nothing does (See NOTE: [storage
    identity])."""
    if t.is_meta or t.layout is not torch.strided:
        return None
    if storage_id is not None:
        return int(storage_id(t))
    return int(t.storage()._cdata)


def aliases_any(inputs: Iterable[Any], outputs: Iterable[Any]) -> bool:
    """Whether an output shares storage with an input or another output (torch's rule)."""
    seen = {storage_key(t) for t in tensors_in(inputs)}
    seen.discard(None)
    for o in tensors_in(outputs):
        key = storage_key(o)
        if key is None:
            continue
        if key in seen:
            return True
        seen.add(key)
    return False


# NOTE: [lazy views of real tensors]
# A lazily conjugated view (``is_conj()``) exists only for complex dtypes: c10's
# ``TensorImpl::_set_conj`` asserts a complex dtype, and ``conj()`` of a real tensor returns the
# tensor itself. A lazily negated view (``is_neg()``) can be real (``z.conj().imag``). Reading
# ``dtype.is_complex`` (two attribute reads) costs less than calling ``is_conj()``, so the generated
# test asks ``is_conj()`` only of complex tensors.


# NOTE: [backends other than dense]
# torch's dispatcher picks an op's kernel by the backend of its tensors, not by their device
# type alone: a kernel registered for "cpu" serves dense (strided) CPU tensors only. A sparse,
# sparse compressed, mkldnn or quantized tensor gets the op's kernel for every device, or
# torch's "Could not run '<op>' with arguments from the 'SparseCPU' backend" where it has none;
# a nested tensor gets that error in any case (no kernel of a custom op serves its backend).
# Where several tensors differ, the backend of highest priority decides (nested, then sparse
# compressed, sparse, mkldnn, quantized: the order of c10's functionality keys). Measured on
# torch 2.13 with torch's own custom_op.
# Upstream: https://github.com/pytorch/pytorch/blob/v2.4.0/c10/core/DispatchKey.h

#: A backend's name before the device's in its dispatch key, by priority (See NOTE: [backends
#: other than dense]).
_OTHER_BACKENDS = ("NestedTensor", "SparseCsr", "Sparse", "Mkldnn", "Quantized")
_SPARSE_COMPRESSED = frozenset(
    getattr(torch, name)
    for name in ("sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc")
    if hasattr(torch, name)
)


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t`` is dense: strided, not quantized, not nested."""
    return backend_of(t) is None


def backend_of(t: torch.Tensor) -> Optional[str]:
    """The name of ``t``'s backend other than dense (``"Sparse"``), else None."""
    if HAS_NESTED and t.is_nested:
        return "NestedTensor"
    if t.layout in _SPARSE_COMPRESSED:
        return "SparseCsr"
    if t.layout is torch.sparse_coo:
        return "Sparse"
    if t.layout is not torch.strided:
        return "Mkldnn"
    return "Quantized" if t.is_quantized else None


def other_backend(tensors: Sequence[torch.Tensor]) -> Optional[str]:
    """The dispatch key (``"SparseCPU"``) of the backend other than dense of highest priority
    among ``tensors``, if any (See NOTE: [backends other than dense])."""
    found = {backend_of(t): t for t in tensors}
    for name in _OTHER_BACKENDS:
        if name in found:
            return name + dispatch_key(found[name].device.type)
    return None


def fallback_source(t: str) -> str:
    """Python source that is True when the tensor named ``t`` is one the dispatcher's fallbacks
    materialize before a kernel sees it: a lazily conjugated or negated view (See NOTE: [lazy
    views of real tensors]) or a ZeroTensor; ``"False"`` on a torch without either."""
    tests = []
    if HAS_LAZY_CONJ:
        tests.append(f"{t}.is_neg() or {t}.dtype.is_complex and {t}.is_conj()")
    if HAS_ZERO_TENSOR:
        tests.append(f"{t}._is_zerotensor()")
    return " or ".join(tests) or "False"


def distinct_storage_source(out: str, tensors: Sequence[str]) -> str:
    """Python source that is True only when the tensor ``out`` shares a storage with none of
    ``tensors`` (See NOTE: [storage identity]); it calls ``torch._C._is_alias_of`` as
    ``$alias_of`` where torch has it."""
    if not tensors:
        return "True"
    if is_alias_of is not None:  # also for tensors without storage, where storage_id raises
        return " and ".join(f"not $alias_of({out}, {t})" for t in tensors)
    # At storage offset 0 a tensor's data pointer is its storage's.
    tests = [f"not {out}.storage_offset()"]
    tests += [f"not {t}.storage_offset() and {out}.data_ptr() != {t}.data_ptr()" for t in tensors]
    return " and ".join(tests)


def _distinct_output_source(
    out: str, tensors: Sequence[str], globals_: Dict[str, Any]
) -> Tuple[str, bool]:
    """The test that ``out`` is a tensor sharing no storage with any of ``tensors``, and whether
    it may raise: where it reads data pointers (torch 1.8-1.12), a tensor without storage
    (sparse, mkldnn) makes it raise ``RuntimeError``. ``globals_`` holds ``type`` and
    ``Tensor`` and gets the names the test uses."""
    globals_["alias_of"] = is_alias_of
    test = f"$type({out}) is $Tensor and {distinct_storage_source(out, tensors)}"
    return test, bool(tensors) and is_alias_of is None


def distinct_output_test(
    out: str, tensors: Sequence[str], globals_: Dict[str, Any]
) -> Tuple[List[str], str]:
    """Generated lines, and the test after them, that is True only when ``out`` is a tensor
    sharing no storage with any of ``tensors`` (See NOTE: [storage identity]; False where a
    tensor has no storage: the full check decides)."""
    test, may_raise = _distinct_output_source(out, tensors, globals_)
    if not may_raise:
        return [], test
    globals_["distinct"] = None
    lines = ["try:", f"    $distinct = {test}", "except RuntimeError:", "    $distinct = False"]
    return lines, "$distinct"


def distinct_output_returned(
    out: str, tensors: Sequence[str], globals_: Dict[str, Any]
) -> List[str]:
    """Generated lines returning ``out`` where :func:`distinct_output_test` holds (cheaper on
    torch 1.8-1.12, whose ``try`` then holds only the test and the return)."""
    test, may_raise = _distinct_output_source(out, tensors, globals_)
    lines = [f"if {test}:", f"    return {out}"]
    if not may_raise:
        return lines
    return ["try:", *(f"    {line}" for line in lines), "except RuntimeError:", "    pass"]
