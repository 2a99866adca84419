"""Tensor cores for float16 / bfloat16 GEMMs on CUDA (``cuda`` targets of arch sm_80 or newer).

``cuda_tensorcore_rule`` schedules a kernel whose loop nest is a GEMM, ``C[b.., i, j] = sum_k
A[b.., i, k] * B[b.., k, j]`` with any element strides (dense / ``nn.gemm`` with transposed
weights, ``matmul``, batch matmul with broadcast operands), accumulated in float32, whose two
operands are float16 or bfloat16 values:

- loaded from float16 / bfloat16 tensors (ToMixedPrecision's weights and activations), or
- float32 loads rounded to the low dtype by a cast in the kernel, or
- float32 loads of a kernel the driver marked ``attrs["mixed_precision"] = low`` (a model
  compiled with ToMixedPrecision: every operand of its GEMMs is rounded to ``low`` by its
  producer, so the float32 tensor holds low-precision values exactly).

The output is tiled into warp tiles of ``TM x TN = 16 fm x 16 fn`` (``fm = 2`` when ``M`` is a
multiple of 32, else 1; ``fn`` likewise); ``M`` and ``N`` must be multiples of 16, ``K`` is
any. Warp tiles (over the batch, ``M / TM`` and ``N / TN``) are spread over ``blockIdx.x`` and
``threadIdx.y`` (up to ``WARPS`` warps per block), the warp's lanes are ``threadIdx.x`` (32).
Each warp computes its tile with one ``wmma`` tensorize call (``KernelCall`` with key
``("wmma", low, a_dtype, b_dtype, fm, fn)``, defined by ``ember.codegen.cuda_wmma``: 16x16x16
fragments, float32 accumulators) into a float32 tile in shared memory, then its 32 lanes run
the kernel's epilogue (bias, activation, the cast to the output dtype: the statements the
fused kernel ran after its reduction) element by element from that tile, neighbouring lanes on
neighbouring output columns. A nest that is not such a GEMM (a fused padding or other
top-level nest) gets the GPU fallback's binding.

Not applicable (``None``, the next rule runs): other targets and older archs, float32 GEMMs
(no TF32: results stay comparable with the CPU's), ``M`` or ``N`` not a multiple of 16
(batch-1 dense layers), more than one reduction loop (convolutions: implicit GEMM is not
written yet), or a kernel with no GEMM nest.

Reference: CUDA C++ Programming Guide, "Warp Matrix Functions"; the schedule structure
(block tile -> warp tile -> fragment) follows the usual tensor-core GEMM decomposition
(NVIDIA CUTLASS documentation, "Efficient GEMM in CUDA").
"""

from __future__ import annotations

from ....errors import ScheduleError
from ....target import Target
from ...arith import flat_index, map_accesses, simplify, substitute, substitute_stmt
from ...expr import AddressOf, BinOp, Call, Cast, Const, Load, Select, Var, binop
from ...stmt import (Allocate, Block, Buffer, For, IfThenElse, KernelCall, PrimFunc, Seq, Stmt,
                     Store, seq)
from ..schedule import Schedule
from ..tensorize import affine_coeffs
from .generic import _top_nests
from .gpu import DEFAULT_BLOCK, _spatial_chain, bind_spatial

LOW_DTYPES = ("float16", "bfloat16")
MIN_ARCH = 80   # bfloat16 fragments and the fp32-accumulating mma on every supported arch
WARPS = 4       # warps per block at most (untuned)
MAX_FRAGMENTS = 8  # accumulator fragments per warp (8 floats per lane each)
LANES = 32
F = 16          # fragment edge


def arch_number(target: Target) -> int:
    """The compute capability of a ``cuda`` target as an int (``sm_90`` -> 90)."""
    try:
        return int(str(target.attr("arch")).split("_")[1].rstrip("a"))
    except (ValueError, IndexError, KeyError):
        return 0


