"""The background step of the vectorized operator: ``G_check`` rows (:mod:`cec.policy`).

After a batch's foreground rows, the step may checkpoint the windows with the oldest
footprints (a ``G_check`` row each: the window's state now, ``t_now`` = the last seq)
when the policy wants one (extent ``q`` or replay length ``u`` over target) and the
budget grants time. The same for every window kind.

The oldest footprint comes from :class:`~.footprint_order.FootprintOrder` (amortized O(1)), and
the candidates of a step are walked from it in footprint order until the first one the
reference's loop would stop at, so a step costs O(rows it emits) plus the stale entries
it skips, never a scan of all open windows.
"""

from __future__ import annotations

import numpy as np

from cec.operator.arrays import EMPTY_I64, I64
from cec.operator.rows import Block, RowWriter
from cec.policy import CheckpointBudget, PolicyConfig
from cec.records import G_CHECK


def checkpoint_step(policy: PolicyConfig, budget: CheckpointBudget, out: RowWriter, t_now: int,
                    ts_now: int) -> Block | None:
    """The background step; O(1) per batch unless ``G_check`` rows are emitted.

    Returns ``None`` if no step ran (no budget read), else the step's rows (maybe
    none), for which the caller calls ``budget.spend`` after building the output.
    Needs the footprint order (``out.fp_order``, kept whenever the policy emits checks).
    """
    fpo = out.fp_order
    if not policy.emits_check or fpo is None:
        return None
    sl = out.slots
    oldest = fpo.front(sl)
    if oldest < 0:
        return None
    fp_min, tau2_oldest = sl.seq_at("fp_seq", oldest), sl.seq_at("tau2", oldest)
    q = out.next_out - fp_min if fp_min >= 0 else 0
    if tau2_oldest >= t_now:
        return None
    if not policy.wants_check(q, t_now - tau2_oldest, out.n_open):
        return None
    allowed = budget.grant()
    if allowed <= 0:
        return None
    # the reference's loop: the j-th oldest window (j = 0, 1, ...) is checkpointed
    # while the extent or the replay length it leaves is over target, it was not
    # written by this step and its footprint is older than t_now; at most `allowed`
    q_target = policy.q_target(out.n_open)
    picked: list[I64] = []
    got, end = 0, -1
    for cand, pos in fpo.walk(sl, min(allowed, sl.n_live)):
        fpj = sl.seqs("fp_seq", cand)
        qj = np.where(fpj >= 0, out.next_out + got + np.arange(len(cand)) - fpj, 0)
        uj = t_now - sl.seqs("tau2", cand)
        ok = (fpj < out.next_out) & (uj > 0) & ((qj > q_target) | (uj > policy.u))
        n_ok = len(cand) if ok.all() else int(np.argmin(ok))
        if n_ok:
            picked.append(cand[:n_ok])
            got += n_ok
            end = int(pos[n_ok - 1])
        if n_ok < len(cand):
            break
    slots = np.concatenate(picked) if len(picked) > 1 else picked[0] if picked else EMPTY_I64
    emitted = len(slots)
    blk = out.block(slots, np.full(emitted, G_CHECK, np.int8),
                    np.full(emitted, ts_now, np.int64), np.full(emitted, t_now, np.int64),
                    np.full(emitted, out.n_open, np.int64))
    sl.set_seqs("fp_seq", slots, np.asarray(blk["seq"], dtype=np.int64))
    sl.set_seqs("tau2", slots, t_now)
    if emitted:
        fpo.drop_through(end)  # every entry up to the last candidate is stale now
        fpo.push(sl, np.asarray(blk["seq"], dtype=np.int64), slots)
    return blk  # the caller spends the budget once the output is built
