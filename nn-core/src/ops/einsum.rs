//! `einsum`: Einstein summation over labelled dims (`torch.einsum`).
//!
//! The equation is parsed into one label list per operand (an ellipsis becomes labels of
//! its own, right-aligned across operands, so `...` broadcasts as in NumPy). Each operand
//! then takes its diagonals (a label repeated within one operand) and sums away labels
//! that no later step needs; operands are contracted pairwise from left to right, each
//! contraction one (batched) matrix product: the shared labels still needed later are the
//! batch dims, the shared labels needed nowhere else are the inner dim, and each side's own
//! labels are the rows and columns. Every step is an existing differentiable op (permute,
//! reshape, index_select, sum, matmul), so the backward and every device come with them.

use super::check_same;
use crate::tensor::Tensor;

/// A label: `A`-`Z` are 0-25 and `a`-`z` 26-51 (so sorting by id is PyTorch's implicit
/// output order), ellipsis dims are 52 and up.
type Label = usize;
const ELLIPSIS: Label = 52;

fn label_char(l: Label) -> String {
    match l {
        0..=25 => char::from(b'A' + l as u8).to_string(),
        26..=51 => char::from(b'a' + (l - 26) as u8).to_string(),
        _ => format!("...[{}]", l - ELLIPSIS),
    }
}

/// The equation as given, for messages.
struct Equation<'a>(&'a str);

impl Equation<'_> {
    #[track_caller]
    fn fail(&self, msg: String) -> ! {
        panic!("einsum(\"{}\"): {msg}", self.0)
    }
}

/// One side of the equation: the labels of one term, with where its ellipsis sits.
struct Term {
    labels: Vec<Label>,
    ellipsis: Option<usize>,
    text: String,
}

