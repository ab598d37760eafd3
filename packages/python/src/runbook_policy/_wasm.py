"""Calls into the component through wasmtime-py's component API.

wasmtime-py 50 has no bindgen: exports are reached by name inside the exported interface instance, and
the ``session`` resource by its component names (``[constructor]session``, ``[method]session.feed``, ...).

Its generic ``Func.__call__`` asks the engine for the function's type on every call and walks each
parameter's type through FFI again for every record field and variant case, which makes a typed call
about twice as slow as the call itself. :class:`Export` asks once: it keeps the type tree of each
function, with every field list, case list and element type read once and kept on the type object, and
lowers and lifts through wasmtime-py's own ``convert_to_c``/``convert_from_c`` on that tree. This uses
wasmtime-py internals of the pinned 50.x line; when they are not what this module expects it falls back to
the public ``Func.__call__`` (same values, slower), so a change there costs speed, never correctness.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple, Type

import wasmtime
import wasmtime.component as wc

INTERFACE = "runbook:policy/policy@1.2.0"

try:  # The fast path's internals (see the module docstring).
    from ctypes import byref, pointer

    from wasmtime import _ffi as _ffi
    from wasmtime.component import _types as _wt
    from wasmtime.component._enter import enter_wasm as _enter_wasm

    _FAST_OK = all(
        hasattr(_wt, n) for n in ("RecordType", "VariantType", "OptionType", "ResultType", "ListType", "VariantLikeType", "U8")
    ) and all(hasattr(_ffi, n) for n in ("wasmtime_component_val_t", "wasmtime_component_func_call", "wasmtime_component_val_delete"))
except Exception:  # noqa: BLE001 - any surprise means: use the public path
    _FAST_OK = False

# Set to False (tests do) to force the public path.
fast_path_enabled = _FAST_OK

_FROZEN_CLASSES: Dict[type, type] = {}


def _frozen_class(cls: type) -> type:
    """A subclass whose type properties are plain attributes, so each instance can keep what it read once."""
    sub = _FROZEN_CLASSES.get(cls)
    if sub is None:
        names = ("fields", "cases", "element", "payload", "ok", "err")
        attrs = {n: None for n in names if isinstance(getattr(cls, n, None), property)}
        sub = type("Frozen" + cls.__name__, (cls,), attrs)
        _FROZEN_CLASSES[cls] = sub
    return sub


def _keep(ty: Any, **read: Any) -> None:
    """Moves ``ty`` to its frozen class and keeps what was read as plain attributes."""
    ty.__class__ = _frozen_class(type(ty))
    for name, value in read.items():
        setattr(ty, name, value)


def _freeze(ty: Any) -> Any:
    """Reads a type tree once and keeps it on the type objects (see the module docstring)."""
    if isinstance(ty, _wt.RecordType):
        _keep(ty, fields=[(n, _freeze(t)) for n, t in ty.fields])
    elif isinstance(ty, _wt.VariantType):
        _keep(ty, cases=[(n, None if t is None else _freeze(t)) for n, t in ty.cases])
    elif isinstance(ty, _wt.OptionType):
        _keep(ty, payload=_freeze(ty.payload))
    elif isinstance(ty, _wt.ResultType):
        ok, err = ty.ok, ty.err
        _keep(ty, ok=None if ok is None else _freeze(ok), err=None if err is None else _freeze(err))
    elif isinstance(ty, _wt.ListType):
        element = _freeze(ty.element)
        is_bytes = isinstance(element, _wt.U8)
        _keep(ty, element=element, _is_bytes=lambda: is_bytes)
    if isinstance(ty, _wt.VariantLikeType):
        tagged = ty._tagged()
        setattr(ty, "_tagged", lambda: tagged)
    return ty


class Export:
    """One exported function of one instance, called with its store's fuel refilled each time."""

    __slots__ = ("func", "name", "params", "result", "fast")

    def __init__(self, store: wasmtime.Store, func: wc.Func, name: str) -> None:
        self.func = func
        self.name = name
        self.fast = False
        self.params: List[Any] = []
        self.result: Any = None
        if fast_path_enabled:
            try:
                fty = func.type(store)
                self.params = [_freeze(t) for _, t in fty.params]
                r = fty.result
                self.result = None if r is None else _freeze(r)
                self.fast = True
            except Exception:  # noqa: BLE001 - internals not as expected: the public path
                self.fast = False

    def __call__(self, store: wasmtime.Store, *args: Any) -> Any:
        if not self.fast:
            result = self.func(store, *args)
            self.func.post_return(store)
            return result
        params = self.params
        if len(args) != len(params):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(params)} parameters")
        n = 0
        space = (_ffi.wasmtime_component_val_t * len(args))()
        try:
            for ty, val in zip(params, args):
                ty.convert_to_c(store, val, pointer(space[n]))
                n += 1
            out = _ffi.wasmtime_component_val_t() if self.result is not None else None
            func = self.func

            def run() -> Any:
                return _ffi.wasmtime_component_func_call(
                    byref(func._func), store._context(), space, n, byref(out) if out is not None else None, 1 if out is not None else 0
                )

            _enter_wasm(run)
            result = None if out is None else self.result.convert_from_c(out)
        finally:
            for i in range(n):
                _ffi.wasmtime_component_val_delete(byref(space[i]))
        self.func.post_return(store)
        return result


