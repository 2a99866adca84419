"""Classical-ML and text operators on the host: ai.onnx.ml LabelEncoder and TreeEnsemble
(lookup tables and tree walks over strings or numbers) and TfIdfVectorizer (n-gram counting)."""

from __future__ import annotations

import numpy as np

from ...errors import ShapeMismatchError, UnsupportedOpError
from . import host_op
from .strings import _str_array

ML = "ai.onnx.ml"


def _attr_list(h, *names):
    for n in names:
        v = h.attr(n)
        if v is not None:
            return np.asarray(v) if not isinstance(v, list) or not v or \
                not isinstance(v[0], str) else np.asarray(v, dtype=object), n
    return None, None


@host_op("LabelEncoder", domain=ML)
def label_encoder(h, ins):
    """Host kernel for ONNX-ML LabelEncoder (1-4): map each element through the ``keys_*`` ->
    ``values_*`` table (strings, int64s, floats or tensors; NaN keys match NaN), unknown keys to
    the ``default_*`` value; output has x's shape.

    Raises:
        ShapeMismatchError: missing keys/values or lists of different lengths."""
    x = np.asarray(ins[0])
    keys, _ = _attr_list(h, "keys_tensor", "keys_strings", "keys_int64s", "keys_floats")
    vals, vname = _attr_list(h, "values_tensor", "values_strings", "values_int64s",
                             "values_floats")
    if keys is None or vals is None or keys.shape != vals.shape:
        raise ShapeMismatchError("LabelEncoder needs keys_* and values_* of one length")
    keys, vals = keys.reshape(-1), vals.reshape(-1)
    if vname == "values_strings":
        default = h.attr("default_string", "_Unused")
    elif vname == "values_int64s":
        default = h.attr("default_int64", -1)
    elif vname == "values_floats":
        default = h.attr("default_float", -0.0)
    else:
        dt = h.attr("default_tensor")
        default = np.asarray(dt).reshape(-1)[0] if dt is not None else (
            "_Unused" if vals.dtype == object else (-1 if vals.dtype.kind in "iu" else -0.0))
    if keys.dtype == object or x.dtype.kind in "OUS":
        table = {str(k): v for k, v in zip(keys, vals)}
        flat = [table.get(str(e), default) for e in _str_array(x).reshape(-1)]
    else:
        table = {}
        nan_val = None
        for k, v in zip(keys, vals):
            if isinstance(k, (float, np.floating)) and np.isnan(k):
                nan_val = v
            else:
                table[k.item() if hasattr(k, "item") else k] = v
        flat = []
        for e in x.reshape(-1):
            if x.dtype.kind == "f" and np.isnan(e):
                flat.append(nan_val if nan_val is not None else default)
            else:
                flat.append(table.get(e.item(), default))
    out_dt = object if vals.dtype == object else vals.dtype
    if vname == "values_int64s":
        out_dt = np.int64
    elif vname == "values_floats":
        out_dt = np.float32
    return [np.array(flat, dtype=out_dt).reshape(x.shape)]


def _tensor(h, name, dtype=None):
    v = h.attr(name)
    if v is None:
        return None
    a = np.asarray(v).reshape(-1)
    return a.astype(dtype) if dtype is not None else a


