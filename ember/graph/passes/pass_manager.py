"""Pass infrastructure: passes, ``Sequential`` and ``PassContext``.

A pass is a function ``IRModule -> IRModule`` with a ``name``, an ``opt_level`` and the names of
passes it ``required`` to run first. Passes never modify their input module; they return a new
one (sharing unchanged functions).

``PassContext(opt_level=2, disabled_pass=(), required_pass=(), instruments=(), config={})`` is a
context manager; contexts stack (the innermost ``with`` is current, thread-local) and there is
no global mutable configuration beyond the ``with`` scope. A ``Sequential`` runs a pass when the
current context enables it: not disabled, and either required or ``pass.opt_level <=
ctx.opt_level``. Calling a pass directly runs it whatever its level. Every pass run goes
through the context's instruments (``ember.graph.passes.instrument``): ``should_run``,
``run_before_pass``, ``run_after_pass``.

    with ember.PassContext(opt_level=3, disabled_pass=["FoldScaleAxis"],
                           instruments=[PassTimingInstrument()]):
        lib = ember.build(mod, target="llvm", params=params)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ...errors import EmberError, PassError
from ..ir import IRModule

# config keys a PassContext accepts: name -> (type, description)
CONFIG_KEYS: dict[str, tuple[type, str]] = {}


def register_config(key: str, typ: type, doc: str) -> str:
    """Declare a ``PassContext`` config key (``"FuseOps.max_depth"``) with its type."""
    CONFIG_KEYS[key] = (typ, doc)
    return key


@dataclass(frozen=True)
class PassInfo:
    """What the context and instruments see of a pass."""

    name: str
    opt_level: int = 0
    required: tuple = ()


class Pass:
    """A module-to-module transformation (subclasses define ``transform(mod, ctx)``)."""

    info: PassInfo

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def opt_level(self) -> int:
        return self.info.opt_level

    @property
    def required(self) -> tuple:
        return self.info.required

    def transform(self, mod: IRModule, ctx: "PassContext") -> IRModule:  # pragma: no cover
        """Run the pass itself on ``mod`` under ``ctx`` and return the new ``IRModule``; subclasses
        implement it (``ctx.run_pass`` calls it through the instruments)."""
        raise NotImplementedError

    def __call__(self, mod: IRModule) -> IRModule:
        """Run the pass (and, first, its required passes) under the current context's
        instruments, whatever the context's ``opt_level``."""
        ctx = PassContext.current()
        for r in self.required:
            mod = get_pass(r)(mod)
        return ctx.run_pass(self, mod)

    def __repr__(self):
        return f"<Pass {self.name} opt_level={self.opt_level}>"


class ModulePass(Pass):
    """A pass made from ``fn(mod, ctx) -> mod`` (see ``module_pass``)."""

    def __init__(self, fn: Callable, info: PassInfo, doc: str = ""):
        self.fn = fn
        self.info = info
        self.__doc__ = doc or fn.__doc__

    def transform(self, mod, ctx):
        """``fn(mod, ctx)``.

        Raises:
            PassError: ``fn`` returned something other than an ``IRModule``."""
        out = self.fn(mod, ctx)
        if not isinstance(out, IRModule):
            raise PassError(f"pass {self.name} returned {type(out).__name__}, not an IRModule")
        return out


_PASSES: dict[str, Callable[[], Pass]] = {}


def module_pass(name: str, opt_level: int = 0, required: Sequence[str] = ()):
    """Decorator: ``fn(mod, ctx) -> IRModule`` becomes a registered pass factory ``name``.

    The decorated name is a function returning a fresh ``Pass`` (so ``FoldConstant()(mod)``);
    keyword arguments of the factory reach ``fn`` as ``fn(mod, ctx, **kw)``.
    """
    def deco(fn):
        info = PassInfo(name, opt_level, tuple(required))

        def factory(**kw) -> Pass:
            return ModulePass(lambda mod, ctx: fn(mod, ctx, **kw), info, fn.__doc__)
        factory.__name__ = name
        factory.__doc__ = fn.__doc__
        factory.info = info
        _PASSES[name] = factory
        return factory
    return deco


def function_pass(name: str, opt_level: int = 0, required: Sequence[str] = ()):
    """Decorator: ``fn(func, mod, ctx) -> Function`` applied to every function of the module
    that is not a fused group (``primitive``) becomes a registered pass factory ``name``."""
    def deco(fn):
        def per_module(mod, ctx, **kw):
            out = IRModule(mod.functions)
            for n, f in mod.functions.items():
                if not f.attrs.get("primitive"):
                    out[n] = fn(f, mod, ctx, **kw)
            return out
        per_module.__doc__ = fn.__doc__
        return module_pass(name, opt_level, required)(per_module)
    return deco


def get_pass(name: str, **kw) -> Pass:
    """A fresh instance of the registered pass ``name``.

    Raises:
        PassError: no pass of that name (the message lists the known ones).
    """
    from . import _load_all
    _load_all()
    if name not in _PASSES:
        raise PassError(f"unknown pass {name!r}; known passes: {', '.join(sorted(_PASSES))}")
    return _PASSES[name](**kw)


def list_passes() -> list[str]:
    """Names of every registered pass, sorted."""
    from . import _load_all
    _load_all()
    return sorted(_PASSES)