def _operand(e, mixed: str | None):
    """``(load, low dtype)`` of a GEMM operand: a ``Load`` under casts / roundings whose
    value is a ``low``-precision number, else ``None``."""
    low = None
    while isinstance(e, (Cast, Call)):
        if isinstance(e, Cast):
            if e.dtype in LOW_DTYPES:
                low = low or e.dtype
            elif e.dtype != "float32":
                return None
            e = e.value
        elif e.name == "round_dtype" and len(e.args) == 1:
            if e.dtype in LOW_DTYPES:
                low = low or e.dtype
            e = e.args[0]
        else:
            return None
    if not isinstance(e, Load):
        return None
    if e.src.dtype in LOW_DTYPES:
        return e, e.src.dtype if low in (None, e.src.dtype) else None
    if e.src.dtype == "float32":
        low = low or mixed
        return (e, low) if low in LOW_DTYPES else None
    return None


def _match(nest: For, mixed: str | None):
    """The GEMM of top-level ``nest``: a dict of its parts, or ``None``."""
    spatial = _spatial_chain(nest)
    if not spatial:
        return None
    rest = spatial[-1].body
    acc, tail = None, []
    if isinstance(rest, Allocate):
        b = rest.buffer
        if b.scope != "local" or any(d != 1 for d in b.shape):
            return None
        acc, inner = b, rest.body
        stmts = list(inner.stmts) if isinstance(inner, Seq) else [inner]
        rest, tail = stmts[0], stmts[1:]
    red = []
    while isinstance(rest, For) and rest.kind == "serial":
        red.append(rest)
        rest = rest.body
    if not red or not isinstance(rest, Block) or rest.init is None \
            or rest.predicate is not None:
        return None
    blk = rest
    st = blk.body
    if not (isinstance(st, Store) and st.buffer.dtype == "float32"
            and isinstance(st.value, BinOp) and st.value.op == "add"):
        return None
    if not (isinstance(blk.init, Store) and isinstance(blk.init.value, Const)
            and blk.init.value.value == 0):
        return None
    a, b = st.value.a, st.value.b
    if not (isinstance(a, Load) and a.src is st.buffer):
        a, b = b, a
    if not (isinstance(a, Load) and a.src is st.buffer):
        return None
    while isinstance(b, Cast) and b.dtype == "float32":
        b = b.value
    cond = None
    if isinstance(b, Select) and isinstance(b.f, Const) and b.f.value == 0:
        cond, b = b.cond, b.t  # a guarded (zero-padded) product: convolutions
        while isinstance(b, Cast) and b.dtype == "float32":
            b = b.value
    if not (isinstance(b, BinOp) and b.op == "mul"):
        return None
    oa, ob = _operand(b.a, mixed), _operand(b.b, mixed)
    if oa is None or ob is None or oa[1] is None or oa[1] != ob[1]:
        return None
    if acc is not None and st.buffer is not acc:
        return None
    if acc is None and st.buffer.scope != "global":
        return None
    vmap = {iv.var: bd for iv, bd in zip(blk.iter_vars, blk.bindings)}
    parts = dict(spatial=spatial, blk=blk, store=st, acc=acc, tail=tail, low=oa[1], vmap=vmap,
                 cols=None)
    if cond is None and len(red) == 1:
        g = _direct_roles(parts, red, oa[0], ob[0])
        if g is not None and g["N"] % F == 0:
            return g
    return _im2col_roles(parts, red, (b.a, oa[0]), (b.b, ob[0]), cond)


def _direct_roles(parts: dict, red: list, la, lb):
    """A GEMM whose operands are both affine in its loops: ``A[m, k]``, ``B[k, n]`` read in
    place by the tile function."""
    spatial, vmap, blk = parts["spatial"], parts["vmap"], parts["blk"]
    oa, ob = (la,), (lb,)
    loops = spatial + red
    ids = {id(lp.var) for lp in loops}
    where = f"cuda_tensorcore_rule ({blk.name})"
    try:
        ca = affine_coeffs(flat_index(oa[0].src, [substitute(i, vmap) for i in oa[0].indices]),
                           ids, where, "operand A")
        cb = affine_coeffs(flat_index(ob[0].src, [substitute(i, vmap) for i in ob[0].indices]),
                           ids, where, "operand B")
    except ScheduleError:
        return None
    k = red[0]
    if not ca.get(id(k.var)) or not cb.get(id(k.var)):
        return None
    m_c = [lp for lp in spatial if ca.get(id(lp.var)) and not cb.get(id(lp.var))]
    n_c = [lp for lp in spatial if cb.get(id(lp.var)) and not ca.get(id(lp.var))]
    if not m_c or not n_c:
        return None
    ml, nl = m_c[-1], n_c[-1]
    if nl is not spatial[-1] and ml is spatial[-1]:  # A's rows innermost: swap the operands
        oa, ob, ca, cb, ml, nl = ob, oa, cb, ca, nl, ml
    batch = [lp for lp in spatial if lp is not ml and lp is not nl]
    return dict(parts, red=k, a=oa[0], b=ob[0], ca=ca, cb=cb, m=ml, n=nl, batch=batch,
                M=ml.extent, N=nl.extent, K=k.extent)