@host_op("TreeEnsemble", domain=ML)
def tree_ensemble(h, ins):
    """Host kernel for ONNX-ML TreeEnsemble-5: evaluate every tree on each row of ``X`` ``(N, F)``
    (split modes BRANCH_LEQ..BRANCH_MEMBER, missing-value tracks), aggregate leaf weights per
    target (average, sum, min, max) and apply ``post_transform`` (softmax, logistic, softmax-zero);
    returns ``(N, n_targets)`` in X's float dtype (float32 for integer X).

    Raises:
        ShapeMismatchError: ``X`` is not 2-D.
        UnsupportedOpError: ``post_transform`` PROBIT."""
    x = np.asarray(ins[0])
    if x.ndim != 2:
        raise ShapeMismatchError(f"TreeEnsemble input must be [N, F], got {x.shape}")
    feat = list(h.attr("nodes_featureids"))
    splits = _tensor(h, "nodes_splits", np.float64)
    modes = _tensor(h, "nodes_modes", np.int64)
    tnode, fnode = list(h.attr("nodes_truenodeids")), list(h.attr("nodes_falsenodeids"))
    tleaf, fleaf = list(h.attr("nodes_trueleafs")), list(h.attr("nodes_falseleafs"))
    missing = list(h.attr("nodes_missing_value_tracks_true") or [0] * len(feat))
    leaf_t = list(h.attr("leaf_targetids"))
    leaf_w = _tensor(h, "leaf_weights", np.float64)
    roots = list(h.attr("tree_roots"))
    n_targets = h.attr("n_targets")
    agg = h.attr("aggregate_function", 1)
    post = h.attr("post_transform", 0)
    members = _tensor(h, "membership_values", np.float64)
    sets, cur = [], []
    if members is not None:
        for v in members:
            if np.isnan(v):
                sets.append(set(cur))
                cur = []
            else:
                cur.append(v)
        if cur:
            sets.append(set(cur))
    member_of = {}
    k = 0
    for i, m in enumerate(modes):
        if m == 6:
            member_of[i] = sets[k] if k < len(sets) else set()
            k += 1

    def goes_true(i, v):
        if np.isnan(v):
            return bool(missing[i])
        m, t = modes[i], splits[i] if splits is not None else 0.0
        return {0: v <= t, 1: v < t, 2: v >= t, 3: v > t, 4: v == t, 5: v != t}.get(
            int(m), v in member_of.get(i, set()))

    N = x.shape[0]
    out = np.zeros((N, n_targets), np.float64)
    if agg == 2:
        out[:] = np.inf
    elif agg == 3:
        out[:] = -np.inf
    counts = np.zeros((N, n_targets))
    for n in range(N):
        for r in roots:
            i, is_leaf = r, False
            while not is_leaf:
                t = goes_true(i, float(x[n, feat[i]]))
                i, is_leaf = (tnode[i], tleaf[i]) if t else (fnode[i], fleaf[i])
            tgt, w = leaf_t[i], leaf_w[i]
            if agg in (0, 1):
                out[n, tgt] += w
            elif agg == 2:
                out[n, tgt] = min(out[n, tgt], w)
            else:
                out[n, tgt] = max(out[n, tgt], w)
            counts[n, tgt] += 1
    if agg == 0:
        out = out / np.maximum(counts, 1)
    out[np.isinf(out)] = 0.0
    if post == 1:
        e = np.exp(out - out.max(axis=1, keepdims=True))
        out = e / e.sum(axis=1, keepdims=True)
    elif post == 2:
        out = 1 / (1 + np.exp(-out))
    elif post == 3:
        e = np.where(out == 0, 0, np.exp(out - out.max(axis=1, keepdims=True)))
        out = e / np.maximum(e.sum(axis=1, keepdims=True), 1e-30)
    elif post == 4:
        from math import erf  # noqa: F401 - probit needs the inverse; not in the suite
        raise UnsupportedOpError("TreeEnsemble post_transform PROBIT is not supported")
    return [out.astype(x.dtype if x.dtype.kind == "f" else np.float32)]


@host_op("TfIdfVectorizer")
def tfidf(h, ins):
    """Host kernel for ONNX TfIdfVectorizer: count the pool's n-grams
    (``min_gram_length``..``max_gram_length``, skips up to ``max_skip_count``) in each row of the
    int64 or string input; ``mode`` TF (counts), IDF (presence x weight) or TFIDF (counts x
    weight). Returns float32 ``(max(ngram_indexes) + 1,)`` or ``(rows, that)``."""
    x = np.asarray(ins[0])
    mode = h.attr("mode")
    lo, hi = h.attr("min_gram_length"), h.attr("max_gram_length")
    skip = h.attr("max_skip_count", 0)
    counts = list(h.attr("ngram_counts"))
    idxs = list(h.attr("ngram_indexes"))
    weights = h.attr("weights")
    pool = h.attr("pool_strings") if h.attr("pool_strings") is not None else \
        [int(v) for v in h.attr("pool_int64s")]
    strings = h.attr("pool_strings") is not None
    table: dict = {}
    for n in range(1, len(counts) + 1):
        start = counts[n - 1]
        end = counts[n] if n < len(counts) else len(pool)
        for k, pos in enumerate(range(start, end, n)):
            table[tuple(pool[pos:pos + n])] = None
    # the i-th n-gram of the pool maps to output ngram_indexes[i]
    order = []
    for n in range(1, len(counts) + 1):
        start = counts[n - 1]
        end = counts[n] if n < len(counts) else len(pool)
        for pos in range(start, end, n):
            order.append(tuple(pool[pos:pos + n]))
    where = {g: idxs[i] for i, g in enumerate(order)}
    size = max(idxs) + 1
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    y = np.zeros((rows.shape[0], size), np.float32)
    for r, row in enumerate(rows):
        toks = [str(t) for t in _str_array(row)] if strings else [int(t) for t in row]
        for n in range(lo, hi + 1):
            seen = set()
            for s in range(skip + 1 if n > 1 else 1):
                step = s + 1
                for i in range(len(toks) - (n - 1) * step):
                    if (i, n, step) in seen:
                        continue
                    seen.add((i, n, step))
                    g = tuple(toks[i + j * step] for j in range(n))
                    if g in where:
                        y[r, where[g]] += 1
    if mode in ("IDF", "TFIDF"):
        w = np.ones(size, np.float32)
        if weights is not None:
            for i, g in enumerate(order):
                w[where[g]] = weights[i]
        if mode == "IDF":
            y = np.minimum(y, 1)
        y = y * w
    return [y.reshape(-1) if x.ndim == 1 else y]