class Instance:
    """One instance of the component in its own store, with fuel and a memory cap as a backstop."""

    def __init__(self, engine: wasmtime.Engine, linker: wc.Linker, component: wc.Component, fuel: int, memory_cap: int) -> None:
        self.store = wasmtime.Store(engine)
        self.store.set_limits(memory_size=memory_cap)
        self.fuel = fuel
        self.store.set_fuel(fuel)
        self.inst = linker.instantiate(self.store, component)
        iface = self.inst.get_export_index(self.store, INTERFACE)
        if iface is None:
            raise LookupError(f"the component does not export `{INTERFACE}`")
        self._iface = iface
        self._exports: Dict[str, Export] = {}

    def export(self, name: str) -> Export:
        e = self._exports.get(name)
        if e is None:
            index = self.inst.get_export_index(self.store, name, self._iface)
            func = self.inst.get_func(self.store, index) if index is not None else None
            if func is None:
                raise LookupError(f"the component's `{INTERFACE}` has no function `{name}`")
            e = Export(self.store, func, name)
            self._exports[name] = e
        return e

    def call(self, name: str, *args: Any) -> Any:
        """Calls an export with a full fuel budget. Raises wasmtime's errors as they are (the caller maps them)."""
        e = self._exports.get(name) or self.export(name)
        self.store.set_fuel(self.fuel)
        return e(self.store, *args)


TRAPS: Tuple[Type[BaseException], ...] = (wasmtime.WasmtimeError, wasmtime.Trap)


def trap_message(e: BaseException) -> str:
    """Wasmtime's error text is a backtrace, then ``Caused by:`` and the cause: the cause comes first here."""
    text = str(e).strip()
    head, sep, cause = text.partition("Caused by:")
    if not sep:
        return text
    cause = " ".join(line.strip() for line in cause.strip().splitlines() if line.strip())
    return f"{cause} ({head.strip()})"


class _Record:
    """A WIT record value: its attributes are the record's field names (kebab-case, so set through
    ``__dict__``); wasmtime-py lowers a record by reading each field with ``getattr``."""


def record(**fields: Any) -> Any:
    r = _Record()
    r.__dict__.update(fields)
    return r


def variant(tag: str, payload: Any = None) -> Any:
    return wc.Variant(tag, payload)


def unwrap_result(value: Any) -> Tuple[bool, Any]:
    """A lifted ``result<T, E>``: wasmtime-py gives a ``Variant`` when both cases lift to one Python type,
    else the bare payload. Returns (is_ok, payload); the caller says which bare type is which."""
    if isinstance(value, wc.Variant):
        return value.tag == "ok", value.payload
    raise TypeError("not a tagged result")

