"""Pure row packing: sequence lengths in, fixed-length rows out (numpy only, no JAX).

Why best-fit decreasing: Tunix 0.1.7's ``pack_sequences`` is next-fit in arrival order, which leaves a
row's tail empty whenever the next sequence does not fit. Sorting the mini-batch by length (longest
first) and putting each sequence in the row whose free space fits it most tightly fills rows to ~97-99%
on GRPO-shaped length distributions, at O(n log n) host cost per mini-batch. Where it still uses more
rows than the tokens need, ``fill_rows`` looks for a packing in fewer (rows filled one at a time with the
fullest subset of what is left).

Why buckets and a shape cache: every distinct ``[rows, row_len]`` shape (and block-pair count) is a new
XLA compilation of the whole train step. The number of rows is rounded up to a geometric bucket (a few
mantissa bits, at most ``1/2**bits`` wasted) and to a multiple (the data-parallel width). Buckets alone
still give one shape per distinct need (a 25-step demo compiled 7 times in 12 steps), so a training run
also keeps a ``ShapeCache``: a micro-batch reuses the smallest shape already compiled that holds it, and a
new shape is made only when none does.

Layout of a packed row: sequences placed back to back from column 0, each with its own segment id
(1..k in placement order) and positions restarting at 0; the tail is padding with segment id 0,
position 0 and the pad token.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ROW_FIELD = "spec.packing.maxSeqTokenPerTpu"
# ``fill_rows`` is tried where sequences x rows is at most this: its cost is one bit-set pass over the
# sequences left per row (~0.2 ms for 64 sequences in 6 rows of 8,192), which this keeps under ~0.1 s.
FILL_LIMIT = 20_000


class RowTooShortError(ValueError):
    """A sequence does not fit in one packed row (it would otherwise be dropped or truncated)."""


def bucket_rows(n: int, *, mantissa_bits: int = 2, multiple_of: int = 1) -> int:
    """Round ``n`` up to a geometric bucket, then to a multiple of ``multiple_of``.

    With ``mantissa_bits=2`` the buckets are 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, ...
    (at most 25% extra rows; ~4 shapes per doubling). ``multiple_of`` is the data-parallel width, so rows
    shard evenly.
    """
    if n <= 0:
        return multiple_of
    if n > 1 << mantissa_bits:
        shift = n.bit_length() - 1 - mantissa_bits
        n = ((n + (1 << shift) - 1) >> shift) << shift
    return math.ceil(n / multiple_of) * multiple_of


@dataclass
class ShapeCache:
    """The padded ``(rows, pairs)`` shapes a run has compiled, and the choice of one per micro-batch.

    Why: a micro-batch's needs (rows used, block pairs of the block-sparse attention) change every step,
    and each new shape recompiles the whole train step (10-50 s on CPU even for the tiny demo model).
    Bucketing alone still gives one shape per distinct bucket (the demo compiled 7 times in 12 steps).

    ``fit`` picks, in order:

    1. the smallest known shape that holds the need, if it has at most ``max_waste`` times the rows the
       need's own bucket would have: no compile (the jit cache keeps every compiled shape);
    2. else, if the largest known rows are within ``max_waste`` of the need: a new shape covering all
       known ones (the envelope: max of each dimension, the need bucketed, pairs scaled with rows so
       more rows alone do not force another compile soon). Each grows the envelope by >= 1 bucket step,
       so they are few (the bucket steps between the first need and the largest);
    3. else (a much smaller need, e.g. short completions after long ones): a new smaller shape with a
       power-of-two row count, so there is at most one per doubling below the envelope.

    Every need is then held by a shape with at most ``max_waste`` x its bucketed rows, so repeating a
    need never compiles again. In practice a run compiles 1-3 shapes; the price is computing padding
    rows and pairs when a micro-batch is smaller than a compiled shape. ``max_rows`` caps the rows (a
    plan never uses more rows than it has sequences); ``max_pairs_per_row`` caps pairs per row
    (``nb * (nb + 1) / 2`` for ``nb`` attention blocks per row: full causal attention); 0 = no cap.
    ``streams``: the token-stream sizes (``fit_stream``), a third dimension sized tighter than rows.
    """

    multiple_of: int = 1
    max_pairs_per_row: int = 0
    max_waste: float = 2.0
    row_bits: int = 2
    pair_bits: int = 3
    stream_bits: int = 3
    shapes: list[tuple[int, int]] = field(default_factory=list)
    streams: list[int] = field(default_factory=list)

    def _round(self, n: int) -> int:
        return math.ceil(max(n, 1) / self.multiple_of) * self.multiple_of

    def fit(self, rows: int, pairs: int = 0, *, max_rows: int | None = None) -> tuple[int, int]:
        """The ``(rows, pairs)`` shape to pad a micro-batch needing ``rows`` rows and ``pairs`` pairs to."""
        cap = self._round(max(rows, max_rows)) if max_rows is not None else None
        want = bucket_rows(rows, mantissa_bits=self.row_bits, multiple_of=self.multiple_of)
        want = min(want, cap) if cap else want
        fitting = [s for s in self.shapes if s[0] >= rows and s[1] >= pairs]
        if fitting and min(fitting)[0] <= self.max_waste * want:
            return min(fitting)  # 1. reuse
        if not self.shapes:
            base_rows, base_pairs, new_rows = 1, 0, want
        else:
            base_rows, base_pairs = max(r for r, _ in self.shapes), max(p for _, p in self.shapes)
            if base_rows <= self.max_waste * want:  # 2. grow the envelope
                new_rows = max(want, base_rows)
            else:  # 3. a smaller shape, power-of-two rows
                new_rows = self._round(1 << (max(rows, 1) - 1).bit_length())
                new_rows = min(new_rows, cap) if cap else new_rows
        new_pairs = max(pairs, math.ceil(base_pairs * new_rows / base_rows))
        if new_pairs:
            new_pairs = bucket_rows(new_pairs, mantissa_bits=self.pair_bits)
            if self.max_pairs_per_row:
                new_pairs = max(min(new_pairs, new_rows * self.max_pairs_per_row), pairs)
        self.shapes.append((new_rows, new_pairs))
        return new_rows, new_pairs

    def fit_stream(self, need: int) -> int:
        """Granules (rows' worth of tokens) of the token stream (``token_stream``) for ``need`` granules.

        Why not the rows' coarse buckets: the stream exists to cut padding, so it is sized tightly. A
        known size is reused when it holds the need within one ``stream_bits`` bucket step (at most
        ``1/2**stream_bits`` extra); otherwise the need itself becomes a new size (one compile each, and
        a run's needs span few values).
        """
        step = bucket_rows(need, mantissa_bits=self.stream_bits)
        known = [s for s in self.streams if need <= s <= step]
        if known:
            return min(known)
        self.streams.append(need)
        return need


@dataclass(frozen=True)
class RowPlan:
    """Where each sequence of one mini-batch lives in the packed ``[num_rows, row_len]`` block.

    ``row[i]``/``offset[i]``/``length[i]`` place sequence ``i`` (input order) at columns
    ``offset[i]:offset[i]+length[i]`` of row ``row[i]`` with segment id ``segment[i]``.
    """

    row_len: int
    num_rows: int
    rows_used: int
    row: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    segment: np.ndarray

    @property
    def real_tokens(self) -> int:
        return int(self.length.sum())

    @property
    def utilization(self) -> float:
        """Real tokens / slots of the rows actually used (what the packing algorithm controls)."""
        return self.real_tokens / max(1, self.rows_used * self.row_len)

    @property
    def padded_utilization(self) -> float:
        """Real tokens / slots of all rows including the bucket's empty rows (what compute sees)."""
        return self.real_tokens / max(1, self.num_rows * self.row_len)

    def flat_index(self, i: int, start: int, stop: int) -> np.ndarray:
        """Flat indices into ``[num_rows * row_len]`` of tokens ``start:stop`` of sequence ``i``."""
        base = int(self.row[i]) * self.row_len + int(self.offset[i])
        return np.arange(base + start, base + stop, dtype=np.int32)


def plan_rows(
    lengths: Sequence[int] | np.ndarray,
    row_len: int,
    *,
    mantissa_bits: int = 2,
    multiple_of: int = 1,
) -> RowPlan:
    """Best-fit decreasing placement of sequences (given by length) into rows of ``row_len`` tokens.

    Raises ``RowTooShortError`` (a ``ValueError`` naming ``spec.packing.maxSeqTokenPerTpu``) if any
    sequence is longer than a row: packing never drops or truncates data.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if row_len <= 0:
        raise RowTooShortError(f"{ROW_FIELD}: row length must be positive, got {row_len}")
    if lengths.size and lengths.min() < 0:
        raise ValueError("sequence lengths must be >= 0")
    if lengths.size and lengths.max() > row_len:
        i = int(lengths.argmax())
        raise RowTooShortError(
            f"{ROW_FIELD}={row_len} is shorter than a sequence of {int(lengths[i])} tokens "
            f"(prompt+completion); it must be >= maxTargetLength so no sequence is dropped"
        )
    n = lengths.size
    row = np.zeros(n, dtype=np.int32)
    offset = np.zeros(n, dtype=np.int32)
    segment = np.zeros(n, dtype=np.int32)
    fill: list[int] = []  # tokens used per row
    count: list[int] = []  # sequences per row
    free: list[tuple[int, int]] = []  # sorted (free tokens, row id)
    # Longest first; ties keep input order so the plan is deterministic.
    for i in np.argsort(-lengths, kind="stable"):
        need = int(lengths[i])
        if need == 0:
            continue
        k = bisect.bisect_left(free, (need, -1))
        if k < len(free):
            _, r = free.pop(k)
        else:
            r = len(fill)
            fill.append(0)
            count.append(0)
        row[i], offset[i] = r, fill[r]
        count[r] += 1
        segment[i] = count[r]
        fill[r] += need
        if fill[r] < row_len:
            bisect.insort(free, (row_len - fill[r], r))
    rows_used = len(fill)
    fewest = math.ceil(int(lengths.sum()) / row_len)
    if fewest < rows_used and n * rows_used <= FILL_LIMIT:
        for rows in range(fewest, rows_used):  # fewer rows than best-fit found, if some fill allows
            filled = fill_rows(lengths, row_len, rows)
            if filled is not None:
                row, offset, segment = filled
                rows_used = rows
                break
    num_rows = bucket_rows(rows_used, mantissa_bits=mantissa_bits, multiple_of=multiple_of)
    return RowPlan(row_len, num_rows, rows_used, row, offset, lengths.astype(np.int32), segment)


def fill_rows(
    lengths: np.ndarray, row_len: int, rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(row, offset, segment)`` placing every sequence in ``rows`` rows, or None where this finds none.

    Why: best-fit decreasing sometimes needs a row more than the tokens do where the rows must be filled
    tightly, and with one-row token-budget chunks each row is a chunk computed in full (a mini-batch of
    5.84 rows of tokens in 7 rows: 14% more train time). Where the sequence count binds instead (the v5e
    example's ~752-token sequences on the chip: 10 a row of 8,192, so 64 need 7) no packing in fewer
    exists and this returns None. Here each row but the last takes the fullest subset of the sequences left (a 0/1
    knapsack over their lengths, as bit sets: bit ``s`` of ``reach[j]`` is set when some of the first
    ``j`` sequences sum to ``s`` tokens); the last row takes the rest if they fit. Within a row the
    sequences are placed longest first, as best-fit places them.
    """
    order = [int(i) for i in np.argsort(-lengths, kind="stable") if lengths[i] > 0]
    row_of = np.full(lengths.size, -1, dtype=np.int64)
    mask = (1 << (row_len + 1)) - 1
    left = order
    for r in range(rows - 1):
        reach = [1]
        for i in left:
            reach.append((reach[-1] | (reach[-1] << int(lengths[i]))) & mask)
        total = reach[-1].bit_length() - 1  # the fullest this row can be
        for j in range(len(left), 0, -1):  # walk back: a sum not reachable without sequence j uses it
            if not (reach[j - 1] >> total) & 1:
                row_of[left[j - 1]] = r
                total -= int(lengths[left[j - 1]])
        left = [i for i in left if row_of[i] < 0]
    if sum(int(lengths[i]) for i in left) > row_len:
        return None
    row_of[left] = rows - 1
    row = np.zeros(lengths.size, dtype=np.int32)
    offset = np.zeros(lengths.size, dtype=np.int32)
    segment = np.zeros(lengths.size, dtype=np.int32)
    fill = [0] * rows
    count = [0] * rows
    for i in order:  # longest first within each row
        r = int(row_of[i])
        row[i], offset[i] = r, fill[r]
        count[r] += 1
        segment[i] = count[r]
        fill[r] += int(lengths[i])
    return row, offset, segment


def token_stream(
    segment_ids: np.ndarray, granule: int, granules: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The real tokens of packed rows as one stream, for per-token work that should skip padding.

    Why: a packed row's tail and a bucket's empty rows are padding that every projection and MLP
    computes (10% of the columns on the real-shape benchmark). Only attention needs the row layout; the
    per-token layers can run on the real tokens alone, padded to ``ceil(T / granule) * granule`` so the
    stream's length changes only with the lower bound of the row count (one compiled shape per value),
    or to ``granules * granule`` (``ShapeCache.fit_stream``'s choice).

    Returns ``index`` ``[S]`` (flat slot in ``R * L`` of stream token ``s``, in row order; ``R * L`` for
    the stream's own padding, which reads an appended zero and is never read back) and ``of_slot``
    ``[R * L]`` (the stream position of each slot; ``S`` for padding slots, which read an appended
    zero). The two are inverse maps on the real tokens, so each is the other's transpose.
    """
    real = np.flatnonzero(np.asarray(segment_ids).reshape(-1) > 0)
    size = (granules or max(1, math.ceil(real.size / granule))) * granule
    if size < real.size:
        raise ValueError(f"a stream of {size} tokens cannot hold {real.size} real tokens")
    index = np.full(size, np.asarray(segment_ids).size, np.int32)
    index[: real.size] = real
    of_slot = np.full(np.asarray(segment_ids).size, size, np.int32)
    of_slot[real] = np.arange(real.size, dtype=np.int32)
    return index, of_slot


def row_costs(plan: RowPlan, attention_weight: float) -> np.ndarray:
    """Estimated compute of each row: ``len + attention_weight * len**2`` summed over its sequences.

    Per-token work (projections, MLP, head) grows with ``len``; segment-aware attention (splash,
    block-sparse) with ``len**2`` per sequence. Empty rows (the bucket's padding) cost 0.
    """
    n = plan.length.astype(np.float64)
    return np.bincount(plan.row, weights=n + attention_weight * n * n, minlength=plan.num_rows)


def balance_rows(costs: np.ndarray, shards: int) -> np.ndarray:
    """New index of every row so that each data-parallel shard gets the same number of rows and
    near-equal cost: longest-processing-time first, each row to the least loaded shard with room.

    Rows sharded on the data axis go in contiguous blocks (shard ``s`` holds rows ``s*per .. (s+1)*per``),
    so the returned ``new[r]`` places row ``r`` in its shard's block. Without this the bucket's empty
    rows all land on the last shard(s), which then idle while the others compute.
    """
    R = costs.size
    if shards <= 1 or R % shards:
        return np.arange(R)
    per = R // shards
    load = np.zeros(shards)
    count = np.zeros(shards, np.int64)
    new = np.empty(R, np.int64)
    for r in np.argsort(-costs, kind="stable"):
        room = np.flatnonzero(count < per)
        s = room[np.argmin(load[room])]
        new[r] = s * per + count[s]
        count[s] += 1
        load[s] += costs[r]
    # LPT with equal row counts per shard is a heuristic: where the rows' own order is better balanced
    # (costs 65, 65, 65, 69.5, 69.5, 0 on 2 shards: 1.167 as they are, 1.195 by LPT), keep that order
    balanced = np.empty_like(costs)
    balanced[new] = costs
    return new if shard_imbalance(balanced, shards) <= shard_imbalance(costs, shards) else np.arange(R)


def shard_imbalance(costs: np.ndarray, shards: int) -> float:
    """Max over mean of the shards' total cost (1.0 = perfectly balanced) for contiguous row blocks."""
    if shards <= 1 or costs.size % shards or costs.sum() == 0:
        return 1.0
    loads = costs.reshape(shards, -1).sum(-1)
    return float(loads.max() / loads.mean())


@dataclass(frozen=True)
class PackedRows:
    """Token rows with their segment ids and per-sequence positions, all ``[num_rows, row_len]``."""

    tokens: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray


def pack(plan: RowPlan, seqs: Sequence[np.ndarray], pad_value: int | float = 0) -> np.ndarray:
    """Scatter per-sequence arrays (``len(seqs[i]) == plan.length[i]``, any trailing dims) into rows."""
    first = np.asarray(seqs[0]) if len(seqs) else np.zeros(0, np.int32)
    out = np.full((plan.num_rows, plan.row_len, *first.shape[1:]), pad_value, dtype=first.dtype)
    for i, s in enumerate(seqs):
        n = int(plan.length[i])
        if len(s) != n:
            raise ValueError(f"sequence {i} has {len(s)} tokens, plan says {n}")
        if n:
            o = int(plan.offset[i])
            out[plan.row[i], o : o + n] = s
    return out


def pack_rows(plan: RowPlan, seqs: Sequence[np.ndarray], pad_id: int = 0) -> PackedRows:
    """Tokens, segment ids (1..k per row, 0 = padding) and positions (restarting at 0) of a plan."""
    segment_ids = np.zeros((plan.num_rows, plan.row_len), np.int32)
    positions = np.zeros((plan.num_rows, plan.row_len), np.int32)
    for i in range(len(seqs)):
        n = int(plan.length[i])
        if n:
            r, o = int(plan.row[i]), int(plan.offset[i])
            segment_ids[r, o : o + n] = plan.segment[i]
            positions[r, o : o + n] = np.arange(n, dtype=np.int32)
    tokens = pack(plan, [np.asarray(s, np.int32) for s in seqs], pad_id) if len(seqs) else segment_ids * 0
    return PackedRows(tokens.astype(np.int32), segment_ids, positions)


def unpack(plan: RowPlan, rows: np.ndarray) -> list[np.ndarray]:
    """Per-sequence slices of a per-token ``[num_rows, row_len, ...]`` output, in input order."""
    return [
        rows[plan.row[i], plan.offset[i] : plan.offset[i] + plan.length[i]] for i in range(plan.length.size)
    ]


def unpack_padded(plan: RowPlan, rows: np.ndarray, width: int, pad_value: float = 0) -> np.ndarray:
    """Per-token ``[num_rows, row_len, ...]`` output back to ``[batch, width, ...]``, right-padded."""
    out = np.full((plan.length.size, width, *rows.shape[2:]), pad_value, dtype=rows.dtype)
    for i, s in enumerate(unpack(plan, rows)):
        out[i, : len(s)] = s
    return out