/// Einstein summation, as `torch.einsum(equation, *operands)`.
///
/// `equation` names each operand's dims with letters (`a`-`z`, `A`-`Z`), terms separated
/// by `,`, optionally followed by `->` and the output's letters; spaces are ignored.
/// `...` stands for the dims not named (broadcast across operands like NumPy's,
/// right-aligned). The result is
/// `out[output labels] = sum over all other labels of prod_k operand_k[its labels]`:
/// a letter repeated within one operand takes its diagonal (`"ii->i"`, trace `"ii"`); a
/// letter absent from the output is summed over. Without `->` the output holds the
/// ellipsis dims, then the letters appearing exactly once, in alphabetical order
/// (uppercase first). Dims of one letter must have equal sizes or size 1 (broadcast).
///
/// Operands are contracted pairwise from left to right; each pair is one (batched)
/// [`matmul`](Tensor::matmul) of permuted and reshaped operands.
///
/// ```
/// use nn_core::{functional::einsum, Tensor};
/// let a = Tensor::arange(0.0, 6.0, 1.0).reshape(&[2, 3]);
/// let b = Tensor::arange(0.0, 3.0, 1.0);
/// assert_eq!(einsum("ij,j->i", &[&a, &b]).to_vec(), vec![5.0, 14.0]);
/// assert_eq!(einsum("ij->ji", &[&a]).shape(), &[3, 2]);
/// let m = Tensor::arange(0.0, 4.0, 1.0).reshape(&[2, 2]);
/// assert_eq!(einsum("ii", &[&m]).item(), 3.0);
/// assert_eq!(einsum("ij,kj", &[&a, &a]).to_vec(), a.matmul(&a.t()).to_vec());
/// ```
///
/// # Panics
/// Naming the equation and the problem: a character other than a letter, `,`, `->` or
/// `...`; operand counts that differ from the terms; an operand whose rank does not match
/// its term; an output letter repeated or absent from the inputs; sizes of one letter
/// that neither match nor broadcast; operands on different devices or of different dtypes.
#[track_caller]
pub fn einsum(equation: &str, operands: &[&Tensor]) -> Tensor {
    // On the GPU's lower-precision list (PyTorch's CUDA list names it), where it is then one
    // op: its sums are not cast. On the CPU it is not listed: its products are cast as
    // PyTorch's `bmm` inside it is, its elementwise parts run as given.
    let device = operands.first().map_or(crate::Device::Cpu, |t| t.device());
    let args: Vec<Option<&Tensor>> = operands.iter().map(|t| Some(*t)).collect();
    let _op = crate::autograd::entry::op_entry!(untraced where_listed crate::names::EINSUM, device, args = &args,
        again = |c| einsum(equation, &c.iter().map(|t| t.expect("present")).collect::<Vec<_>>()));
    let eqn = Equation(equation);
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<Term> = lhs.split(',').map(|t| parse_term(t, &eqn)).collect();
    if terms.len() != operands.len() {
        eqn.fail(format!(
            "the equation has {} input term{} but {} operand{} {} given",
            terms.len(),
            if terms.len() == 1 { "" } else { "s" },
            operands.len(),
            if operands.len() == 1 { "" } else { "s" },
            if operands.len() == 1 { "was" } else { "were" },
        ));
    }
    check_same("einsum", operands);

    // Expand each ellipsis into labels of its own, right-aligned across operands.
    let mut ell_dims = vec![0; operands.len()];
    for (k, (t, x)) in terms.iter().zip(operands).enumerate() {
        let named = t.labels.len();
        match t.ellipsis {
            None if x.rank() != named => eqn.fail(format!(
                "operand {k} has {} dims (shape {:?}) but its subscripts \"{}\" name {named} and there is no ellipsis",
                x.rank(),
                x.shape(),
                t.text
            )),
            Some(_) if x.rank() < named => eqn.fail(format!(
                "operand {k} has {} dims (shape {:?}), fewer than the {named} its subscripts \"{}\" name",
                x.rank(),
                x.shape(),
                t.text
            )),
            _ => ell_dims[k] = x.rank() - named,
        }
    }
    let ell = ell_dims.iter().copied().max().unwrap_or(0);
    let labels: Vec<Vec<Label>> = terms
        .iter()
        .zip(&ell_dims)
        .map(|(t, &e)| match t.ellipsis {
            None => t.labels.clone(),
            Some(at) => {
                let mut l = t.labels[..at].to_vec();
                l.extend((ell - e..ell).map(|j| ELLIPSIS + j));
                l.extend(&t.labels[at..]);
                l
            }
        })
        .collect();

    // Every label's size, checking that the operands agree (or broadcast from 1).
    let mut size: Vec<Option<(usize, usize)>> = vec![None; ELLIPSIS + ell];
    for (k, (ls, x)) in labels.iter().zip(operands).enumerate() {
        for (&l, &n) in ls.iter().zip(x.shape()) {
            match size[l] {
                Some((m, at)) if at == k && m != n => eqn.fail(format!(
                    "subscript {} is repeated for operand {k} but the sizes don't match, {m} != {n} (shape {:?})",
                    label_char(l),
                    x.shape()
                )),
                Some((m, at)) if m != n && m != 1 && n != 1 => eqn.fail(format!(
                    "subscript {} has size {m} in operand {at} (shape {:?}) but size {n} in operand {k} (shape {:?}), which do not broadcast",
                    label_char(l),
                    operands[at].shape(),
                    x.shape()
                )),
                Some((m, _)) if m != 1 => {}
                _ => size[l] = Some((n, k)),
            }
        }
    }

    let output: Vec<Label> = match rhs {
        Some(r) => {
            let t = parse_term(r, &eqn);
            let mut out = t.labels[..t.ellipsis.unwrap_or(t.labels.len())].to_vec();
            if let Some(at) = t.ellipsis {
                out.extend((0..ell).map(|j| ELLIPSIS + j));
                out.extend(&t.labels[at..]);
            }
            for (i, &l) in t.labels.iter().enumerate() {
                if t.labels[..i].contains(&l) {
                    eqn.fail(format!("output subscript {} appears more than once in the output", label_char(l)));
                }
                if size[l].is_none() {
                    eqn.fail(format!(
                        "output subscript {} does not appear in the equation for any input operand",
                        label_char(l)
                    ));
                }
            }
            out
        }
        None => {
            let mut count = vec![0usize; ELLIPSIS];
            for l in labels.iter().flatten().filter(|&&l| l < ELLIPSIS) {
                count[*l] += 1;
            }
            (ELLIPSIS..ELLIPSIS + ell).chain((0..ELLIPSIS).filter(|&l| count[l] == 1)).collect()
        }
    };

    // Contract left to right; `needed_after[k]`: labels that operands after k or the output use.
    let mut needed_after: Vec<Vec<Label>> = vec![output.clone(); operands.len()];
    for k in (0..operands.len().saturating_sub(1)).rev() {
        needed_after[k] = needed_after[k + 1].clone();
        needed_after[k].extend(&labels[k + 1]);
    }
    let mut acc: Option<Operand> = None;
    for (k, (x, ls)) in operands.iter().zip(&labels).enumerate() {
        let mut b = Operand { t: (*x).clone(), labels: ls.clone() };
        b.take_diagonals(k, &eqn);
        acc = Some(match acc {
            None => {
                b.sum_unneeded(&needed_after[k], &[]);
                b
            }
            Some(mut a) => {
                a.sum_unneeded(&needed_after[k], &b.labels);
                b.sum_unneeded(&needed_after[k], &a.labels);
                contract(a, b, &needed_after[k])
            }
        });
    }
    let acc = acc.expect("an equation has at least one term");
    let perm: Vec<usize> =
        output.iter().map(|l| acc.labels.iter().position(|m| m == l).expect("output labels survive")).collect();
    acc.t.permute(&perm)
}

