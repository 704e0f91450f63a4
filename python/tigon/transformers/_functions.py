"""Copies of transformers' Python functions with one thing changed, their functools.wraps decorators rebuilt around
the copy (the instance-level RoPE reroute, the fused residual norm)."""

from __future__ import annotations

import types

_EMPTY = object()


def rewrap(fn, make):
    """fn with the function it wraps innermost (through __wrapped__) replaced by make(that function), each wrapper
    rebuilt around the new inner one. None where make returns None, fn or a wrapper is not a plain Python function,
    or a wrapper does not hold its inner function in exactly one closure cell."""
    if not isinstance(fn, types.FunctionType):
        return None
    inner = getattr(fn, "__wrapped__", None)
    if inner is None:
        new = make(fn)
        if new is None:
            return None
    else:
        new_inner = rewrap(inner, make)
        cells = list(fn.__closure__ or ())
        hits = [i for i, c in enumerate(cells) if _cell_value(c) is inner]
        if new_inner is None or len(hits) != 1:
            return None
        cells[hits[0]] = types.CellType(new_inner)
        new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells))
        new.__wrapped__ = new_inner
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__doc__, new.__module__ = fn.__qualname__, fn.__doc__, fn.__module__
    return new


def with_globals(fn, **names):
    """A copy of fn whose global lookups of `names` see the given values (its module is left alone). Decorators made
    with functools.wraps are looked through: the wrapped function is copied and the wrapper rebuilt around it.
    Returns None where fn is not a plain (possibly wrapped) Python function."""

    def copy(inner):
        scope = copied_globals(inner, **names)
        return types.FunctionType(inner.__code__, scope, inner.__name__, inner.__defaults__, inner.__closure__)

    return rewrap(fn, copy)


def copied_globals(fn, **names) -> dict:
    """A copy of fn's module globals with `names` added or replaced, for a rewritten copy of fn to run in. The copy has
    no __name__: torch.compile resolves a global of a function whose globals hold a module name through that module
    (torch < 2.12 without checking that they are its globals), where a name only the copy has is missing and a
    replaced one has its original value; without it, the copy's own dict is what its guards read."""
    scope = {k: v for k, v in fn.__globals__.items() if k != "__name__"}
    scope.update(names)
    return scope


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _EMPTY
