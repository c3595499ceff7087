"""Launching a compiled Triton kernel without Triton's per-call Python work.

``kernel[grid](*args, **kwargs)`` binds every argument, specializes each one (dtype, 16-byte
alignment, integer divisibility), hashes that into a cache key and looks the compiled kernel up: on
the H200's host that is about 18 µs for an empty kernel and most of a decode step's host time at
batch 1 (issue #24; ``gpu/kvarn/probe_host.py``). Here the first launch of a kind goes through Triton
(which compiles it) and the compiled kernel is kept under a key of our own that is at least as fine
as Triton's specialization of these kernels (per tensor: dtype and 16-byte alignment; per integer:
== 1, divisible by 16, 32-bit range; every constexpr and option by value), so a later launch with the
same key is the same compiled kernel; it is then called through the launcher directly.

The fast path is used on CUDA with Triton 3.6 (the layout of ``CompiledKernel.run`` it calls) and no
launch hooks (a profiler's hooks get the standard path). ``MODE`` = "off" turns it off; "check" also
computes Triton's own key on every launch and fails if one of our keys ever stood for two of
Triton's (what the GPU tests set). It is a module constant, not an environment knob: a knob would
have to be registered in vllm/envs.py (the kvarn row) to enter the compile cache key.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import triton
from triton.runtime.jit import JITFunction

MODE = "on"  # "on" | "off" | "check"
_SUPPORTED = triton.__version__.startswith("3.6")
if _SUPPORTED:
    from triton import knobs as _knobs
# What Triton's CUDA driver asks for a launch (the current device, its current raw stream), as the
# C calls it makes them through: absent from a CPU build of torch, where no launch takes this path.
_current_device = getattr(torch._C, "_cuda_getDevice", None)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# our key -> (compiled kernel, Triton's key or None, the parameter names in order, their defaults)
_CACHE: dict[tuple, tuple[Any, Any, tuple[str, ...], dict[str, Any]]] = {}


def _spec(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.data_ptr() % 16 == 0)
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("i", value == 1, value % 16 == 0, -(2**31) <= value < 2**31)
    if isinstance(value, float):
        return ("f",)
    if value is None:
        return None
    raise TypeError(type(value))


def _triton_key(kernel: Any, args: tuple, kwargs: dict) -> Any:
    from triton.runtime.driver import driver
    from triton.runtime.jit import compute_cache_key

    device = driver.active.get_current_device()
    _, key_cache, _, _, binder = kernel.device_caches[device]
    _, specialization, options = binder(*args, **kwargs)
    return compute_cache_key(key_cache, specialization, options)


_BINDINGS = itertools.count(1)


def binding() -> int:
    """A number for one set of fixed launch arguments (``launch``'s ``bound``), never handed out
    twice in a process: an object's ``id`` could be a later object's once it is freed, and the
    later one's fixed arguments specialized differently."""
    return next(_BINDINGS)


_KWKEYS: dict[tuple, int] = {}


def kwargs_key(kwargs: dict[str, Any]) -> int:
    """``kwargs`` (constexprs and options) as the key ``launch`` takes as ``kwkey``: a number that
    stands for their items by value (equal kwargs, equal number; never reused), so a launch's key
    hashes one int rather than twenty pairs (0.3 µs a launch). A caller that keeps its kwargs per
    shape builds this once with them, not per launch."""
    items = tuple(sorted(kwargs.items()))
    got = _KWKEYS.get(items)
    if got is None:
        got = _KWKEYS[items] = len(_KWKEYS)
    return got


def launch(
    kernel: Any,
    grid: tuple[int, ...],
    args: tuple,
    kwargs: dict,
    *,
    bound: int | None = None,
    vary: tuple[int, ...] | None = None,
    kwkey: int | None = None,
    restore: tuple[tuple[int, torch.Tensor], ...] = (),
) -> None:
    """``kernel[grid](*args, **kwargs)``, through the launcher directly once compiled.

    ``bound`` (a number from ``binding()``, such as a layer's launch holds) says the arguments not
    listed in ``vary`` specialize the same at every launch with it (a tensor: the same dtype and
    16-byte alignment; an integer: the same == 1, divisibility by 16 and 32-bit range, or one the
    kernel does not specialize): only those in ``vary`` are specialized per call. All are still
    passed, and read, at every launch. ``kwkey`` is ``kwargs_key(kwargs)``, when the caller keeps
    it. ``restore`` (bound launches only): (position, tensor) pairs of arguments the caller passes
    as the tensor's ``data_ptr()``, for tensors it holds for the binding's life (a layer's cache,
    pools, rotation): the launcher then reads an integer instead of calling ``data_ptr`` and asking
    the driver about the pointer (0.16 µs a tensor, run 47); a launch that compiles or checks
    Triton's key gets the tensors back. Never position 0, which the fast path checks is a CUDA
    tensor."""
    first = args[0]
    if (
        MODE == "off"
        or not _SUPPORTED
        or first.__class__ is not _Tensor
        or not first.is_cuda
        or not isinstance(kernel, JITFunction)  # the interpreter's kernels are not
        or _hooked()
    ):
        kernel[grid](*_restored(args, restore), **kwargs)
        return
    # The specialization, inline: a function call per argument was most of a launch's host time
    # (24 arguments: 17.7 µs against 6.3 µs for the launcher alone; probe_host.py --floor, run 47).
    # A tensor adds its dtype and whether it is 16-byte aligned, an int one small int of its three
    # properties; every other class its _spec. A dtype is never an int nor a tuple, so the flat
    # list still says which argument was a tensor. A tensor goes to the launcher as the pointer
    # read here (see ``restore``), once it is known to be on the GPU.
    specs: list = []
    push = specs.append
    call = list(args)
    for i in range(len(args)) if vary is None else vary:
        a = args[i]
        c = a.__class__
        if c is int:
            push((a == 1) | (((a & 15) == 0) << 1) | ((a in _I32) << 2))
        elif c is _Tensor and a.is_cuda:
            ptr = call[i] = a.data_ptr()
            push(a.dtype)
            push((ptr & 15) == 0)
        else:
            try:
                push(_spec(a))
            except TypeError:
                kernel[grid](*_restored(args, restore), **kwargs)
                return
    key = (id(kernel), bound, tuple(specs), kwargs_key(kwargs) if kwkey is None else kwkey)
    hit = _CACHE.get(key)
    if hit is None:
        if restore and bound is None:
            raise ValueError("launch: restore needs a binding (its pointers are fixed arguments)")
        full = _restored(args, restore)
        compiled = kernel[grid](*full, **kwargs)
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        names = tuple(kernel.arg_names)
        defaults = {p.name: p.default for p in kernel.params if p.has_default}
        # The parameters after the positional ones (constexprs, all in kwargs or defaulted): fixed
        # for this key, since the key holds kwargs by value.
        tail = tuple(kwargs[n] if n in kwargs else defaults[n] for n in names[len(args) :])
        tkey = _triton_key(kernel, full, kwargs) if MODE == "check" else None
        _CACHE[key] = (_Compiled(compiled), tkey, len(args), tail)
        return
    compiled, tkey, nargs, tail = hit
    if nargs != len(args):
        raise TypeError(f"{kernel.fn.__name__}: {len(args)} positional arguments, was {nargs}")
    if MODE == "check":
        now = _triton_key(kernel, _restored(args, restore), kwargs)
        if tkey is None:  # filled while the mode was "on": Triton's key is taken now
            _CACHE[key] = (compiled, now, nargs, tail)
        elif now != tkey:
            raise AssertionError(f"fast launch key of {kernel.fn.__name__} stands for two kernels")
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    compiled.launch(grid[0], g1, g2, _raw_stream(_current_device()), *compiled.head, *call, *tail)


def _restored(args: tuple, restore: tuple) -> tuple:
    """``args`` with the tensors of ``restore`` back in their places (Triton's own launch and key
    take tensors)."""
    if not restore:
        return args
    full = list(args)
    for i, tensor in restore:
        full[i] = tensor
    return tuple(full)


_Tensor = torch.Tensor
_I32 = range(-(2**31), 2**31)  # ``in`` on a range of ints is arithmetic, not a walk


class _Compiled:
    """What a launch passes to a compiled kernel's launcher besides the grid, the stream and the
    arguments. Where the kernel needs no scratch memory (these kernels), that is Triton's C launch
    function itself with its fixed leading arguments: ``CompiledKernel.run`` is a property in front
    of a Python ``__call__`` that only allocates scratch (0.7 µs a launch, run 47)."""

    __slots__ = ("head", "launch")

    def __init__(self, compiled: Any) -> None:
        run = compiled.run
        direct = getattr(run, "launch", None)
        if (
            direct is not None
            and getattr(run, "global_scratch_size", 1) == 0
            and getattr(run, "profile_scratch_size", 1) == 0
        ):
            self.launch = direct
            # cooperative grid, PDL, the two scratch buffers (none), the packed metadata, the
            # launch metadata and the two hooks (none: a hooked launch takes Triton's own path)
            self.head = (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                         compiled.packed_metadata, None, None, None)  # fmt: skip
        else:
            self.launch = run
            self.head = (compiled.function, compiled.packed_metadata, None, None, None)


def _hooked() -> bool:
    """A launch hook is set (a profiler's): then every launch takes Triton's own path."""
    rt = _knobs.runtime
    enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
    if enter is _ENTER and leave is _EXIT:  # Triton's own chains: hooked when one holds a call
        return bool(enter.calls or leave.calls)
    # a plain function where a caller set one (or a chain of its own)
    return bool(
        (enter is not None and getattr(enter, "calls", True))
        or (leave is not None and getattr(leave, "calls", True))
    )


if _SUPPORTED:
    _ENTER, _EXIT = _knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook
