"""fastText's unsupervised word vectors (``skipgram``, ``cbow``, ``-loss ns``) trained in
minibatches on lookuplinear's tables.

fastText's model is two tables: the input table (a row per word, then ``bucket`` rows for the
hashed character n-grams) and the output table (a row per word). A word's input is the mean of
the rows of the word and its n-grams (``EmbeddingBag(mode="mean")``, fastText's
``computeHidden``); a (input, target) pair is trained with the binary logistic loss on the
target's output row and on ``neg`` negatives drawn from the unigram distribution raised to the
power 0.5 (fastText's ``NegativeSamplingLoss``). ``skipgram``: the input is the center word,
each word of its window a target; ``cbow``: the input is the words of the window (their rows
averaged together), the center word the target. The window size of each position is drawn in
``[1, ws]``; frequent words are discarded with fastText's ``-t`` table; the learning rate
decays linearly to 0 over ``epoch`` times the tokens of the file, as fastText counts them.

The dictionary and its order, the n-gram hashing and the file written are fastText's: the
``.bin`` is read by the ``fasttext`` module and by :func:`~lookuplinear.sklearn.load_fasttext`.
The updates are not fastText's one at a time (hogwild SGD): the pairs of ``batch_size``
consecutive positions are one step of :class:`lookuplinear.optim.SGD` on the summed loss
(``fused=True``: the rows are updated inside the backward), each pair's gradient the one
fastText applies (an input row gets the whole gradient of the hidden vector, not its share of
the mean: fastText does not normalize it for these models). The pairs, bags and negatives of
many steps are drawn at once, in numpy. ``cbow`` looks each word of a step's windows up once
(``EmbeddingBag(mode="sum")``) and averages those sums over each window's rows.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Dictionary", "WordVectorArgs", "build_dictionary", "train_word_vectors"]

_EOS = b"</s>"
_SPLIT = re.compile(rb"[ \n\r\t\v\f\0]+")
#: fastText's ``MAX_LINE_SIZE``: ``getLine`` stops after this many tokens (and one more)
_MAX_LINE = 1024
#: fastText's ``NEGATIVE_TABLE_SIZE``
_TABLE = 10_000_000


@dataclass
class WordVectorArgs:
    """The training arguments (fastText's names and defaults for ``skipgram``/``cbow``)."""

    model: str = "skipgram"
    dim: int = 100
    ws: int = 5
    epoch: int = 5
    min_count: int = 5
    min_count_label: int = 0
    neg: int = 5
    word_ngrams: int = 1
    bucket: int = 2_000_000
    minn: int = 3
    maxn: int = 6
    lr: float = 0.05
    lr_update_rate: int = 100
    t: float = 1e-4
    label: str = "__label__"
    seed: int = 0
    batch_size: int = 64
    verbose: int = 0


@dataclass
class Dictionary:
    """fastText's dictionary of a file: its entries (words by count, then labels by count),
    the token stream as entry ids, and each word's input rows."""

    words: list[bytes]
    counts: np.ndarray
    n_words: int
    #: every token read (``Dictionary::ntokens``), those below ``minCount`` included
    ntokens: int
    #: the ids of the tokens in the dictionary, in the file's order
    stream: np.ndarray
    #: a new ``getLine`` starts at these positions of ``stream``
    starts: np.ndarray
    #: each word's input rows (``getSubwords``): ``rows[ptr[i]:ptr[i + 1]]``
    ptr: np.ndarray
    rows: np.ndarray


def _tokens(data: bytes) -> tuple[list[bytes], list[int]]:
    """``Dictionary::readWord`` over the file: its tokens, ``</s>`` for each ``\\n``, and the
    number of tokens of each line."""
    tokens: list[bytes] = []
    sizes: list[int] = []
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        words = [w for w in _SPLIT.split(line) if w]
        if i < len(lines) - 1:  # the "\n" after it
            words.append(_EOS)
        tokens.extend(words)
        sizes.append(len(words))
    return tokens, sizes


def build_dictionary(data: bytes, args: WordVectorArgs) -> Dictionary:
    """fastText's ``Dictionary::readFromFile`` on the bytes of a file: entries counted, words
    before labels (tokens starting with ``args.label``), each by descending count (ties in the
    order they first appear), those below ``min_count`` (``min_count_label``) dropped, then
    each word's rows: its own and its ``minn..maxn`` character n-grams' (``nwords + hash %
    bucket``, none for ``</s>``).

    Raises
    ------
    InputValueError
        No word is seen ``min_count`` times (fastText's "Empty vocabulary").
    """
    from ..errors import InputValueError
    from ._fasttext_bin import _hash, char_ngrams

    tokens, sizes = _tokens(data)
    counts: dict[bytes, int] = {}
    for tok in tokens:
        counts[tok] = counts.get(tok, 0) + 1
    label = args.label.encode()
    words = sorted((w for w in counts if not w.startswith(label) and counts[w] >= args.min_count),
                   key=lambda w: -counts[w])
    labels = sorted((w for w in counts if w.startswith(label)
                     and counts[w] >= args.min_count_label), key=lambda w: -counts[w])
    if not words:
        top = max((counts[w] for w in counts if not w.startswith(label)), default=0)
        raise InputValueError(
            f"no word is seen -minCount {args.min_count} times in the input (the most "
            f"frequent is seen {top} times): the vocabulary is empty. Lower -minCount, or give "
            "a larger input."
        )
    entries = words + labels
    ids = {w: i for i, w in enumerate(entries)}
    stream = np.fromiter((ids.get(t, -1) for t in tokens), np.int64, len(tokens))
    line = np.repeat(np.arange(len(sizes)), sizes)
    known = stream >= 0
    stream, line = stream[known], line[known]
    if _EOS not in ids:  # getLine ends at a "</s>" of the dictionary: with none (fewer lines
        line[:] = 0      # than -minCount) a line's end does not end it, as in fastText
    # getLine ends at a line's end or after _MAX_LINE + 1 tokens of the dictionary
    first = np.ones(len(stream), bool)
    first[1:] = line[1:] != line[:-1]
    begin = np.maximum.accumulate(np.where(first, np.arange(len(stream)), 0))
    starts = np.flatnonzero(first | ((np.arange(len(stream)) - begin) % (_MAX_LINE + 1) == 0))
    sub: list[list[int]] = []
    for i, w in enumerate(words):
        row = [i]
        if args.maxn > 0 and w != _EOS:
            row += [len(words) + _hash(g) % args.bucket
                    for g in char_ngrams(b"<" + w + b">", args.minn, args.maxn)]
        sub.append(row)
    ptr = np.cumsum([0, *map(len, sub)])
    return Dictionary(words=entries, counts=np.array([counts[w] for w in entries], np.int64),
                      n_words=len(words), ntokens=len(tokens), stream=stream, starts=starts,
                      ptr=ptr, rows=np.fromiter((r for s in sub for r in s), np.int64,
                                                int(ptr[-1])))


def _negatives(counts: np.ndarray) -> np.ndarray:
    """fastText's negatives table (unshuffled): each word ``ceil(count^0.5 / z *
    NEGATIVE_TABLE_SIZE)`` times, ``z`` the sum of ``count^0.5``, in float32 as fastText
    computes them."""
    c = np.power(counts.astype(np.float64), 0.5).astype(np.float32)
    z = np.float32(0)
    for v in c:  # z += pow(count, 0.5), one float32 addition each
        z = np.float32(z + v)
    reps = np.ceil((c * np.float32(_TABLE)) / z).astype(np.int64)
    return np.repeat(np.arange(len(c), dtype=np.int32), reps)


def _pairs(seg: np.ndarray, bound: np.ndarray, lo: int, hi: int, ws: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """The (center, context) positions of the centers ``lo..hi - 1``: each context within the
    center's window (``bound``) and its ``getLine`` (``seg``), sorted by center."""
    center = np.arange(lo, hi)
    cs, xs = [], []
    for off in range(1, ws + 1):
        for ctx in (center - off, center + off):
            ok = (ctx >= 0) & (ctx < len(seg)) & (bound[center] >= off)
            ok[ok] &= seg[ctx[ok]] == seg[center[ok]]
            cs.append(center[ok])
            xs.append(ctx[ok])
    c, x = np.concatenate(cs), np.concatenate(xs)
    order = np.argsort(c, kind="stable")
    return c[order], x[order]


def _bags(d: Dictionary, word_lists: np.ndarray, owner: np.ndarray, n_bags: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The input rows of bag ``owner[k]`` made of the rows of ``word_lists[k]`` (``owner``
    sorted): flat rows, bag offsets and bag sizes."""
    lens = d.ptr[word_lists + 1] - d.ptr[word_lists]
    total = int(lens.sum())
    local = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    flat = d.rows[np.repeat(d.ptr[word_lists], lens) + local]
    sizes = np.bincount(owner, weights=lens, minlength=n_bags).astype(np.int64)
    return flat, np.cumsum(sizes) - sizes, sizes


#: the positions whose pairs, bags and negatives are drawn at once, in steps of ``batch_size``
_CHUNK_STEPS = 512


def _none() -> np.ndarray:
    """A field of :class:`_Steps` the other model has: empty."""
    return np.empty(0, np.int64)


@dataclass
class _Steps:
    """The steps of a run of consecutive positions, made at once.

    Step ``s`` looks up the word bags ``bag_lo[s]:bag_hi[s]`` (a bag per position: its word's
    rows ``flat[row_ptr[b]:row_ptr[b + 1]]``; the step's bags start at ``offsets[off_ptr[s]:
    off_ptr[s + 1]]`` of its first row) and trains the targets ``tgt_ptr[s]:tgt_ptr[s + 1]``
    (a row of ``tgt``: the target, then its negatives). ``skipgram``: target ``k`` is trained
    on word bag ``owner[k]`` of its step. ``cbow``: on the mean of the rows of its context
    words, the word bags ``ctx[pair_ptr[s]:pair_ptr[s + 1]]`` of its step, a bag per target
    starting at ``ctx_offsets``, each word bag weighted by ``1 / rows[k]``, ``rows[k]`` the
    rows of the target's context words together."""

    flat: np.ndarray
    row_ptr: np.ndarray
    sizes: np.ndarray
    bag_lo: np.ndarray
    bag_hi: np.ndarray
    offsets: np.ndarray
    off_ptr: np.ndarray
    tgt: np.ndarray
    tgt_ptr: np.ndarray
    owner: np.ndarray = field(default_factory=_none)
    ctx: np.ndarray = field(default_factory=_none)
    pair_ptr: np.ndarray = field(default_factory=_none)
    ctx_offsets: np.ndarray = field(default_factory=_none)
    ctx_weights: np.ndarray = field(default_factory=_none)
    rows: np.ndarray = field(default_factory=_none)


def _steps(d: Dictionary, args: WordVectorArgs, rng: np.random.Generator, table: np.ndarray,
           ids: np.ndarray, seg: np.ndarray, bound: np.ndarray, lo: int, hi: int) -> _Steps:
    """The steps of the centers ``lo..hi - 1`` (``lo`` a multiple of ``batch_size``): the
    pairs of each step's positions, its bags and the negatives of its targets.

    ``skipgram``: a word bag per center, each context word a target of it; ``cbow``: a word
    bag per position of the step's windows, each center with a context a target of the mean
    of its context words' rows (a word in several windows of a step is looked up, and
    updated, once)."""
    bs, ws, cbow = args.batch_size, args.ws, args.model == "cbow"
    c, x = _pairs(seg, bound, lo, hi, ws)
    edges = np.arange(lo, hi + bs, bs).clip(max=hi)  # each step's first position, then hi
    pair_ptr = np.searchsorted(c, edges)
    if cbow:  # the positions of each step's windows
        p_lo, p_hi = max(lo - ws, 0), min(hi + ws, len(ids))
        bag_lo = np.maximum(edges[:-1] - ws, 0) - p_lo
        bag_hi = np.minimum(edges[1:] + ws, len(ids)) - p_lo
    else:
        p_lo, p_hi = lo, hi
        bag_lo, bag_hi = edges[:-1] - lo, edges[1:] - lo
    flat, starts, sizes = _bags(d, ids[p_lo:p_hi], np.arange(p_hi - p_lo), p_hi - p_lo)
    row_ptr = np.append(starts, len(flat))
    n_bags = bag_hi - bag_lo  # each step's bags, from its first row
    step = np.repeat(np.arange(len(n_bags)), n_bags)
    bag = np.arange(int(n_bags.sum())) - np.repeat(np.cumsum(n_bags) - n_bags, n_bags) \
        + bag_lo[step]
    offsets = starts[bag] - row_ptr[bag_lo[step]]
    off_ptr = np.append(0, np.cumsum(n_bags))
    pair_step = (c - lo) // bs
    if cbow:
        first = np.ones(len(c), bool)
        first[1:] = c[1:] != c[:-1]
        centers = c[first]
        center_of = np.cumsum(first) - 1
        rows = np.bincount(center_of, weights=sizes[x - p_lo], minlength=len(centers))
        targets, tgt_ptr = ids[centers], np.searchsorted(centers, edges)
        extra: dict[str, Any] = {
            "ctx": x - p_lo - bag_lo[pair_step], "pair_ptr": pair_ptr,
            "ctx_offsets": np.flatnonzero(first) - pair_ptr[pair_step[first]],
            "ctx_weights": (1.0 / rows[center_of]).astype(np.float32),
            "rows": rows.astype(np.float32)}
    else:
        targets, tgt_ptr = ids[x], pair_ptr
        extra = {"owner": c - edges[pair_step]}
    tgt = np.concatenate([targets[:, None], _draw(rng, table, targets, args.neg)], axis=1)
    return _Steps(flat=flat, row_ptr=row_ptr, sizes=sizes, bag_lo=bag_lo, bag_hi=bag_hi,
                  offsets=offsets, off_ptr=off_ptr, tgt=tgt, tgt_ptr=tgt_ptr, **extra)


@functools.cache
def _dot() -> Any:
    """``apply(rows, hidden)``: each pair's logits, ``rows`` (pairs, 1 + neg, dim) times
    ``hidden`` (pairs, dim), as (pairs, 1, 1 + neg). Its backward gives the rows' gradient as
    one broadcast product, where ``bmm``'s backward runs a batched matrix product of inner
    size 1 (slower on the CPU)."""
    import torch

    class Dot(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, rows: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(rows, hidden)
            return torch.bmm(hidden.unsqueeze(1), rows.transpose(1, 2))

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            rows, hidden = ctx.saved_tensors
            return grad.transpose(1, 2) * hidden.unsqueeze(1), torch.bmm(grad, rows).squeeze(1)

    return Dot


def train_word_vectors(d: Dictionary, args: WordVectorArgs,
                       report: Callable[[int, float, float], None] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, float]:
    """Train ``args.model`` on the dictionary's token stream: (input table, output table, the
    last steps' mean loss per pair). ``report(tokens, lr, loss)`` is called after each step.

    Input rows start uniform in ``[-1/dim, 1/dim]``, output rows at zero, as fastText's. The
    optimizer is ``fused=True``: each step's backward updates the rows it reaches.
    """
    import torch
    import torch.nn.functional as F

    from ..modules.embedding import Embedding
    from ..modules.embedding_bag import EmbeddingBag
    from ..optim import SGD

    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    n_rows = d.n_words + args.bucket  # fastText's rows: 0 buckets without any n-grams
    # the tables given: the layers' own draws (normal_ over every row) would be overwritten
    table = torch.empty(max(n_rows, 1), args.dim).uniform_(-1.0 / args.dim, 1.0 / args.dim,
                                                           generator=gen)
    cbow = args.model == "cbow"
    # skipgram: a word's input, the mean of its rows; cbow: the sum of its rows, averaged
    # over the window's rows afterwards
    inp = EmbeddingBag(len(table), args.dim, mode="sum" if cbow else "mean", sparse=True,
                       _weight=table)
    out = Embedding(d.n_words, args.dim, sparse=True, _weight=torch.zeros(d.n_words, args.dim))
    opt = SGD([inp.weight, out.weight], lr=args.lr, fused=True)
    group = opt.param_groups[0]
    dot = _dot().apply
    negatives = _negatives(d.counts[:d.n_words])
    freq = d.counts[:d.n_words].astype(np.float32) / np.float32(d.ntokens)
    keep_p = np.sqrt(np.float32(args.t) / freq) + np.float32(args.t) / freq
    seg_of = np.zeros(len(d.stream), np.int64)
    seg_of[d.starts] = 1
    seg_of = np.cumsum(seg_of)
    budget = args.epoch * d.ntokens
    done, losses = 0, [0.0, 0]
    bs = args.batch_size
    # a target's label is 1, its negatives' 0
    labels = torch.zeros(bs if cbow else bs * 2 * args.ws, 1, args.neg + 1)
    labels[:, :, 0] = 1
    while done < budget:  # passes until epoch * ntokens tokens are counted, as fastText
        stream = d.stream
        is_word = stream < d.n_words
        u = rng.random(len(stream), dtype=np.float32)
        kept = np.flatnonzero(is_word & ~(u > keep_p[np.minimum(stream, d.n_words - 1)]))
        kept = kept[done + kept < budget]
        ids, seg = stream[kept], seg_of[kept]
        bound = rng.integers(1, args.ws + 1, len(ids))
        for lo in range(0, len(ids), bs * _CHUNK_STEPS):
            hi = min(lo + bs * _CHUNK_STEPS, len(ids))
            st = _steps(d, args, rng, negatives, ids, seg, bound, lo, hi)
            flat, offsets = torch.from_numpy(st.flat), torch.from_numpy(st.offsets)
            tgt = torch.from_numpy(st.tgt)
            row_ptr, bag_lo, bag_hi, off_ptr, tgt_ptr = (
                a.tolist() for a in (st.row_ptr, st.bag_lo, st.bag_hi, st.off_ptr, st.tgt_ptr))
            if cbow:
                ctx, ctx_offsets, ctx_weights, rows = (torch.from_numpy(a) for a in (
                    st.ctx, st.ctx_offsets, st.ctx_weights, st.rows[:, None]))
                pair_ptr = st.pair_ptr.tolist()
            else:
                owner = torch.from_numpy(st.owner)
                sizes = torch.from_numpy(st.sizes).to(torch.float32).unsqueeze(1)
            for s in range(len(tgt_ptr) - 1):
                t0, t1 = tgt_ptr[s], tgt_ptr[s + 1]
                if t0 == t1:
                    continue
                b0, b1 = bag_lo[s], bag_hi[s]
                first = lo + s * bs
                lr = args.lr * (1.0 - (done + kept[first]) / budget)
                words = inp(flat[row_ptr[b0]:row_ptr[b1]], offsets[off_ptr[s]:off_ptr[s + 1]])
                # forward the mean; backward the whole gradient to each row (fastText's,
                # unscaled): the gradient times the bag's size
                if cbow:
                    p0, p1 = pair_ptr[s], pair_ptr[s + 1]
                    hidden = F.embedding_bag(ctx[p0:p1], words, ctx_offsets[t0:t1],
                                             mode="sum", per_sample_weights=ctx_weights[p0:p1])
                    hidden = torch.lerp(hidden.detach(), hidden, rows[t0:t1])
                else:
                    hidden = torch.lerp(words.detach(), words, sizes[b0:b1])
                    hidden = hidden.index_select(0, owner[t0:t1])
                logits = dot(out(tgt[t0:t1]), hidden)
                loss = F.binary_cross_entropy_with_logits(logits, labels[:t1 - t0],
                                                          reduction="sum")
                group["lr"] = lr
                loss.backward()
                opt.zero_grad()
                losses = [losses[0] * 0.99 + loss.item(), losses[1] * 0.99 + (t1 - t0)]
                if report is not None:
                    last = min(first + bs, len(ids)) - 1
                    report(int(done + kept[last] + 1), lr, losses[0] / losses[1])
        done += len(stream)
    return (inp.weight.detach().numpy()[:n_rows], out.weight.detach().numpy(),
            losses[0] / max(losses[1], 1e-12))


def _draw(rng: np.random.Generator, table: np.ndarray, targets: np.ndarray, neg: int
          ) -> np.ndarray:
    """``neg`` negatives per target from fastText's table, none equal to its target
    (``getNegative`` draws again); a word that is the whole table has no other to draw."""
    out = table[rng.integers(0, len(table), (len(targets), neg))].astype(np.int64)
    if table[0] == table[-1]:
        return out
    same = out == targets[:, None]
    while same.any():
        out[same] = table[rng.integers(0, len(table), int(same.sum()))]
        same = out == targets[:, None]
    return out


def progress_printer(total: int, quiet: bool
                     ) -> tuple[Callable[..., None], Callable[[], None]]:
    """fastText's progress line on stderr (``Progress: 42.0% words/sec/thread: ... lr: ...
    loss: ... ETA: ...``), at most every 0.5 s; and a function that ends it."""
    t0 = time.perf_counter()
    last: list[Any] = [0.0, ""]

    def show(tokens: int, lr: float, loss: float, force: bool = False) -> None:
        now = time.perf_counter()
        if quiet or (not force and now - float(last[0]) < 0.5):
            return
        last[0] = now
        frac = min(tokens / max(total, 1), 1.0)
        rate = tokens / max(now - t0, 1e-9)
        eta = (total - tokens) / max(rate, 1e-9)
        line = (f"\rProgress: {100 * frac:5.1f}% words/sec/thread: {rate:8.0f} lr: {lr:9.6f} "
                f"avg.loss: {loss:9.6f} ETA: {int(eta) // 3600:3d}h{int(eta) % 3600 // 60:2d}m")
        last[1] = line
        sys.stderr.write(line)
        sys.stderr.flush()

    def end() -> None:
        if not quiet and last[1]:
            sys.stderr.write("\n")

    return show, end
