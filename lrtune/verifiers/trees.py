"""A forest of binary decision trees as flat arrays, and its prediction (pure numpy).

The ``forest`` student is a scikit-learn random forest; its checkpoint stores the trees'
public arrays (``tree_.children_left/right``, ``feature``, ``threshold``, ``value``), never
a pickle. All trees share flat node arrays; ``roots[k]`` is tree k's first node and child
indices are global. A node with ``left == -1`` is a leaf whose ``value`` is the share of
positive training samples there. A row x goes left at node i when
``float32(x[feature[i]]) <= threshold[i]`` (scikit-learn compares float32 features), and

    p(x) = mean over trees k of value[leaf_k(x)].
"""

from __future__ import annotations

from collections.abc import Sequence

FOREST_ARRAYS = ("roots", "left", "right", "feature", "threshold", "value")


def pack_forest(trees: Sequence, positive: int = 1) -> dict:
    """Flat arrays (:data:`FOREST_ARRAYS`) of fitted scikit-learn classification trees
    (``RandomForestClassifier.estimators_``); ``positive`` is the index of the positive
    class in the trees' ``value`` columns."""
    import numpy as np

    roots, left, right, feature, threshold, value = [], [], [], [], [], []
    offset = 0
    for t in trees:
        tr = t.tree_
        n = tr.node_count
        leaf = tr.children_left == -1
        roots.append(offset)
        left.append(np.where(leaf, -1, tr.children_left + offset))
        right.append(np.where(leaf, -1, tr.children_right + offset))
        feature.append(np.where(leaf, 0, tr.feature))
        threshold.append(np.where(leaf, 0.0, tr.threshold))
        counts = tr.value[:, 0, :]
        value.append(counts[:, positive] / np.maximum(counts.sum(axis=1), 1e-300))
        offset += n
    cat = np.concatenate
    return {
        "roots": np.asarray(roots, dtype=np.int64),
        "left": cat(left).astype(np.int64),
        "right": cat(right).astype(np.int64),
        "feature": cat(feature).astype(np.int64),
        "threshold": cat(threshold).astype(np.float64),
        "value": cat(value).astype(np.float64),
    }


def check_forest(arrays: dict, n_features: int) -> str | None:
    """Why ``arrays`` is not a well-formed forest over ``n_features`` features (None if it is):
    missing arrays, arrays not 1-D, index arrays not of an integer type, mismatched lengths,
    or indices out of range."""
    import numpy as np

    missing = [k for k in FOREST_ARRAYS if k not in arrays]
    if missing:
        return f"lacks the tensor {missing[0]!r}"
    flat = [k for k in FOREST_ARRAYS if np.ndim(arrays[k]) != 1]
    if flat:
        return f"the tensor {flat[0]!r} is not 1-D"
    typed = [
        k for k in ("roots", "left", "right", "feature") if not np.issubdtype(np.asarray(arrays[k]).dtype, np.integer)
    ]
    if typed:
        return f"the index tensor {typed[0]!r} is not of an integer type"
    n = len(arrays["left"])
    if not all(len(arrays[k]) == n for k in ("right", "feature", "threshold", "value")):
        return "node arrays of different lengths"
    roots, left, right, feat = (np.asarray(arrays[k]) for k in ("roots", "left", "right", "feature"))
    if len(roots) == 0 or n == 0:
        return "no trees"
    inner = left != -1
    if (roots < 0).any() or (roots >= n).any():
        return "a tree root out of range"
    parent = np.nonzero(inner)[0]
    if any(((child[inner] <= parent) | (child[inner] >= n)).any() for child in (left, right)):
        return "a child index out of range (children must follow their parent)"
    if (right[~inner] != -1).any():
        return "a leaf with a right child"
    if ((feat[inner] < 0) | (feat[inner] >= n_features)).any():
        return f"a split on a feature outside its {n_features} features"
    return None


def forest_proba(arrays: dict, x) -> "np.ndarray":  # noqa: F821 - numpy imported lazily
    """p(x) for each row of ``x`` (n × features): the trees' mean leaf value (see module doc)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    left, right, feature, threshold, value = (arrays[k] for k in ("left", "right", "feature", "threshold", "value"))
    node = np.broadcast_to(arrays["roots"], (len(x), len(arrays["roots"]))).copy()
    rows = np.arange(len(x))[:, None]
    while True:
        nxt = left[node]
        inner = nxt != -1
        if not inner.any():
            break
        go_left = x[rows, feature[node]] <= threshold[node]
        node = np.where(inner, np.where(go_left, nxt, right[node]), node)
    return value[node].mean(axis=1)
