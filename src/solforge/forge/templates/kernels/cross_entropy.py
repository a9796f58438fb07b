"""Cross-entropy of next-token logits: per-row losses and their mean over labelled rows.

loss_i = logsumexp(x_i) - x_i[label_i], or 0 where label_i is IGNORE_INDEX; the mean divides
the sum by the number of labelled rows. The log-probabilities are never written. A program
takes ROWS rows and walks them once in BLOCK-wide pieces with an online log-sum-exp (running
maximum m, sum s of exp(x - m), rescaled by exp(m_old - m_new) when a piece raises m), then reads
each label's logit (one sector per row) and writes the row's loss. A second, single-program
kernel sums the losses and counts the labelled rows. DRAM traffic: the logits once, plus the
labels and losses. Float32 arithmetic throughout.
"""

import triton
import triton.language as tl

# Template parameters (rewritten by render).
ROWS = 1
BLOCK = 8192
NUM_WARPS = 8
# What the problem computes (identified by the template's probe).
IGNORE_INDEX = -100
MEAN_BLOCK = 1024  # rows per step of the mean


@triton.jit
def _row_losses(logits_ptr, labels_ptr, losses_ptr, n_rows, n_cols, logits_stride,
                IGNORE_INDEX: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    in_range = rows < n_rows
    # Spare rows of the last program re-read the last row and store nothing.
    row_ptrs = logits_ptr + tl.minimum(rows, n_rows - 1).to(tl.int64) * logits_stride
    m = tl.full([ROWS], float("-inf"), tl.float32)
    s = tl.zeros([ROWS], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptrs[:, None] + cols[None, :], mask=(cols < n_cols)[None, :],
                    other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
        m = m_new
    labels = tl.load(labels_ptr + rows, mask=in_range, other=IGNORE_INDEX)
    labelled = labels != IGNORE_INDEX
    label_logit = tl.load(row_ptrs + tl.where(labelled, labels, 0), mask=labelled & in_range,
                          other=0.0).to(tl.float32)
    losses = tl.where(labelled, m + tl.log(s) - label_logit, 0.0)
    tl.store(losses_ptr + rows, losses, mask=in_range)


@triton.jit
def _mean_loss(losses_ptr, labels_ptr, loss_ptr, n_rows, IGNORE_INDEX: tl.constexpr,
               BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], tl.float32)
    count = tl.zeros([BLOCK], tl.int32)
    for start in range(0, n_rows, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        in_range = rows < n_rows
        total += tl.load(losses_ptr + rows, mask=in_range, other=0.0)
        labels = tl.load(labels_ptr + rows, mask=in_range, other=IGNORE_INDEX)
        count += (labels != IGNORE_INDEX).to(tl.int32)
    tl.store(loss_ptr, tl.sum(total, axis=0) / tl.sum(count, axis=0).to(tl.float32))


def cross_entropy(logits, labels, losses, loss):
    n_rows, n_cols = logits.shape
    _row_losses[(triton.cdiv(n_rows, ROWS),)](
        logits, labels, losses, n_rows, n_cols, logits.stride(0), IGNORE_INDEX=IGNORE_INDEX,
        ROWS=ROWS, BLOCK=BLOCK, num_warps=NUM_WARPS)
    _mean_loss[(1,)](losses, labels, loss, n_rows, IGNORE_INDEX=IGNORE_INDEX, BLOCK=MEAN_BLOCK,
                     num_warps=4)