class Sequential(Pass):
    """Run ``passes`` in order, each when the current ``PassContext`` enables it.

    Args:
        passes: ``Pass`` objects or registered pass names.
        opt_level: the level of the sequence itself (when nested in another ``Sequential``).
        name: shown by instruments.
    """

    def __init__(self, passes: Iterable, opt_level: int = 0, name: str = "Sequential"):
        self.passes = [get_pass(p) if isinstance(p, str) else p for p in passes]
        self.info = PassInfo(name, opt_level, ())

    def transform(self, mod, ctx):
        """Run each member pass that ``ctx`` enables (after its enabled required passes) through
        ``ctx.run_pass``; returns the final module."""
        for p in self.passes:
            if not ctx.pass_enabled(p.info):
                continue
            for r in p.required:
                if ctx.pass_enabled(PassInfo(r, 0)):
                    mod = ctx.run_pass(get_pass(r), mod)
            mod = ctx.run_pass(p, mod)
        return mod

    def __call__(self, mod: IRModule) -> IRModule:
        return PassContext.current().run_pass(self, mod)

    def __repr__(self):
        return f"Sequential({[p.name for p in self.passes]})"


class PassContext:
    """Options under which passes run (see the module doc).

    Args:
        opt_level: 0 runs only the passes of level 0 (the ones lowering needs); 3 runs all the
            standard optimizations. Default 2.
        disabled_pass: pass names never run by a ``Sequential``.
        required_pass: pass names always run, whatever their level.
        instruments: ``PassInstrument`` objects (timing, IR dumps...).
        config: ``{key: value}`` options of individual passes (``CONFIG_KEYS`` lists them).
    Raises:
        PassError: unknown config key, a value of the wrong type, or an unknown pass name in
            ``disabled_pass`` / ``required_pass``.
    """

    _stack = threading.local()

    def __init__(self, opt_level: int = 2, disabled_pass: Iterable[str] = (),
                 required_pass: Iterable[str] = (), instruments: Iterable = (),
                 config: dict | None = None):
        self.opt_level = int(opt_level)
        self.disabled_pass = frozenset(disabled_pass or ())
        self.required_pass = frozenset(required_pass or ())
        self.instruments = list(instruments or ())
        self.config = dict(config or {})
        from . import _load_all
        _load_all()
        unknown = sorted((self.disabled_pass | self.required_pass) - set(_PASSES))
        if unknown:  # a misspelt name would silently disable (or require) nothing
            raise PassError(f"unknown pass name(s) {unknown} in PassContext disabled_pass/"
                            f"required_pass; known passes: {', '.join(sorted(_PASSES))}")
        for k, v in self.config.items():
            if k not in CONFIG_KEYS:
                raise PassError(f"unknown PassContext config key {k!r}; known keys: "
                                f"{', '.join(sorted(CONFIG_KEYS))}")
            typ = CONFIG_KEYS[k][0]
            if not isinstance(v, typ):
                raise PassError(f"PassContext config {k!r} must be {typ.__name__}, got {v!r}")

    # the stack ---------------------------------------------------------------------------------
    @classmethod
    def current(cls) -> "PassContext":
        """The innermost active context (a default ``PassContext()`` outside any ``with``)."""
        st = getattr(cls._stack, "items", None)
        if not st:
            return _DEFAULT
        return st[-1]

    def __enter__(self) -> "PassContext":
        st = getattr(PassContext._stack, "items", None)
        if st is None:
            st = PassContext._stack.items = []
        st.append(self)
        for ins in self.instruments:
            if hasattr(ins, "enter_pass_ctx"):
                ins.enter_pass_ctx()
        return self

    def __exit__(self, *exc):
        for ins in self.instruments:
            if hasattr(ins, "exit_pass_ctx"):
                ins.exit_pass_ctx()
        PassContext._stack.items.pop()
        return False

    # decisions ---------------------------------------------------------------------------------
    def pass_enabled(self, info: PassInfo) -> bool:
        """Whether a ``Sequential`` runs a pass of this ``info`` under this context."""
        if info.name in self.disabled_pass:
            return False
        if info.name in self.required_pass:
            return True
        return info.opt_level <= self.opt_level

    def get_config(self, key: str, default=None):
        """The value of config ``key`` (``default`` when not set)."""
        return self.config.get(key, default)

    def run_pass(self, p: Pass, mod: IRModule) -> IRModule:
        """Run ``p`` on ``mod`` through the instruments (a nested ``Sequential`` runs its
        members through them too)."""
        if not isinstance(p, Sequential):
            for ins in self.instruments:
                if hasattr(ins, "should_run") and not ins.should_run(mod, p.info):
                    return mod
            for ins in self.instruments:
                if hasattr(ins, "run_before_pass"):
                    ins.run_before_pass(mod, p.info)
        try:
            out = p.transform(mod, self)
        except EmberError:
            raise
        except Exception as e:  # a bug in a pass: name it instead of a bare deep traceback
            raise PassError(f"pass {p.name} failed: {type(e).__name__}: {e} (disable it with "
                            f"PassContext(disabled_pass=[{p.name!r}]) to compile without "
                            f"it)") from e
        if not isinstance(p, Sequential):
            for ins in self.instruments:
                if hasattr(ins, "run_after_pass"):
                    ins.run_after_pass(out, p.info)
        return out

    def __repr__(self):
        return (f"PassContext(opt_level={self.opt_level}, disabled_pass="
                f"{sorted(self.disabled_pass)}, required_pass={sorted(self.required_pass)})")


_DEFAULT = PassContext.__new__(PassContext)
_DEFAULT.opt_level = 2
_DEFAULT.disabled_pass = frozenset()
_DEFAULT.required_pass = frozenset()
_DEFAULT.instruments = []
_DEFAULT.config = {}

__all__ = ["Pass", "PassInfo", "ModulePass", "Sequential", "PassContext", "module_pass",
           "function_pass", "get_pass", "list_passes", "register_config", "CONFIG_KEYS"]
