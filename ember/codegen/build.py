"""Build C source into a shared library with the system C compiler, cached by content hash.

The compiler is ``$CC`` when set, else the first of ``cc``, ``gcc``, ``clang`` on ``PATH``. The
cache lives in ``$EMBER_CACHE_DIR`` (default ``$XDG_CACHE_HOME/ember`` or ``~/.cache/ember``);
an entry is ``<sha256>.so`` plus ``<sha256>.so.sha256`` holding the library's own digest, so a
truncated or corrupted entry is detected and rebuilt instead of loaded.

``$EMBER_CFLAGS`` (split like a shell command line) is appended to the compile flags and is part
of the cache key, e.g. ``EMBER_CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g"`` builds
every kernel with AddressSanitizer (run Python with
``LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0`` and a separate
``EMBER_CACHE_DIR``; see docs/performance.md, "Checking generated code with AddressSanitizer").
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from ..errors import CodegenError, ToolchainError

BUILD_VERSION = "1"  # bump to invalidate every cached library


def cache_dir() -> Path:
    """The kernel cache folder (created on demand)."""
    env = os.environ.get("EMBER_CACHE_DIR")
    if env:
        d = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = Path(base) / "ember"
    try:
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK):
            raise PermissionError("not writable")
    except OSError as e:
        raise ToolchainError(f"kernel cache folder {str(d)!r} cannot be used ({e}); set "
                             f"EMBER_CACHE_DIR to a writable folder") from None
    return d


def find_compiler() -> str:
    """Path of the C compiler to use.

    Raises:
        ToolchainError: ``$CC`` names a missing program, or none of cc/gcc/clang is installed.
    """
    cc = os.environ.get("CC")
    if cc:
        prog = cc.split()[0]
        if shutil.which(prog) is None:
            raise ToolchainError(f"CC={cc!r} but {prog!r} is not an executable on PATH; set CC to "
                                 f"a C compiler (e.g. CC=gcc) or unset it")
        return cc
    for cand in ("cc", "gcc", "clang"):
        if shutil.which(cand):
            return cand
    raise ToolchainError("no C compiler found (looked for $CC, cc, gcc, clang): install one "
                         "(e.g. `apt-get install gcc`) or set CC=/path/to/compiler")


_INFO_LOCK = threading.Lock()


def _compiler_info(cc: str) -> tuple[str, bool]:
    """(version string, whether -fopenmp links) for a compiler (probed once per process; a
    probe ``prefetch_compiler_info`` started is waited for, not run again)."""
    with _INFO_LOCK:
        return _probe_compiler(cc)


def prefetch_compiler_info() -> None:
    """Probe the C compiler (``_compiler_info``: its version, an OpenMP test build) on a
    background thread, so a build that needs it later (``driver.build``, after the graph
    passes) finds it done. Errors are left for that build to raise."""
    try:
        cc = find_compiler()
    except ToolchainError:
        return

    def probe():
        try:
            _compiler_info(cc)
        except (ToolchainError, OSError, subprocess.SubprocessError):
            pass
    threading.Thread(target=probe, name="ember-cc-probe", daemon=True).start()


@functools.lru_cache(maxsize=None)
def _probe_compiler(cc: str) -> tuple[str, bool]:
    try:
        ver = subprocess.run(cc.split() + ["--version"], capture_output=True, text=True,
                             timeout=60).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as e:
        raise ToolchainError(f"C compiler {cc!r} cannot be run: {e}; set CC to a working "
                             f"compiler") from None
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.c"
        src.write_text("#include <omp.h>\nint f(void){return omp_get_max_threads();}\n")
        r = subprocess.run(cc.split() + ["-fopenmp", "-shared", "-fPIC", str(src), "-o",
                                         str(Path(d) / "t.so")], capture_output=True, timeout=120)
        openmp = r.returncode == 0
    return (ver[0] if ver else cc), openmp


def extra_flags() -> list[str]:
    """The user's extra compile flags from ``$EMBER_CFLAGS`` (empty when unset).

    Raises:
        ToolchainError: the variable cannot be split (unbalanced quotes).
    """
    env = os.environ.get("EMBER_CFLAGS", "")
    try:
        return shlex.split(env)
    except ValueError as e:
        raise ToolchainError(f"EMBER_CFLAGS={env!r} cannot be split into flags ({e}); fix its "
                             f"quoting or unset it") from None


def compile_flags(cc: str, mcpu: str = "native") -> list[str]:
    """Flags for an optimized shared library for ``-march=mcpu`` (OpenMP when available), then
    ``$EMBER_CFLAGS`` (``extra_flags``)."""
    version, openmp = _compiler_info(cc)
    flags = ["-O3", "-std=gnu11", "-shared", "-fPIC", "-fno-math-errno", "-ffp-contract=fast",
             "-w"]
    if "clang" not in version.lower():
        # GCC (seen with 12.2 on AVX-512 machines) miscompiles the if-converted, masked
        # vectorization of guarded reductions (`acc = cond ? acc + x[i] : acc` over a padded
        # window, as pooling and convolution emit): some window terms are dropped. Without
        # loop if-conversion those loops stay scalar (no measurable cost on ember's kernels).
        flags.append("-fno-tree-loop-if-convert")
    if mcpu:
        flags.append(f"-march={mcpu}")
    if openmp:
        flags.append("-fopenmp")
    return flags + extra_flags()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_library(source: "str | Sequence[str]", mcpu: str = "native",
                  timeout: float = 1800) -> Path:
    """Compile ``source`` to a shared library and return its cached path; the compiler may
    run ``timeout`` seconds.

    ``source`` is one C translation unit, or several (``codegen.module.generate_c_units``):
    those are compiled to objects by one compiler process each, side by side, and linked into
    the library, so a model's kernels compile on every core. The cache key covers every unit.

    Raises:
        ToolchainError: no usable C compiler.
        CodegenError: the compiler rejected the source or ran past ``timeout`` (the error holds
            the failing unit's source and the compiler's message).
    """
    units = [source] if isinstance(source, str) else list(source)
    cc = find_compiler()
    version, _ = _compiler_info(cc)
    flags = compile_flags(cc, mcpu)
    key = library_key(units, [BUILD_VERSION, cc, version, " ".join(flags)])
    d = cache_dir()
    lib = d / f"{key}.so"
    if cached_library_ok(lib):
        return lib
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        out = Path(tmp) / "module.so"
        if len(units) == 1:
            src = Path(tmp) / "module.c"
            src.write_text(units[0])
            _run_compiler(cc, flags + [str(src), "-o", str(out), "-lm"], units[0], timeout)
        else:
            objs = _compile_objects(cc, flags, units, Path(tmp), timeout)
            _run_compiler(cc, flags + [str(o) for o in objs] + ["-o", str(out), "-lm"],
                          "\n".join(units), timeout)
        if not out.exists():
            raise ToolchainError(f"C compiler {cc!r} reported success but wrote no library; "
                                 f"set CC to a working C compiler (gcc or clang)")
        data = out.read_bytes()
        sidecar = Path(tmp) / "module.so.sha256"
        sidecar.write_text(_digest(data))
        os.replace(out, lib)
        os.replace(sidecar, Path(str(lib) + ".sha256"))
    return lib


def _failed(cc: str, source: str, stderr: str) -> CodegenError:
    return CodegenError(f"C compiler {cc!r} failed on generated code:\n{stderr[-4000:]}",
                        source=source, compiler_output=stderr)


def _run_compiler(cc: str, args: list[str], source: str, timeout: float) -> None:
    """One compiler run (compile or link); its failure as a typed error holding ``source``."""
    try:
        r = subprocess.run(cc.split() + args, capture_output=True, text=True, timeout=timeout)
    except OSError as e:
        raise ToolchainError(f"C compiler {cc!r} failed to start: {e}; set CC") from None
    except subprocess.TimeoutExpired:
        raise CodegenError(f"C compiler {cc!r} ran past its {timeout:g} s time-out",
                           source=source) from None
    if r.returncode != 0:
        raise _failed(cc, source, r.stderr)


def _compile_objects(cc: str, flags: list[str], units: list[str], tmp: Path,
                     timeout: float) -> list[Path]:
    """Every unit compiled to an object file (``-c``), all compiler processes at once."""
    cflags = [f for f in flags if f != "-shared"] + ["-c"]
    procs, objs = [], []
    try:
        for i, u in enumerate(units):
            src, obj = tmp / f"unit{i}.c", tmp / f"unit{i}.o"
            src.write_text(u)
            objs.append(obj)
            try:
                procs.append(subprocess.Popen(cc.split() + cflags + [str(src), "-o", str(obj)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                              text=True))
            except OSError as e:
                raise ToolchainError(f"C compiler {cc!r} failed to start: {e}; set CC") from None
        for p, u in zip(procs, units):
            try:
                _, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise CodegenError(f"C compiler {cc!r} ran past its {timeout:g} s time-out",
                                   source=u) from None
            if p.returncode != 0:
                raise _failed(cc, u, err)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return objs


def library_key(units: Sequence[str], head: Sequence[str]) -> str:
    """The cache key of a library of ``units`` built with ``head`` (version, compiler, flags):
    what ``build_library`` keys on."""
    head = list(head)
    if len(units) > 1:  # several units: the key names them in order (and differs from one)
        head += [f"units={len(units)}"] + [_digest(u.encode()) for u in units[1:]]
    return _digest("\n".join(head + [units[0]]).encode())


def build_jobs() -> int:
    """Compiler processes a build runs at once: ``$EMBER_BUILD_JOBS``, else the CPU count."""
    env = os.environ.get("EMBER_BUILD_JOBS", "")
    return int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)


class StreamedBuild:
    """A library whose translation units are given one at a time while the caller is still
    generating the others (``driver.build``: the C compiler works on the first kernels while
    Python schedules and prints the rest), then linked by ``finish``.

    ``add(unit)`` starts ``cc -c`` on the unit at once when fewer than ``jobs - 1`` compiler
    processes run (one core is left to the caller), else queues it; ``finish(main)`` adds the
    last unit (the one holding the thread pool and the AOT entry), runs up to ``jobs`` at once,
    links, and stores the library in the kernel cache under ``library_key`` of
    ``[main, *units]`` (an entry already there is returned without waiting for any compiler).
    Each compiled object is kept in the kernel cache too (``obj-<key>.o``, keyed by the
    compiler, its flags and the unit's text, checked against its digest like the libraries),
    so a model whose kernels were compiled before compiles no unit again. Use it as a context
    manager: leaving it (an exception while generating, or after ``finish``) kills the
    compiler processes still running and removes the temporary folder.

    Raises (from ``add`` or ``finish``):
        ToolchainError: no usable C compiler.
        CodegenError: a unit was rejected (the error holds that unit's source and the
            compiler's message) or a compiler ran past ``timeout``.
    """

    def __init__(self, mcpu: str = "native", timeout: float = 1800, jobs: int | None = None):
        self.cc = find_compiler()
        version, _ = _compiler_info(self.cc)
        self.flags = compile_flags(self.cc, mcpu)
        self.head = [BUILD_VERSION, self.cc, version, " ".join(self.flags)]
        self.cflags = [f for f in self.flags if f != "-shared"] + ["-c"]
        self.timeout = timeout
        self.jobs = max(1, jobs or build_jobs())
        self.dir = cache_dir()
        self.tmp = Path(tempfile.mkdtemp(dir=self.dir))
        self.units: list[str] = []
        self.objs: list[Path] = []
        self._queue: list[int] = []
        self._running: dict[int, tuple] = {}  # unit -> (process, stderr file, object key, start)

    def __enter__(self) -> "StreamedBuild":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for p, err, _, _ in self._running.values():
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
        self._running.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _object_key(self, unit: str) -> str:
        return _digest("\n".join(self.head + ["object", unit]).encode())

    def add(self, unit: str) -> None:
        """Compile ``unit`` to an object (from the cache when it was compiled before)."""
        i = len(self.units)
        self.units.append(unit)
        cached = self.dir / f"obj-{self._object_key(unit)}.o"
        self.objs.append(cached)
        if not cached_library_ok(cached):
            self._queue.append(i)
        self._pump(max(1, self.jobs - 1))

    def _start(self, i: int) -> None:
        src = self.tmp / f"unit{i}.c"
        src.write_text(self.units[i])
        obj = self.tmp / f"unit{i}.o"
        err = open(self.tmp / f"unit{i}.err", "w+")
        try:
            p = subprocess.Popen(self.cc.split() + self.cflags + [str(src), "-o", str(obj)],
                                 stdout=subprocess.DEVNULL, stderr=err)
        except OSError as e:
            err.close()
            raise ToolchainError(f"C compiler {self.cc!r} failed to start: {e}; set CC") from None
        self._running[i] = (p, err, self.objs[i], time.monotonic())

    def _reap(self, i: int, wait: bool) -> bool:
        """Whether unit ``i``'s compiler has finished (waiting for it with ``wait``); a
        finished object goes into the cache, a failure raises."""
        p, err, cached, t0 = self._running[i]
        if wait:
            try:
                p.wait(timeout=max(0.0, self.timeout - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                raise CodegenError(f"C compiler {self.cc!r} ran past its {self.timeout:g} s "
                                   f"time-out", source=self.units[i]) from None
        elif p.poll() is None:
            if time.monotonic() - t0 > self.timeout:
                raise CodegenError(f"C compiler {self.cc!r} ran past its {self.timeout:g} s "
                                   f"time-out", source=self.units[i])
            return False
        del self._running[i]
        err.seek(0)
        stderr = err.read()
        err.close()
        if p.returncode != 0:
            raise _failed(self.cc, self.units[i], stderr)
        obj = self.tmp / f"unit{i}.o"
        if not obj.exists():
            raise ToolchainError(f"C compiler {self.cc!r} reported success but wrote no object "
                                 f"file; set CC to a working C compiler (gcc or clang)")
        data = obj.read_bytes()
        side = self.tmp / f"unit{i}.o.sha256"
        side.write_text(_digest(data))
        os.replace(obj, cached)
        os.replace(side, Path(str(cached) + ".sha256"))
        return True

    def _pump(self, limit: int) -> int:
        """Reap the finished compilers, start queued units up to ``limit`` running; how many
        finished."""
        done = sum(self._reap(i, wait=False) for i in list(self._running))
        # the longest waiting unit first (longest processing time first: the last compiler
        # to finish, which the link waits for, is then a short one)
        self._queue.sort(key=lambda i: -len(self.units[i]))
        while self._queue and len(self._running) < limit:
            self._start(self._queue.pop(0))
        return done

    def finish(self, main: str, overlap=None) -> Path:
        """Add the last unit ``main``, run ``overlap()`` (more of the caller's work: ``build``
        binds the weights) while the compilers run, wait for them, link; the library's
        path."""
        lib = self.dir / f"{library_key([main, *self.units], self.head)}.so"
        if cached_library_ok(lib):
            if overlap is not None:
                overlap()
            return lib
        self.add(main)
        if overlap is not None:
            overlap()
        while self._queue or self._running:  # any unit's failure is raised as it happens
            if not self._pump(self.jobs) and self._running:
                time.sleep(0.005)
        out = self.tmp / "module.so"
        order = [len(self.units) - 1] + list(range(len(self.units) - 1))  # main first
        # (an object the cache lost since it was compiled: compiled again, here)
        for i in order:
            if not cached_library_ok(self.objs[i]):
                self._start(i)
                self._reap(i, wait=True)
        _run_compiler(self.cc, self.flags + [str(self.objs[i]) for i in order] +
                      ["-o", str(out), "-lm"], "\n".join(self.units[i] for i in order),
                      self.timeout)
        if not out.exists():
            raise ToolchainError(f"C compiler {self.cc!r} reported success but wrote no library; "
                                 f"set CC to a working C compiler (gcc or clang)")
        data = out.read_bytes()
        side = self.tmp / "module.so.sha256"
        side.write_text(_digest(data))
        os.replace(out, lib)
        os.replace(side, Path(str(lib) + ".sha256"))
        return lib


def cached_library_ok(lib: Path) -> bool:
    """True when ``lib`` exists and matches its recorded digest (else it is removed)."""
    side = Path(str(lib) + ".sha256")
    if not lib.exists():
        return False
    try:
        ok = side.exists() and side.read_text().strip() == _digest(lib.read_bytes())
    except OSError:
        ok = False
    if not ok:
        for p in (lib, side):
            try:
                p.unlink()
            except OSError:
                pass
    return ok


def cached_build(key_parts: list[str], suffix: str, make) -> bytes:
    """The bytes ``make()`` builds for the inputs ``key_parts``, from the kernel cache when an
    entry with their content hash exists (checked against its digest like the C libraries,
    ``cached_library_ok``), else built, stored (atomically, with its digest) and returned. The
    CUDA builds (``codegen.nvrtc``) use it.

    Raises:
        ToolchainError: the cache folder cannot be used.
        whatever ``make`` raises (nothing is stored then)."""
    key = _digest("\n".join([BUILD_VERSION, *key_parts]).encode())
    d = cache_dir()
    entry = d / f"{key}{suffix}"
    if cached_library_ok(entry):
        return entry.read_bytes()
    data = make()
    fd, tmp = tempfile.mkstemp(dir=d, suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    Path(tmp + ".sha256").write_text(_digest(data))
    os.replace(tmp, entry)
    os.replace(tmp + ".sha256", str(entry) + ".sha256")
    return data


def install_library(data: bytes) -> Path:
    """Put library bytes (e.g. from a saved artifact) in the cache and return the path."""
    key = _digest(data)
    lib = cache_dir() / f"lib-{key}.so"
    if not cached_library_ok(lib):
        fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".so")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        Path(tmp + ".sha256").write_text(key)
        os.replace(tmp, lib)
        os.replace(tmp + ".sha256", str(lib) + ".sha256")
    return lib


def load_library(path: Path) -> ctypes.CDLL:
    """Load a shared library; raises ``CodegenError`` if it cannot be loaded."""
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:
        raise CodegenError(f"cannot load compiled library {path}: {e}") from None


def thread_setter(lib: ctypes.CDLL):
    """``lib``'s ``ember_set_num_threads(int n)`` (threads of the library's pool; 0: all online
    CPUs) with its C signature set, or ``None`` for a library without the thread pool."""
    fn = getattr(lib, "ember_set_num_threads", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int]
        fn.restype = None
    return fn
