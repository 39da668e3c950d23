//! The operands of a fused attention as its kernel reads them: the sizes, each operand's
//! heads read in place through their strides, and the mask (none, causal, or a tensor read
//! through broadcast strides).

use super::super::gemm::MatRef;
use super::super::CpuFloat;

/// The sizes of a fused attention: `n` batch entries of `heads` query heads and
/// `kv_heads` key and value heads each, queries `[l, e]`, keys `[s, e]` and values
/// `[s, ev]` per head.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// Batch entries.
    pub n: usize,
    /// Query heads per batch entry.
    pub heads: usize,
    /// Key and value heads per batch entry (dividing `heads`).
    pub kv_heads: usize,
    /// Query positions.
    pub l: usize,
    /// Key and value positions.
    pub s: usize,
    /// Query and key width.
    pub e: usize,
    /// Value width.
    pub ev: usize,
}

impl Sizes {
    /// Query heads per key and value head.
    pub(super) fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// One operand's heads: element `(n, h, row, col)` is
/// `data[offset + n * strides[0] + h * strides[1] + row * strides[2] + col * strides[3]]`.
#[derive(Clone, Copy)]
pub(crate) struct Heads<'a, T> {
    /// The buffer.
    pub data: &'a [T],
    /// Index of element `(0, 0, 0, 0)`.
    pub offset: usize,
    /// Steps of the batch entry, head, row and column.
    pub strides: [usize; 4],
}

impl<'a, T: Copy> Heads<'a, T> {
    /// Head `h` of batch entry `n` as a matrix, or its transpose.
    pub(super) fn mat(&self, n: usize, h: usize, transposed: bool) -> MatRef<'a, T> {
        let [sn, sh, sr, sc] = self.strides;
        let (row_stride, col_stride) = if transposed { (sc, sr) } else { (sr, sc) };
        MatRef { data: self.data, offset: self.offset + n * sn + h * sh, row_stride, col_stride }
    }

    /// Element `(n, h, row, col)`.
    pub(super) fn at(&self, n: usize, h: usize, row: usize, col: usize) -> T {
        let [sn, sh, sr, sc] = self.strides;
        self.data[self.offset + n * sn + h * sh + row * sr + col * sc]
    }
}

/// The matrix `m` from row `r` and column `c` on.
pub(super) fn from<T>(m: MatRef<'_, T>, r: usize, c: usize) -> MatRef<'_, T> {
    MatRef { offset: m.offset + r * m.row_stride + c * m.col_stride, ..m }
}

/// The `rows x cols` block at `(r, c)` of a row-major matrix of `width` columns, or its
/// transpose.
pub(super) fn block<T>(data: &[T], width: usize, (r, c): (usize, usize), transposed: bool) -> MatRef<'_, T> {
    let (row_stride, col_stride) = if transposed { (1, width) } else { (width, 1) };
    MatRef { data, offset: r * width + c, row_stride, col_stride }
}

/// The mask of a fused attention, of PyTorch's kinds.
#[derive(Clone, Copy)]
pub(crate) enum Mask<'a, T> {
    /// Every key attended.
    None,
    /// Query `i` attends keys `j <= i` (top-left aligned).
    Causal,
    /// `true` = may attend, broadcast to `[n, heads, l, s]`.
    Keep(Heads<'a, bool>),
    /// Added to the scores (`-inf` = masked out), broadcast to `[n, heads, l, s]`.
    Add(Heads<'a, T>),
}

impl<T: CpuFloat> Mask<'_, T> {
    /// Whether a query row whose every score is `-inf` gives zero weights (PyTorch's safe
    /// softmax, which the composition applies under an explicit mask) rather than NaN.
    pub(super) fn safe(&self) -> bool {
        matches!(self, Mask::Keep(_) | Mask::Add(_))
    }

    /// The keys `[lo, hi)` outside of which every query of head `(n, h)` is masked out:
    /// for a mask the same for every query (a key padding mask), from its first to past its
    /// last attended key (`lo == hi` when none is); else all `s`.
    pub(super) fn keys(&self, n: usize, h: usize, z: &Sizes) -> (usize, usize) {
        let same_rows = |strides: [usize; 4]| strides[2] == 0 || z.l == 1;
        match self {
            Mask::Keep(m) if same_rows(m.strides) => span(z.s, |j| m.at(n, h, 0, j)),
            Mask::Add(m) if same_rows(m.strides) => span(z.s, |j| m.at(n, h, 0, j) != T::neg_infinity()),
            _ => (0, z.s),
        }
    }

    /// The keys query rows `..i1` may attend, within the head's `keys`.
    pub(super) fn keys_before(&self, keys: (usize, usize), i1: usize) -> (usize, usize) {
        match self {
            Mask::Causal => (keys.0, keys.1.min(i1)),
            _ => keys,
        }
    }

    /// Masks the scores `row` of query `i` of head `(n, h)`, those of keys `lo..`, and
    /// says whether the row is dead (every score `-inf` under a safe mask).
    pub(super) fn apply(&self, at: (usize, usize, usize), lo: usize, row: &mut [T]) -> bool {
        let ninf = T::neg_infinity();
        match self {
            Mask::None | Mask::Causal => return false,
            Mask::Keep(m) => for_row(m, at, lo, row, |x, keep| {
                if !keep {
                    *x = ninf;
                }
            }),
            Mask::Add(m) => for_row(m, at, lo, row, |x, add| *x = *x + add),
        }
        row.iter().all(|&x| x == ninf)
    }
}

/// `f(score, mask value)` along `row`, the scores of query `i` of head `(n, h)` from key
/// `lo` on, with the mask's values for them (read as a slice when they are contiguous, so
/// that the loop vectorizes).
fn for_row<U: Copy, T>(
    m: &Heads<'_, U>,
    (n, h, i): (usize, usize, usize),
    lo: usize,
    row: &mut [T],
    f: impl Fn(&mut T, U),
) {
    let [sn, sh, sr, sc] = m.strides;
    let (at, len) = (m.offset + n * sn + h * sh + i * sr + lo * sc, row.len());
    if sc == 1 {
        for (x, &u) in row.iter_mut().zip(&m.data[at..at + len]) {
            f(x, u);
        }
    } else {
        for (j, x) in row.iter_mut().enumerate() {
            f(x, m.data[at + j * sc]);
        }
    }
}

/// The keys `[lo, hi)` from the first of `s` that is `attended` to past the last one
/// (`(0, 0)` when none is).
fn span(s: usize, attended: impl Fn(usize) -> bool) -> (usize, usize) {
    match (0..s).find(|&j| attended(j)) {
        Some(lo) => (lo, (lo..s).rfind(|&j| attended(j)).expect("`lo` is attended") + 1),
        None => (0, 0),
    }
}