def _loop_vars(e) -> set:
    from ...arith import collect
    return {id(v) for v in collect(e, lambda n: isinstance(n, Var))}


def _im2col_roles(parts: dict, red: list, ea: tuple, eb: tuple, cond):
    """A GEMM with several column loops or reduction loops, or a zero-padded operand (a
    convolution: ``A`` the weights, affine in ``m`` and the flattened reduction ``k``; ``B``
    any expression of the column and reduction loops): ``B`` is materialized as the column
    matrix ``col[batch.., k, j]`` (``j``: the column loops flattened, padded to the warp tile)
    in the low dtype by a GPU loop nest before the GEMM (im2col; Chellapilla et al. 2006)."""
    spatial, vmap, blk = parts["spatial"], parts["vmap"], parts["blk"]
    vs = {}
    for key, (e, _) in (("a", ea), ("b", eb)):
        vs[key] = _loop_vars(substitute(e, vmap))
    cvars = _loop_vars(substitute(cond, vmap)) if cond is not None else set()
    red_ids = {id(lp.var) for lp in red}
    for swap in (False, True):
        (xa, la), (xb, lb) = (eb, ea) if swap else (ea, eb)
        va, vb = (vs["b"], vs["a"]) if swap else (vs["a"], vs["b"])
        m_c = [lp for lp in spatial if id(lp.var) in va and id(lp.var) not in vb]
        n_c = [lp for lp in spatial if id(lp.var) in vb and id(lp.var) not in va]
        if len(m_c) != 1 or not n_c or any(id(lp.var) in cvars for lp in m_c):
            continue
        if not red_ids <= (va | set()) or not (va - red_ids) <= {id(m_c[0].var)} | \
                {id(lp.var) for lp in spatial if id(lp.var) in vb}:
            continue
        ml = m_c[0]
        batch = [lp for lp in spatial if lp is not ml and lp not in n_c]
        ids = {id(lp.var) for lp in spatial + red}
        try:
            ca = affine_coeffs(flat_index(la.src, [substitute(i, vmap) for i in la.indices]),
                               ids, f"cuda_tensorcore_rule ({blk.name})", "operand A")
        except ScheduleError:
            continue
        sak = ca.get(id(red[-1].var), 0)
        stride, ok = sak, sak != 0
        for lp in reversed(red):  # the reduction loops must flatten into one k of stride sak
            ok = ok and ca.get(id(lp.var), 0) == stride
            stride *= lp.extent
        if not ok or not ca.get(id(ml.var)) or any(ca.get(id(lp.var)) for lp in n_c):
            continue
        bval = xb if cond is None else Select(cond, xb, Const(0.0, xb.dtype))
        N = 1
        for lp in n_c:
            N *= lp.extent
        K = 1
        for lp in red:
            K *= lp.extent
        return dict(parts, red=red[-1], reds=red, a=la, b=None, ca={id(ml.var): ca[id(ml.var)],
                    id(red[-1].var): sak}, cb={}, m=ml, n=None, batch=batch, M=ml.extent,
                    N=N, K=K, cols={"n_loops": n_c, "value": bval})
    return None


def _mixed_radix(flat, loops: list) -> dict:
    """``{loop var: digit}`` of ``flat`` in the mixed radix of ``loops``' extents (last
    fastest)."""
    out, rest = {}, flat
    for lp in reversed(loops):
        out[lp.var] = binop("floormod", rest, Const(lp.extent, "int64"))
        rest = binop("floordiv", rest, Const(lp.extent, "int64"))
    return out