/// Parses one term: letters and at most one `...`.
#[track_caller]
fn parse_term(text: &str, eqn: &Equation<'_>) -> Term {
    let mut labels = Vec::new();
    let mut ellipsis = None;
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c @ b'A'..=b'Z' => labels.push((c - b'A') as Label),
            c @ b'a'..=b'z' => labels.push((c - b'a') as Label + 26),
            b'.' if b[i..].starts_with(b"...") => {
                if ellipsis.is_some() {
                    eqn.fail(format!("found more than one ellipsis (\"...\") in the term \"{text}\""));
                }
                ellipsis = Some(labels.len());
                i += 2;
            }
            _ => eqn.fail(format!(
                "invalid subscript '{}' in the term \"{text}\": subscripts must be letters [a-zA-Z], with at most one \"...\" per term",
                &text[i..].chars().next().unwrap_or('?')
            )),
        }
        i += 1;
    }
    Term { labels, ellipsis, text: text.to_string() }
}

/// A tensor with one label per dim.
struct Operand {
    t: Tensor,
    labels: Vec<Label>,
}

impl Operand {
    /// Replaces every label repeated in this operand by its diagonal (last position).
    #[track_caller]
    fn take_diagonals(&mut self, k: usize, eqn: &Equation<'_>) {
        while let Some((i, j)) = (0..self.labels.len())
            .find_map(|j| self.labels[..j].iter().position(|&l| l == self.labels[j]).map(|i| (i, j)))
        {
            let (n, m) = (self.t.shape()[i], self.t.shape()[j]);
            if n != m {
                eqn.fail(format!(
                    "subscript {} is repeated for operand {k} but the sizes don't match, {n} != {m} (shape {:?})",
                    label_char(self.labels[i]),
                    self.t.shape()
                ));
            }
            // Move dims i and j last, flatten them, and pick entries (p, p): p * (n + 1).
            let rest: Vec<usize> = (0..self.labels.len()).filter(|&d| d != i && d != j).collect();
            let perm: Vec<usize> = rest.iter().copied().chain([i, j]).collect();
            let mut shape: Vec<usize> = rest.iter().map(|&d| self.t.shape()[d]).collect();
            shape.push(n * n);
            let flat = self.t.permute(&perm).reshape(&shape);
            let index = Tensor::from_vec_i64((0..n as i64).map(|p| p * (n as i64 + 1)).collect(), &[n])
                .to_device(self.t.device());
            let l = self.labels[i];
            self.t = flat.index_select(-1, &index);
            self.labels = rest.iter().map(|&d| self.labels[d]).chain([l]).collect();
        }
    }

