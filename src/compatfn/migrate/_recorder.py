"""Written as ``sitecustomize.py`` into a folder put first on ``PYTHONPATH`` by ``migrate
--verify``: in every Python process of the user's test command, it records each call of the
Functions named in ``COMPATFN_VERIFY_CLASSES`` (``{file: [class names]}``) as their modules are
imported: inputs, outputs and the gradients their backward returns, saved at exit into
``COMPATFN_VERIFY_OUT`` under ``module:qualname``. It wraps only those classes' ``apply`` (and
the module's own names bound to it: ``fn = Fn.apply``);
torch is left as it is. A class defined inside a function (a factory) is wrapped each time that
function's frame returns: the module-level function holding it is wrapped to watch its calls
(``sys.setprofile``, the previous profiler kept). Standard library only until a recorded class
runs (then torch, which imported it).
"""

import atexit
import functools
import importlib.abc
import inspect
import json
import os
import sys
import types

_TARGETS = {
    os.path.realpath(path): names
    for path, names in json.loads(os.environ.get("COMPATFN_VERIFY_CLASSES", "{}")).items()
}
_OUT = os.environ.get("COMPATFN_VERIFY_OUT", "")
_CALLS: dict = {}  # "module.Class" -> a dict per call


def _summary(value):
    """Tensors as detached CPU copies; tuples and lists item by item; plain values as they are;
    anything else by its type name."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_summary(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str, complex)):
        return value
    return f"<{type(value).__name__}>"


def _recording(original):
    """A classmethod ``apply`` that records each call under the class it is called on."""

    def apply(klass, *args, **kwargs):
        key = f"{klass.__module__}:{klass.__qualname__}"
        entry = {"inputs": [*_summary(list(args)), _summary(kwargs)], "grads": None}
        if not _CALLS:
            # Registered after torch's own exit handlers, so that it runs before them: saved
            # after them, torch 1.8 hangs at exit (its autograd engine's destructor waits).
            atexit.register(_save)
        _CALLS.setdefault(key, []).append(entry)
        result = original.__get__(None, klass)(*args, **kwargs)
        entry["outputs"] = _summary(result)
        torch = sys.modules.get("torch")
        outputs = result if isinstance(result, tuple) else (result,)
        nodes = {
            id(o.grad_fn): o.grad_fn
            for o in outputs
            if torch is not None and isinstance(o, torch.Tensor) and o.grad_fn is not None
        }
        for node in nodes.values():
            node.register_hook(lambda grads, _, e=entry: e.__setitem__("grads", _summary(grads)))
        return result

    apply._compatfn_verify = True
    return classmethod(apply)


def _wrap(module, path):
    in_functions = []
    for name in _TARGETS[path]:
        cls = _find(module, name)
        if cls is None:
            in_functions.append(name)
            continue
        before = cls.apply
        _wrap_class(cls)
        _rebind_aliases(module, before, cls.apply)
    for holder, attribute, watched in _factories(module, in_functions):
        setattr(holder, attribute, watched)


def _wrap_class(cls):
    raw = inspect.getattr_static(cls, "apply")
    if getattr(getattr(raw, "__func__", None), "_compatfn_verify", False):
        return  # already recording (a factory's frame returning the same class again)
    cls.apply = _recording(raw)


def _rebind_aliases(module, before, after):
    """Module-level names (and class attributes) bound to a class's ``apply`` while the module
    ran (``flash_attn_func = FlashAttnFunc.apply``) record too: bound again to ``after``."""
    holders = [module, *(v for v in vars(module).values() if isinstance(v, type))]
    for holder in holders:
        for attribute, value in list(vars(holder).items()):
            if attribute == "apply":
                continue  # a class's own apply (wrapped where it is a target)
            if value is before or (type(value) is type(before) and _equal(value, before)):
                setattr(holder, attribute, after)


def _equal(a, b):
    try:
        return bool(a == b)
    except Exception:  # an object whose == fails or is not a bool
        return False


def _find(module, name):
    found = getattr(module, name, None)
    if isinstance(found, type):
        return found
    for value in list(vars(module).values()):
        inner = getattr(value, name, None) if isinstance(value, type) else None
        if isinstance(inner, type):
            return inner
    return None


def _functions(module):
    """(holder, attribute, stored value, function) for the module's functions and its classes'
    methods (static and class methods included)."""
    for attribute, value in list(vars(module).items()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            yield module, attribute, value, value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for key, raw in list(vars(value).items()):
                fn = getattr(raw, "__func__", raw)
                if isinstance(fn, types.FunctionType):
                    yield value, key, raw, fn


def _parent_of(code, name):
    """The code object (``code`` or one nested in it) whose body defines class ``name``: the
    class body is a nested code object of that name run without new locals (not a function)."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and not const.co_flags & inspect.CO_NEWLOCALS:
                return code
            found = _parent_of(const, name)
            if found is not None:
                return found
    return None


def _factories(module, names):
    """(holder, attribute, watched attribute) for each function of ``module`` that defines
    classes of ``names`` in its body (or in functions nested in it): one watcher for all of
    them (a function defining two is wrapped once)."""
    for holder, attribute, raw, fn in _functions(module):
        parents = {}  # code object -> the names of the classes its body defines
        for name in names:
            parent = _parent_of(fn.__code__, name)
            if parent is not None:
                parents.setdefault(parent, []).append(name)
        if parents:
            watched = _watching(fn, parents)
            yield holder, attribute, watched if raw is fn else type(raw)(watched)


def _watching(fn, parents):
    """``fn``, wrapping the classes ``parents`` names each time a frame running their code
    returns."""

    @functools.wraps(fn)
    def watched(*args, **kwargs):
        previous = sys.getprofile()

        def profile(frame, event, arg):
            if event == "return" and frame.f_code in parents:
                for name in parents[frame.f_code]:
                    found = frame.f_locals.get(name)
                    if isinstance(found, type):
                        _wrap_class(found)
            if callable(previous):  # a profiler written in Python (cProfile's is not)
                previous(frame, event, arg)

        sys.setprofile(profile)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setprofile(previous)

    return watched


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, path):
        self.loader = loader
        self.path = path

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _wrap(module, self.path)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        origin = os.path.realpath(spec.origin) if spec.origin else ""
        if origin in _TARGETS and spec.loader is not None:
            spec.loader = _Loader(spec.loader, origin)
        return spec


def _save():
    torch = sys.modules.get("torch")
    if _CALLS and torch is not None and _OUT:
        torch.save(_CALLS, os.path.join(_OUT, f"calls-{os.getpid()}.pt"))


if _TARGETS:
    sys.meta_path.insert(0, _Finder())
