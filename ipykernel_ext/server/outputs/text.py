"""Where two texts part: what the live document's writer keeps of a stream it edits.

The collaboration writer (:mod:`.collab`) edits a stream in the shared document only by
deleting a suffix and appending: the length of the two texts' common prefix says where.
(Stream text itself, as JupyterLab stores it, is the shared leaf ``ipykernel_ext.stream_text``.)
"""

from __future__ import annotations


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