    /// Sums away the labels that neither `needed` nor `other` hold.
    fn sum_unneeded(&mut self, needed: &[Label], other: &[Label]) {
        let dims: Vec<usize> = (0..self.labels.len())
            .filter(|&d| !needed.contains(&self.labels[d]) && !other.contains(&self.labels[d]))
            .collect();
        if dims.is_empty() {
            return;
        }
        self.t = self.t.sum_dims(&dims, false);
        self.labels = (0..self.labels.len()).filter(|d| !dims.contains(d)).map(|d| self.labels[d]).collect();
    }

    fn dim(&self, l: Label) -> usize {
        self.labels.iter().position(|&m| m == l).expect("label of this operand")
    }

    fn size(&self, l: Label) -> usize {
        self.t.shape()[self.dim(l)]
    }

    /// Sums over label `l` and drops it.
    fn sum_label(&mut self, l: Label) {
        let d = self.dim(l);
        self.t = self.t.sum_dim(d, false);
        self.labels.remove(d);
    }

    /// Drops label `l`, of size 1.
    fn squeeze_label(&mut self, l: Label) {
        let d = self.dim(l);
        self.t = self.t.squeeze_dim(d);
        self.labels.remove(d);
    }

    /// Permutes to `order` and expands each dim to `sizes` (broadcasting size-1 dims),
    /// then flattens into `groups` consecutive groups of dims.
    fn arrange(&self, order: &[Label], sizes: &[usize], groups: &[usize]) -> Tensor {
        let perm: Vec<usize> = order.iter().map(|&l| self.dim(l)).collect();
        let t = self.t.permute(&perm);
        let t = if t.shape() == sizes { t } else { t.expand(sizes) };
        let mut flat = Vec::with_capacity(groups.len());
        let mut at = 0;
        for &g in groups {
            flat.push(sizes[at..at + g].iter().product());
            at += g;
        }
        t.reshape(&flat)
    }
}

/// Contracts two operands (each already free of labels that only it holds and nothing
/// needs) into one: `[batch.., a_only.., b_only..]`.
fn contract(mut a: Operand, mut b: Operand, needed: &[Label]) -> Operand {
    // A shared label summed here where one side broadcasts (size 1): sum the other side
    // over it first instead of expanding the first.
    let shared: Vec<Label> = a.labels.iter().copied().filter(|l| b.labels.contains(l)).collect();
    for &l in shared.iter().filter(|l| !needed.contains(l)) {
        let (na, nb) = (a.size(l), b.size(l));
        if na != nb {
            if na == 1 {
                a.squeeze_label(l);
                b.sum_label(l);
            } else {
                b.squeeze_label(l);
                a.sum_label(l);
            }
        }
    }
    let in_b = |l: &Label| b.labels.contains(l);
    let batch: Vec<Label> = a.labels.iter().copied().filter(|l| in_b(l) && needed.contains(l)).collect();
    let inner: Vec<Label> = a.labels.iter().copied().filter(|l| in_b(l) && !needed.contains(l)).collect();
    let a_only: Vec<Label> = a.labels.iter().copied().filter(|l| !in_b(l)).collect();
    let b_only: Vec<Label> = b.labels.iter().copied().filter(|l| !a.labels.contains(l)).collect();
    let bsize: Vec<usize> = batch.iter().map(|&l| a.size(l).max(b.size(l))).collect();
    let isize: Vec<usize> = inner.iter().map(|&l| a.size(l)).collect();
    let asize: Vec<usize> = a_only.iter().map(|&l| a.size(l)).collect();
    let bosize: Vec<usize> = b_only.iter().map(|&l| b.size(l)).collect();

    let cat = |xs: &[&[Label]]| -> Vec<Label> { xs.concat() };
    let lhs = a.arrange(
        &cat(&[&batch, &a_only, &inner]),
        &[&bsize[..], &asize, &isize].concat(),
        &[batch.len(), a_only.len(), inner.len()],
    );
    let rhs = b.arrange(
        &cat(&[&batch, &inner, &b_only]),
        &[&bsize[..], &isize, &bosize].concat(),
        &[batch.len(), inner.len(), b_only.len()],
    );
    let (lhs, rhs) = if batch.is_empty() { (lhs.squeeze_dim(0), rhs.squeeze_dim(0)) } else { (lhs, rhs) };
    // Nothing to sum: an outer product per batch entry, which broadcasting does without a GEMM.
    let product = if inner.is_empty() { &lhs * &rhs } else { lhs.matmul(&rhs) };
    let shape = [&bsize[..], &asize, &bosize].concat();
    Operand { t: product.reshape(&shape), labels: cat(&[&batch, &a_only, &b_only]) }
}