def _ncols(g: dict, fn: int) -> int:
    """Columns of the GEMM as tiled: ``N``, or for an im2col GEMM ``N`` padded to the warp
    tile."""
    tn = F * fn
    return -(-g["N"] // tn) * tn if g["cols"] is not None else g["N"]


def _tiles(g: dict, fm: int, fn: int) -> int:
    nb = 1
    for lp in g["batch"]:
        nb *= lp.extent
    return nb * (g["M"] // (F * fm)) * (_ncols(g, fn) // (F * fn))


def default_decision(g: dict) -> dict:
    """The rule's untuned choice for GEMM ``g``: ``warp_tile`` ``[fm, fn]`` (2 where the
    extent is a multiple of 32), ``warps`` per block (the most of 4, 2, 1 dividing the warp
    tiles), ``unroll`` 0."""
    fm = 2 if g["M"] % (2 * F) == 0 else 1
    fn = 2 if (g["N"] % (2 * F) == 0 or (g["cols"] is not None and g["N"] > 2 * F)) else 1
    tiles = _tiles(g, fm, fn)
    return {"warp_tile": [fm, fn], "warps": next(w for w in (WARPS, 2, 1) if tiles % w == 0),
            "unroll": 0}


def _shared_bytes(g: dict, fm: int, fn: int, warps: int) -> int:
    tm, tn = F * fm, F * fn
    return warps * (tm * tn * 4 + (tm * F + F * tn) * 2)


def _tile(g: dict, nest: For, d: dict) -> Stmt:
    """The tensor-core loop nest replacing ``nest`` with decisions ``d`` (see
    ``default_decision``)."""
    ml, nl, k = g["m"], g["n"], g["red"]
    M, K = g["M"], g["K"]
    fm, fn = (int(x) for x in d["warp_tile"])
    tm, tn = F * fm, F * fn
    N = _ncols(g, fn)
    mt, nt = M // tm, N // tn
    tiles = _tiles(g, fm, fn)
    warps = int(d["warps"])
    low = g["low"]
    bx, ty, tx, e = (Var(n, "int64") for n in ("tc_b", "tc_w", "tc_l", "tc_e"))
    i64 = lambda v: Const(v, "int64")  # noqa: E731
    t = binop("add", binop("mul", bx, i64(warps)), ty)
    vals = {}
    rest = binop("floordiv", t, i64(mt * nt))
    for lp in reversed(g["batch"]):
        vals[lp.var] = binop("floormod", rest, i64(lp.extent))
        rest = binop("floordiv", rest, i64(lp.extent))
    i0 = binop("mul", binop("floormod", binop("floordiv", t, i64(nt)), i64(mt)), i64(tm))
    j0 = binop("mul", binop("floormod", t, i64(nt)), i64(tn))
    ct = Buffer(f"{g['blk'].name}_ct_tc", (warps, tm * tn), "float32", scope="shared")
    sa = Buffer(f"{g['blk'].name}_sa_tc", (warps, tm * F), low, scope="shared")
    sb = Buffer(f"{g['blk'].name}_sb_tc", (warps, F * tn), low, scope="shared")
    vm = g["vmap"]
    cols = g["cols"]
    origin = {**vals, ml.var: i0, k.var: i64(0)}
    if cols is None:
        origin[nl.var] = j0
    else:
        origin.update({lp.var: i64(0) for lp in g["reds"]})

    def addr(load):
        return AddressOf(load.src, [simplify(substitute(substitute(i, vm), origin))
                                    for i in load.indices])
    a, b = g["a"], g["b"]
    ca, cb = g["ca"], g["cb"]
    if cols is None:
        b_addr, b_dtype, sbk, sbn = addr(b), b.src.dtype, cb[id(k.var)], cb.get(id(nl.var), 0)
    else:
        col = Buffer(f"{g['blk'].name}_col", tuple(lp.extent for lp in g["batch"]) + (K, N),
                     low)
        b_addr = AddressOf(col, [vals[lp.var] for lp in g["batch"]] + [i64(0), j0])
        b_dtype, sbk, sbn = low, N, 1
    call = KernelCall(
        wmma_name(low, a.src.dtype, b_dtype, fm, fn),
        [AddressOf(ct, [ty, i64(0)]), addr(a), i64(ca.get(id(ml.var), 0)),
         i64(ca[id(k.var)]), b_addr, i64(sbk), i64(sbn),
         i64(K), AddressOf(sa, [ty, i64(0)]), AddressOf(sb, [ty, i64(0)])],
        ("wmma", low, a.src.dtype, b_dtype, fm, fn),
        reads=[a.src, b.src if cols is None else col], writes=[ct])
    flat = binop("add", binop("mul", e, i64(LANES)), tx)
    jcol = binop("add", j0, binop("floormod", flat, i64(tn)))
    point = {**vals, ml.var: binop("add", i0, binop("floordiv", flat, i64(tn)))}
    if cols is None:
        point[nl.var] = jcol
    else:
        point.update(_mixed_radix(jcol, cols["n_loops"]))
    tile_val = Load(ct, (ty, flat))
    if g["acc"] is not None:  # the fused epilogue, reading the tile instead of the accumulator
        acc = g["acc"]
        epi = map_accesses(seq(g["tail"]) if g["tail"] else Seq([]),
                           lambda buf, idx: (ct, (ty, flat)) if buf is acc and idx is not None
                           else (buf, idx))
        epi = substitute_stmt(epi, point)
    else:
        st = g["store"]
        epi = Store(st.buffer, tuple(simplify(substitute(substitute(i, vm), point))
                                     for i in st.indices), tile_val)
    if cols is not None and N != g["N"]:  # padded columns: nothing to store
        epi = IfThenElse(binop("lt", jcol, i64(g["N"])), epi)
    body = seq([call, For(e, tm * tn // LANES, epi, "unrolled" if d.get("unroll") else "serial")])
    lanes = For(tx, LANES, body, "thread_binding", {"thread_tag": "threadIdx.x"})
    inner = Allocate(ct, Allocate(sa, Allocate(sb, lanes)))
    gemm = For(bx, tiles // warps,
               For(ty, warps, inner, "thread_binding", {"thread_tag": "threadIdx.y"}),
               "thread_binding", {"thread_tag": "blockIdx.x"})
    if cols is None:
        return gemm
    return Allocate(col, seq([_im2col_nest(g, col, N), gemm]))


def _im2col_nest(g: dict, col: Buffer, n_pad: int) -> Stmt:
    """``col[batch.., k, j] = low(B value at (batch.., reduction digits of k, column digits of
    j))`` (0 for the padding columns ``j >= N``), a serial nest of one spatial block (the GPU
    fallback binds it)."""
    from ...expr import IterVar
    i64 = lambda v: Const(v, "int64")  # noqa: E731
    cols = g["cols"]
    bl = [Var(f"tc_cb{i}", "int64") for i, _ in enumerate(g["batch"])]
    kk, jj = Var("tc_ck", "int64"), Var("tc_cj", "int64")
    ivs = [IterVar(lp.extent, f"tc_vb{i}") for i, lp in enumerate(g["batch"])] + \
        [IterVar(g["K"], "tc_vk"), IterVar(n_pad, "tc_vj")]
    iv_b, iv_k, iv_j = [iv.var for iv in ivs[:-2]], ivs[-2].var, ivs[-1].var
    inside = Select(binop("lt", iv_j, i64(g["N"])), iv_j, i64(0))  # a valid column index
    sub = {lp.var: v for lp, v in zip(g["batch"], iv_b)}
    sub.update(_mixed_radix(iv_k, g["reds"]))
    sub.update(_mixed_radix(inside, cols["n_loops"]))
    val = simplify(substitute(substitute(cols["value"], g["vmap"]), sub))
    if n_pad != g["N"]:
        val = Select(binop("lt", iv_j, i64(g["N"])), val, Const(0.0, val.dtype))
    blk = Block(f"{g['blk'].name}_im2col", ivs, bl + [kk, jj],
                Store(col, tuple(iv_b) + (iv_k, iv_j), val))
    s = blk
    for v, ext in reversed(list(zip(bl + [kk, jj], [lp.extent for lp in g["batch"]]
                                    + [g["K"], n_pad]))):
        s = For(v, ext, s)
    return s


SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def wmma_name(low: str, a_dtype: str, b_dtype: str, fm: int, fn: int) -> str:
    """The symbol of the ``wmma`` tile function for operands ``a_dtype`` / ``b_dtype``
    converted to ``low`` and a warp tile of ``fm x fn`` fragments
    (``ember.codegen.cuda_wmma`` defines it)."""
    return f"ember_wmma_{SHORT[low]}_{SHORT[a_dtype]}{SHORT[b_dtype]}_{fm}x{fn}"


def tensorcore_gemm(func: PrimFunc) -> list:
    """The GEMM nests of ``func`` the rule would put on tensor cores, as ``(nest, parts)``."""
    mixed = func.attrs.get("mixed_precision")
    out = []
    for nest in _top_nests(func.body):
        g = _match(nest, mixed)
        if g is not None and g["M"] % F == 0 and (g["cols"] is not None or g["N"] % F == 0):
            out.append((nest, g))
    return out


def _check(g: dict, d: dict, target: Target) -> None:
    fm, fn = (int(x) for x in d["warp_tile"])
    w = int(d["warps"])
    if fm not in (1, 2, 4) or fn not in (1, 2, 4) or fm * fn > MAX_FRAGMENTS \
            or g["M"] % (F * fm) or _ncols(g, fn) % (F * fn) \
            or w < 1 or _tiles(g, fm, fn) % w or w * LANES > target.max_threads_per_block \
            or _shared_bytes(g, fm, fn, w) > target.max_shared_memory_per_block:
        raise ScheduleError(f"cuda_tensorcore_rule: configuration {d} does not fit the "
                            f"{g['M']}x{g['N']} GEMM on {target}")


def tensorcore_knobs(func: PrimFunc, target: Target) -> dict | None:
    """The tuning space of ``cuda_tensorcore_rule`` on ``func`` (``RULE_KNOBS``): ``warp_tile``
    (fragments per warp ``[fm, fn]``, at most ``MAX_FRAGMENTS``), ``warps`` per block (the
    threads: 32 x warps) and ``unroll`` (the epilogue loop), each with the rule's default first;
    ``None`` when the rule does not apply. Decided once for all the kernel's GEMM nests (the
    first one's valid values)."""
    if target.kind != "cuda" or arch_number(target) < MIN_ARCH:
        return None
    found = tensorcore_gemm(func)
    if not found:
        return None
    g = found[0][1]
    d0 = default_decision(g)
    tiles, warps = [d0["warp_tile"]], [d0["warps"]]
    for fm in (1, 2, 4):
        for fn in (1, 2, 4):
            try:
                _check(g, {**d0, "warp_tile": [fm, fn], "warps": 1}, target)
            except ScheduleError:
                continue
            if [fm, fn] not in tiles:
                tiles.append([fm, fn])
    for w in (1, 2, 4, 8):
        if w not in warps and all(_tiles(g, *t) % w == 0 for t in tiles[:1]):
            warps.append(w)
    return {"warp_tile": tiles, "warps": warps, "unroll": [0, 1]}


def cuda_tensorcore_rule(func: PrimFunc, target: Target, cfg: dict | None = None
                         ) -> Schedule | None:
    """Tensor-core schedule of a float16 / bfloat16 GEMM kernel (see the module doc); ``None``
    when it does not apply. ``cfg`` overrides the decisions (``tensorcore_knobs``).

    Raises:
        ScheduleError: a ``cfg`` that does not fit the kernel or the target."""
    if target.kind != "cuda" or arch_number(target) < MIN_ARCH:
        return None
    found = tensorcore_gemm(func)
    if not found:
        return None
    from ..analysis import replace_node
    body = func.body
    for nest, g in found:
        d = {**default_decision(g), **(cfg or {})}
        if cfg:
            _check(g, d, target)
        body = replace_node(body, nest, _tile(g, nest, d))
    sch = Schedule(PrimFunc(func.name, list(func.params), body, dict(func.attrs)))
    done = {id(n) for n, _ in found}
    block = min(DEFAULT_BLOCK, target.max_threads_per_block)
    for nest in _top_nests(sch.body):
        if nest.kind == "serial" and id(nest) not in done:
            bind_spatial(sch, nest, block)
    sch.func.attrs["tensor_cores"] = [
        {"m": g["M"], "n": g["N"], "k": g["K"], "dtype": g["low"],
         "im2col": g["cols"] is not None}
        for _, g in found]
    return sch


__all__ = ["arch_number", "cuda_tensorcore_rule", "default_decision", "tensorcore_gemm",
           "tensorcore_knobs", "wmma_name"]