#[cfg(test)]
mod tests {
    use super::einsum;
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::Tensor;

    fn vals(n: usize, seed: u64) -> Vec<f64> {
        (0..n as u64).map(|i| (((i + seed) * 2654435761 % 1000) as f64 / 500.0) - 1.0).collect()
    }

    fn t(shape: &[usize], seed: u64) -> Tensor {
        t64(&vals(shape.iter().product(), seed), shape)
    }

    #[test]
    fn matrix_products_match_matmul() {
        let (a, b) = (t(&[2, 3], 1), t(&[3, 4], 2));
        assert_close64(&einsum("ij,jk->ik", &[&a, &b]).to_vec_f64(), &a.matmul(&b).to_vec_f64(), 1e-12);
        assert_close64(&einsum("ij,jk", &[&a, &b]).to_vec_f64(), &a.matmul(&b).to_vec_f64(), 1e-12);
        assert_close64(&einsum("ij,jk->ki", &[&a, &b]).to_vec_f64(), &a.matmul(&b).t().to_vec_f64(), 1e-12);
        let (x, y) = (t(&[5, 2, 3], 3), t(&[5, 3, 4], 4));
        let bmm = einsum("bij,bjk->bik", &[&x, &y]);
        assert_eq!(bmm.shape(), &[5, 2, 4]);
        assert_close64(&bmm.to_vec_f64(), &x.matmul(&y).to_vec_f64(), 1e-12);
        // Outer product, dot product, and a sum over a label of one operand only.
        let (u, v) = (t(&[3], 5), t(&[4], 6));
        let outer = einsum("i,j->ij", &[&u, &v]);
        assert_close64(&outer.to_vec_f64(), &u.unsqueeze(1).mul(&v.unsqueeze(0)).to_vec_f64(), 1e-12);
        assert_close64(&einsum("i,i->", &[&u, &u]).to_vec_f64(), &[u.square().sum().item()], 1e-12);
        let s = einsum("ij,jk->i", &[&a, &b]);
        assert_close64(&s.to_vec_f64(), &a.matmul(&b).sum_dim(1, false).to_vec_f64(), 1e-12);
    }

    #[test]
    fn diagonals_traces_and_transposes() {
        let m = t64(&(0..9).map(|v| v as f64).collect::<Vec<_>>(), &[3, 3]);
        assert_eq!(einsum("ii->i", &[&m]).to_vec_f64(), vec![0.0, 4.0, 8.0]);
        assert_eq!(einsum("ii", &[&m]).item(), 12.0);
        assert_eq!(einsum("ij->ji", &[&m]).to_vec_f64(), m.t().contiguous().to_vec_f64());
        assert_eq!(einsum("ij->", &[&m]).item(), 36.0);
        // torch.einsum('iji->j', torch.arange(12.).view(2, 3, 2)) == [7, 11, 15]
        let x = t64(&(0..12).map(|v| v as f64).collect::<Vec<_>>(), &[2, 3, 2]);
        assert_eq!(einsum("iji->j", &[&x]).to_vec_f64(), vec![7.0, 11.0, 15.0]);
        // Implicit output: letters once, alphabetical, uppercase first ('iiBa' -> 'Ba').
        let y = t(&[2, 2, 3, 4], 7);
        assert_eq!(einsum("iiBa", &[&y]).shape(), &[3, 4]);
        assert_eq!(einsum("ba", &[&m]).to_vec_f64(), m.t().contiguous().to_vec_f64());
    }

    #[test]
    fn ellipsis_broadcasts_and_sums() {
        let (x, y) = (t(&[2, 1, 3, 4], 8), t(&[5, 4, 2], 9));
        let z = einsum("...ij,...jk->...ik", &[&x, &y]);
        assert_eq!(z.shape(), &[2, 5, 3, 2]);
        assert_close64(&z.to_vec_f64(), &x.matmul(&y).to_vec_f64(), 1e-12);
        // Implicit output keeps the ellipsis dims first; an explicit output without them sums them.
        assert_eq!(einsum("...ij,...jk", &[&x, &y]).shape(), &[2, 5, 3, 2]);
        let s = einsum("...ij->j", &[&x]);
        assert_close64(&s.to_vec_f64(), &x.sum_dims(&[0, 1, 2], false).to_vec_f64(), 1e-12);
        // Size-1 dims of a letter broadcast: torch.einsum('bi,bi->b', ones(1, 3), ones(4, 3)).
        let (p, q) = (t(&[1, 3], 10), t(&[4, 3], 11));
        let b = einsum("bi,bi->b", &[&p, &q]);
        assert_close64(&b.to_vec_f64(), &(&p * &q).sum_dim(1, false).to_vec_f64(), 1e-12);
        let c = einsum("ij,j", &[&q, &t(&[1], 12)]);
        assert_close64(&c.to_vec_f64(), &(&q * &t(&[1], 12)).sum_dim(1, false).to_vec_f64(), 1e-12);
    }

    #[test]
    fn three_operands_and_spaces() {
        let (a, b, c) = (t(&[2, 3], 13), t(&[3, 4], 14), t(&[4, 5], 15));
        let y = einsum("ij, jk, kl -> il", &[&a, &b, &c]);
        assert_close64(&y.to_vec_f64(), &a.matmul(&b).matmul(&c).to_vec_f64(), 1e-12);
        // Bilinear form: x^T A y per batch entry.
        let (x, m, z) = (t(&[6, 3], 16), t(&[3, 4], 17), t(&[6, 4], 18));
        let bil = einsum("ni,ij,nj->n", &[&x, &m, &z]);
        let expect = (&x.matmul(&m) * &z).sum_dim(1, false);
        assert_close64(&bil.to_vec_f64(), &expect.to_vec_f64(), 1e-12);
    }

    #[test]
    fn backward_and_gradcheck() {
        let a = leaf(&vals(6, 19), &[2, 3]);
        let b = leaf(&vals(12, 20), &[3, 4]);
        einsum("ij,jk->ik", &[&a, &b]).exp().mean().backward();
        let (a2, b2) = (a.detach().requires_grad_(true), b.detach().requires_grad_(true));
        a2.matmul(&b2).exp().mean().backward();
        assert_close64(&grad(&a), &grad(&a2), 1e-12);
        assert_close64(&grad(&b), &grad(&b2), 1e-12);
        let eqs: [(&str, Vec<Vec<usize>>); 7] = [
            ("bij,bjk->bik", vec![vec![2, 2, 3], vec![2, 3, 2]]),
            ("ii->i", vec![vec![3, 3]]),
            ("iij,jk", vec![vec![2, 2, 3], vec![3, 2]]),
            ("...ij,...j->...i", vec![vec![2, 1, 2, 3], vec![3, 3]]),
            ("ij,jk,kl->li", vec![vec![2, 3], vec![3, 2], vec![2, 2]]),
            ("bi,bi->b", vec![vec![1, 3], vec![2, 3]]),
            ("ij,j", vec![vec![2, 3], vec![1]]),
        ];
        for (k, (eq, shapes)) in eqs.iter().enumerate() {
            let inputs: Vec<Tensor> =
                shapes.iter().enumerate().map(|(i, s)| t(s, 30 + 7 * k as u64 + i as u64)).collect();
            gradcheck(|x| einsum(eq, &x.iter().collect::<Vec<_>>()).tanh(), &inputs)
                .unwrap_or_else(|e| panic!("{eq}: {e}"));
            check_noncontig(|x| einsum(eq, &x.iter().collect::<Vec<_>>()), &inputs);
        }
    }

    #[test]
    fn contractions_run_as_matrix_products() {
        let names = |eq: &str, xs: &[&Tensor]| -> Vec<&'static str> {
            let (_, t) = crate::trace::trace(|| einsum(eq, xs));
            t.ops.iter().map(|o| o.name).collect()
        };
        let (a, b) = (t(&[2, 3], 1), t(&[3, 4], 2));
        let ops = names("ij,jk->ik", &[&a, &b]);
        assert!(ops.contains(&"matmul") && !ops.contains(&"mul") && !ops.contains(&"sum"), "{ops:?}");
        let (x, y) = (t(&[5, 2, 3], 3), t(&[5, 4, 3], 4));
        let ops = names("bij,bkj->bik", &[&x, &y]);
        assert!(ops.contains(&"matmul") && !ops.contains(&"mul"), "{ops:?}");
        // Without a shared summed label it is a broadcast product, no GEMM.
        let ops = names("i,j->ij", &[&t(&[3], 5), &t(&[4], 6)]);
        assert!(ops.contains(&"mul") && !ops.contains(&"matmul"), "{ops:?}");
    }

    #[test]
    #[should_panic(expected = "einsum(\"ij,jk->ik\"): the equation has 2 input terms but 1 operand was given")]
    fn operand_count_mismatch_panics() {
        einsum("ij,jk->ik", &[&t(&[2, 2], 1)]);
    }

    #[test]
    #[should_panic(
        expected = "einsum(\"ij,jk->ik\"): operand 1 has 3 dims (shape [3, 4, 1]) but its subscripts \"jk\" name 2 and there is no ellipsis"
    )]
    fn rank_mismatch_panics() {
        einsum("ij,jk->ik", &[&t(&[2, 3], 1), &t(&[3, 4, 1], 2)]);
    }

    #[test]
    #[should_panic(
        expected = "einsum(\"ij,jk\"): subscript j has size 3 in operand 0 (shape [2, 3]) but size 4 in operand 1 (shape [4, 4]), which do not broadcast"
    )]
    fn size_mismatch_panics() {
        einsum("ij,jk", &[&t(&[2, 3], 1), &t(&[4, 4], 2)]);
    }

    #[test]
    #[should_panic(expected = "einsum(\"i2,j\"): invalid subscript '2' in the term \"i2\"")]
    fn bad_character_panics() {
        einsum("i2,j", &[&t(&[2, 3], 1), &t(&[2], 2)]);
    }

    #[test]
    #[should_panic(expected = "einsum(\"ij->ii\"): output subscript i appears more than once in the output")]
    fn repeated_output_label_panics() {
        einsum("ij->ii", &[&t(&[2, 2], 1)]);
    }

    #[test]
    #[should_panic(
        expected = "einsum(\"ij->k\"): output subscript k does not appear in the equation for any input operand"
    )]
    fn unknown_output_label_panics() {
        einsum("ij->k", &[&t(&[2, 2], 1)]);
    }

    #[test]
    #[should_panic(
        expected = "einsum(\"ii\"): subscript i is repeated for operand 0 but the sizes don't match, 2 != 3"
    )]
    fn diagonal_of_unequal_dims_panics() {
        einsum("ii", &[&t(&[2, 3], 1)]);
    }

    #[test]
    #[should_panic(expected = "einsum(\"...i...\"): found more than one ellipsis")]
    fn two_ellipses_panic() {
        einsum("...i...", &[&t(&[2, 3], 1)]);
    }
}
