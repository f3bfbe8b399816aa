//! Causal self-attention on the CPU, straight from `c_attn`'s output.
//!
//! As candle ops, attention copies q, k and v out of qkv [B*T, 3C] into per-head tensors, computes
//! every score of the T×T matrix (half of them masked away afterwards), copies the heads back
//! together, and does the same in reverse in the backward. Here each head's matrices are read in
//! place through strides (q, k and v are column ranges of qkv; the output's heads are column ranges
//! of [B*T, C]), and rows and columns are taken in blocks of [`BLOCK`] so that the products skip
//! the blocks above the diagonal, which the causal mask zeroes anyway: about half the work at long
//! blocks, as PyTorch's SDPA on CPU skips it.
//!
//! Tensors kept: qkv itself (instead of q·scale, k and v: the same bytes), the probabilities
//! [B, H, T, T], and the merged heads [B*T, C]. The backward needs one T×T scratch matrix for the
//! head it is working on, not a [B, H, T, T] tensor per step. `core::trainer_model` follows these
//! allocations. Everything runs for contiguous f32 CPU tensors only; otherwise the functions return
//! `None` and `model.rs` runs the candle composition (f64 gradient check, CUDA).

use crate::fused::{cpu_tensor, exp_f32, lanes, parallelism, product, view, widened, Filled, Mat};
use candle_core::{Result, Tensor};

/// Rows (and columns) per block of the triangular products: small enough that the diagonal
/// blocks' wasted upper halves are a small part at T = 256, large enough for gemm's kernels.
/// Core's trainer model counts gemm's per-thread buffers from the smallest product, so it reads
/// the same constant.
const BLOCK: usize = vramfit_core::trainer_model::ATTENTION_BLOCK as usize;

/// The attention geometry: batch, block length, heads, and the embedding width C.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    pub b: usize,
    pub t: usize,
    pub h: usize,
    pub c: usize,
}

impl Heads {
    fn hs(&self) -> usize {
        self.c / self.h
    }

    fn scale(&self) -> f32 {
        1.0 / (self.hs() as f32).sqrt()
    }

    fn valid(&self) -> bool {
        self.b > 0 && self.t > 0 && self.h > 0 && self.c.is_multiple_of(self.h) && self.c > 0
    }

    /// Row blocks of a T×T matrix: (first row, one past the last).
    fn blocks(&self) -> impl Iterator<Item = (usize, usize)> {
        let t = self.t;
        (0..t).step_by(BLOCK).map(move |r0| (r0, (r0 + BLOCK).min(t)))
    }
}

/// Row i (= `first_row` + the row's index in `rows`, rows of length t) of the block: softmax of its
/// first i + 1 entries in place, zero after them.
#[inline(always)]
fn causal_softmax_rows_kernel(rows: &mut [f32], t: usize, first_row: usize) {
    for (k, row) in rows.chunks_exact_mut(t).enumerate() {
        let (seen, masked) = row.split_at_mut(first_row + k + 1);
        let max = lanes(seen, f32::NEG_INFINITY, f32::max);
        for y in seen.iter_mut() {
            *y = exp_f32(*y - max);
        }
        let inv = 1.0 / lanes(seen, 0.0, |a, b| a + b);
        for y in seen.iter_mut() {
            *y *= inv;
        }
        masked.fill(0.0);
    }
}
widened!(causal_softmax_rows => causal_softmax_rows_kernel(rows: &mut [f32], t: usize, first_row: usize));

/// Softmax's backward on the block's rows, in place: with g = the probabilities' gradient (times
/// the dropout mask, if any), ds = att · (g − Σ g·att) over the row's first i + 1 entries; zero from
/// there to the block's last column (`width`), which the products that read ds take in.
#[inline(always)]
fn softmax_backward_rows_kernel(g: &mut [f32], att: &[f32], mask: &[f32], t: usize, first_row: usize, width: usize) {
    for (k, (g, a)) in g.chunks_exact_mut(t).zip(att.chunks_exact(t)).enumerate() {
        let seen = first_row + k + 1;
        let (g, a) = (&mut g[..width], &a[..seen]);
        let (gs, tail) = g.split_at_mut(seen);
        if !mask.is_empty() {
            let m = &mask[k * t..k * t + seen];
            gs.iter_mut().zip(m).for_each(|(g, &m)| *g *= m);
        }
        let mut acc = [0f32; 16];
        let (gc, ac) = (gs.chunks_exact(16), a.chunks_exact(16));
        let mut dot: f32 = gc.remainder().iter().zip(ac.remainder()).map(|(g, a)| g * a).sum();
        for (gc, ac) in gc.zip(ac) {
            for ((s, &g), &a) in acc.iter_mut().zip(gc).zip(ac) {
                *s += g * a;
            }
        }
        dot += acc.iter().sum::<f32>();
        for (g, &a) in gs.iter_mut().zip(a) {
            *g = a * (*g - dot);
        }
        tail.fill(0.0);
    }
}
widened!(softmax_backward_rows => softmax_backward_rows_kernel(g: &mut [f32], att: &[f32], mask: &[f32], t: usize, first_row: usize, width: usize));

/// The attention probabilities [B, H, T, T] of qkv [B*T, 3C]: softmax(q·kᵀ / sqrt(hs)) under the
/// causal mask, zero above the diagonal.
pub fn probabilities(qkv: &Tensor, g: Heads) -> Option<Result<Tensor>> {
    let (n, c3) = qkv.dims2().ok()?;
    if !g.valid() || n != g.b * g.t || c3 != 3 * g.c {
        return None;
    }
    let qkv_view = view(qkv)?;
    let qkv = qkv_view.slice();
    let (t, hs, par) = (g.t, g.hs(), parallelism());
    let mut att = Filled::new(g.b * g.h * t * t);
    for bi in 0..g.b {
        for hi in 0..g.h {
            let q = Mat { ptr: qkv[bi * t * c3..].as_ptr(), rs: c3 as isize, cs: 1 }.at(0, hi * hs);
            let k = q.at(0, g.c);
            // SAFETY: this head's T×T matrix inside `att`.
            let head = unsafe { att.ptr().add((bi * g.h + hi) * t * t) };
            for (r0, r1) in g.blocks() {
                // SAFETY: rows r0..r1 of q and columns 0..r1 of kᵀ lie inside qkv (B*T rows of 3C);
                // the destination block lies inside this head's matrix. Then the block's columns
                // from r1 on are zeroed, so the whole rows are written before being read.
                let rows = unsafe {
                    product(r1 - r0, r1, hs, head.add(r0 * t), t, q.at(r0, 0), k.t(), g.scale(), par);
                    for r in r0..r1 {
                        std::ptr::write_bytes(head.add(r * t + r1), 0, t - r1);
                    }
                    std::slice::from_raw_parts_mut(head.add(r0 * t), (r1 - r0) * t)
                };
                causal_softmax_rows(rows, t, r0);
            }
        }
    }
    drop(qkv_view);
    // SAFETY: every row of every head was written above.
    Some(cpu_tensor(unsafe { att.into_vec() }, &[g.b, g.h, t, t]))
}

/// The heads merged, [B*T, C]: p · v per head (p the probabilities, after dropout if any),
/// written into the head's columns.
pub fn values(p: &Tensor, qkv: &Tensor, g: Heads) -> Option<Result<Tensor>> {
    if !g.valid() || p.dims() != [g.b, g.h, g.t, g.t] || qkv.dims() != [g.b * g.t, 3 * g.c] {
        return None;
    }
    let (pv, qkv_view) = (view(p)?, view(qkv)?);
    let (probs, qkv) = (pv.slice(), qkv_view.slice());
    let (t, c, hs, par) = (g.t, g.c, g.hs(), parallelism());
    let mut heads = Filled::new(g.b * t * c);
    for bi in 0..g.b {
        for hi in 0..g.h {
            let p = Mat { ptr: probs[(bi * g.h + hi) * t * t..].as_ptr(), rs: t as isize, cs: 1 };
            let v = Mat { ptr: qkv[bi * t * 3 * c..].as_ptr(), rs: 3 * c as isize, cs: 1 }.at(0, 2 * c + hi * hs);
            for (r0, r1) in g.blocks() {
                // SAFETY: p's rows r0..r1, columns 0..r1 (zero above the diagonal), v's rows 0..r1,
                // and this head's columns of output rows r0..r1 all lie inside their tensors.
                unsafe { product(r1 - r0, hs, r1, heads.ptr().add((bi * t + r0) * c + hi * hs), c, p.at(r0, 0), v, 1.0, par) };
            }
        }
    }
    drop((pv, qkv_view));
    // SAFETY: every head's columns of every row were written.
    Some(cpu_tensor(unsafe { heads.into_vec() }, &[g.b * t, c]))
}

/// The backward of [`probabilities`] and [`values`]: d(qkv) [B*T, 3C] from d(heads) [B*T, C],
/// given qkv, the probabilities `att`, `p` (att after dropout, or att itself) and the dropout
/// mask (already scaled by 1/(1-p), as `p` = att · mask).
pub fn backward(dheads: &Tensor, qkv: &Tensor, att: &Tensor, p: &Tensor, mask: Option<&Tensor>, g: Heads) -> Option<Result<Tensor>> {
    let att_dims = [g.b, g.h, g.t, g.t];
    if !g.valid()
        || dheads.dims() != [g.b * g.t, g.c]
        || qkv.dims() != [g.b * g.t, 3 * g.c]
        || att.dims() != att_dims
        || p.dims() != att_dims
        || mask.is_some_and(|m| m.dims() != att_dims)
    {
        return None;
    }
    let (dv_view, qkv_view, att_view, p_view) = (view(dheads)?, view(qkv)?, view(att)?, view(p)?);
    let mask_view = match mask {
        Some(m) => Some(view(m)?),
        None => None,
    };
    let (dheads, qkv, att, probs) = (dv_view.slice(), qkv_view.slice(), att_view.slice(), p_view.slice());
    let mask = mask_view.as_ref().map_or(&[][..], |m| m.slice());
    let (t, c, hs, par, scale) = (g.t, g.c, g.hs(), parallelism(), g.scale());
    let c3 = 3 * c;
    let mut dqkv = Filled::new(g.b * t * c3);
    // The probabilities' gradient, then ds, for one head at a time.
    let mut ds_buf = vec![0f32; t * t];
    // Every access below goes through this one pointer (the scratch is written by gemm, by the
    // kernel through a slice made from it, and read by gemm).
    let ds = ds_buf.as_mut_ptr();
    for bi in 0..g.b {
        for hi in 0..g.h {
            let base = (bi * g.h + hi) * t * t;
            let dy = Mat { ptr: dheads[bi * t * c..].as_ptr(), rs: c as isize, cs: 1 }.at(0, hi * hs);
            let q = Mat { ptr: qkv[bi * t * c3..].as_ptr(), rs: c3 as isize, cs: 1 }.at(0, hi * hs);
            let (k, v) = (q.at(0, c), q.at(0, 2 * c));
            let p = Mat { ptr: probs[base..].as_ptr(), rs: t as isize, cs: 1 };
            // SAFETY: this batch row's block of dqkv.
            let dq = unsafe { dqkv.ptr().add(bi * t * c3 + hi * hs) };
            let (dk, dv) = unsafe { (dq.add(c), dq.add(2 * c)) };
            let ds_mat = Mat { ptr: ds, rs: t as isize, cs: 1 };
            for (r0, r1) in g.blocks() {
                // dv[r0..r1] = pᵀ[r0..r1, r0..T] · dy[r0..T] (p is zero above the diagonal).
                // SAFETY: all inside their tensors; dv's rows r0..r1 of this head's columns.
                unsafe { product(r1 - r0, hs, t - r0, dv.add(r0 * c3), c3, p.t().at(r0, r0), dy.at(r0, 0), 1.0, par) };
                // The probabilities' gradient for rows r0..r1, columns 0..r1: dy · vᵀ.
                // SAFETY: the scratch is T×T and owned here.
                unsafe { product(r1 - r0, r1, hs, ds.add(r0 * t), t, dy.at(r0, 0), v.t(), 1.0, par) };
                let rows = r0 * t..r1 * t;
                let block_mask = if mask.is_empty() { mask } else { &mask[base + rows.start..base + rows.end] };
                // SAFETY: rows r0..r1 of the scratch, no other reference to it alive.
                let g_rows = unsafe { std::slice::from_raw_parts_mut(ds.add(rows.start), rows.len()) };
                softmax_backward_rows(g_rows, &att[base + rows.start..base + rows.end], block_mask, t, r0, r1);
            }
            for (r0, r1) in g.blocks() {
                // dq[r0..r1] = scale · ds[r0..r1, 0..r1] · k[0..r1];
                // dk[r0..r1] = scale · dsᵀ[r0..r1, r0..T] · q[r0..T] (ds zero above the diagonal).
                // SAFETY: all inside their tensors and this head's columns of dqkv.
                unsafe {
                    product(r1 - r0, hs, r1, dq.add(r0 * c3), c3, ds_mat.at(r0, 0), k, scale, par);
                    product(r1 - r0, hs, t - r0, dk.add(r0 * c3), c3, ds_mat.t().at(r0, r0), q.at(r0, 0), scale, par);
                }
            }
        }
    }
    drop((dv_view, qkv_view, att_view, p_view, mask_view, ds_buf));
    // SAFETY: dq, dk and dv of every head and row were written.
    Some(cpu_tensor(unsafe { dqkv.into_vec() }, &[g.b * t, c3]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    fn randn(dims: &[usize], seed: u64) -> Tensor {
        let n: usize = dims.iter().product();
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let data: Vec<f32> = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(data, dims, &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        assert_eq!(a.dims(), b.dims());
        a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// The candle composition this module replaces: per-head q, k, v, masked softmax, p · v.
    fn reference(qkv: &Tensor, mask: Option<&Tensor>, g: Heads) -> (Tensor, Tensor) {
        let hs = g.hs();
        let x = qkv.reshape((g.b, g.t, 3, g.h, hs)).unwrap();
        let head = |i: usize| x.narrow(2, i, 1).unwrap().squeeze(2).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
        let (q, k, v) = (head(0), head(1), head(2));
        let scores = (q.matmul(&k.t().unwrap()).unwrap() * f64::from(g.scale())).unwrap();
        let causal: Vec<f32> = (0..g.t * g.t).map(|i| if i % g.t > i / g.t { f32::NEG_INFINITY } else { 0.0 }).collect();
        let causal = Tensor::from_vec(causal, (g.t, g.t), &Device::Cpu).unwrap().to_dtype(qkv.dtype()).unwrap();
        let att = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&causal).unwrap()).unwrap();
        let p = match mask {
            Some(m) => att.mul(m).unwrap(),
            None => att.clone(),
        };
        let y = p.matmul(&v).unwrap().transpose(1, 2).unwrap().contiguous().unwrap().reshape((g.b * g.t, g.c)).unwrap();
        (att, y)
    }

    /// Sum of (y · w) for a fixed random w: a scalar loss whose gradient w.r.t. y is w.
    fn loss(qkv: &Tensor, mask: Option<&Tensor>, w: &Tensor, g: Heads) -> f64 {
        let (_, y) = reference(
            &qkv.to_dtype(candle_core::DType::F64).unwrap(),
            mask.map(|m| m.to_dtype(candle_core::DType::F64).unwrap()).as_ref(),
            g,
        );
        y.mul(&w.to_dtype(candle_core::DType::F64).unwrap()).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap()
    }

    // T below, at and above BLOCK, and not a multiple of it, so diagonal and off-diagonal blocks
    // and a ragged last block all occur.
    const SHAPES: [Heads; 4] = [
        Heads { b: 2, t: 5, h: 2, c: 8 },
        Heads { b: 1, t: 64, h: 3, c: 12 },
        Heads { b: 2, t: 130, h: 2, c: 16 },
        Heads { b: 1, t: 200, h: 4, c: 64 },
    ];

    #[test]
    fn forward_matches_the_masked_softmax_composition() {
        for (i, g) in SHAPES.into_iter().enumerate() {
            let qkv = (randn(&[g.b * g.t, 3 * g.c], i as u64) * 3.0).unwrap();
            let (att_ref, y_ref) = reference(&qkv, None, g);
            let att = probabilities(&qkv, g).unwrap().unwrap();
            assert!(max_diff(&att, &att_ref) < 1e-5, "{g:?}: probabilities differ by {}", max_diff(&att, &att_ref));
            let y = values(&att, &qkv, g).unwrap().unwrap();
            assert!(max_diff(&y, &y_ref) < 1e-5, "{g:?}: outputs differ by {}", max_diff(&y, &y_ref));
        }
    }

    #[test]
    fn backward_matches_finite_differences_with_and_without_dropout() {
        for (i, g) in SHAPES.into_iter().take(3).enumerate() {
            let qkv = randn(&[g.b * g.t, 3 * g.c], 10 + i as u64);
            let w = randn(&[g.b * g.t, g.c], 20 + i as u64);
            // A dropout mask as model.rs draws it: 0 or 1/(1-p).
            let keep = randn(&[g.b, g.h, g.t, g.t], 30 + i as u64).ge(-0.6).unwrap().to_dtype(candle_core::DType::F32).unwrap();
            let keep = (keep / 0.8).unwrap();
            for mask in [None, Some(&keep)] {
                let att = probabilities(&qkv, g).unwrap().unwrap();
                let p = mask.map_or_else(|| att.clone(), |m| att.mul(m).unwrap());
                let dqkv = backward(&w, &qkv, &att, &p, mask, g).unwrap().unwrap();
                let dqkv: Vec<f32> = dqkv.flatten_all().unwrap().to_vec1().unwrap();
                let flat: Vec<f32> = qkv.flatten_all().unwrap().to_vec1().unwrap();
                let eps = 1e-3;
                // About 40 elements, an odd stride apart: a spread over q, k and v, rows and heads
                // (each costs two forwards of the f64 reference; 120 took 10 s of a test run).
                for e in (0..flat.len()).step_by((flat.len() / 40).max(1) | 1) {
                    let nudged = |d: f32| {
                        let mut v = flat.clone();
                        v[e] += d;
                        Tensor::from_vec(v, qkv.dims(), &Device::Cpu).unwrap()
                    };
                    let numeric = (loss(&nudged(eps), mask, &w, g) - loss(&nudged(-eps), mask, &w, g)) / (2.0 * f64::from(eps));
                    let got = f64::from(dqkv[e]);
                    assert!(
                        (got - numeric).abs() < 2e-3 * (1.0 + numeric.abs()),
                        "{g:?} mask {}: element {e}: {got} vs {numeric}",
                        mask.is_some()
                    );
                }
            }
        }
    }

    #[test]
    fn backward_matches_the_composition_at_long_blocks() {
        let g = SHAPES[3];
        let qkv = randn(&[g.b * g.t, 3 * g.c], 40);
        let dy = randn(&[g.b * g.t, g.c], 41);
        let att = probabilities(&qkv, g).unwrap().unwrap();
        let fused = backward(&dy, &qkv, &att, &att, None, g).unwrap().unwrap();
        // The composition's gradient through candle's own ops, by the chain rule written out.
        let (hs, scale) = (g.hs(), f64::from(g.scale()));
        let x = qkv.reshape((g.b, g.t, 3, g.h, hs)).unwrap();
        let head = |i: usize| x.narrow(2, i, 1).unwrap().squeeze(2).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
        let (q, k, v) = (head(0), head(1), head(2));
        let dyh = dy.reshape((g.b, g.t, g.h, hs)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap();
        let dv = att.t().unwrap().matmul(&dyh).unwrap();
        let datt = dyh.matmul(&v.t().unwrap()).unwrap();
        let dot = datt.mul(&att).unwrap().sum_keepdim(D::Minus1).unwrap();
        let ds = datt.broadcast_sub(&dot).unwrap().mul(&att).unwrap();
        let dq = (ds.matmul(&k).unwrap() * scale).unwrap();
        let dk = (ds.t().unwrap().matmul(&q).unwrap() * scale).unwrap();
        let merge = |t: Tensor| t.transpose(1, 2).unwrap().contiguous().unwrap().reshape((g.b, g.t, g.c)).unwrap();
        let want = Tensor::cat(&[&merge(dq), &merge(dk), &merge(dv)], 2).unwrap().reshape((g.b * g.t, 3 * g.c)).unwrap();
        assert!(max_diff(&fused, &want) < 1e-4, "differ by {}", max_diff(&fused, &want));
    }

    /// As in `fused.rs`: each wide build of the row kernels this CPU runs gives the baseline's bits.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn wide_and_baseline_row_kernels_agree_bit_for_bit() {
        let (t, first_row, width) = (70, 5, 16);
        let rows = |seed| randn(&[9, t], seed).flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for w in crate::fused::Wide::on_this_cpu("wide_and_baseline_row_kernels_agree_bit_for_bit") {
            let (mut wide, mut base) = (rows(3), rows(3));
            causal_softmax_rows::run(w, &mut wide, t, first_row);
            causal_softmax_rows_kernel(&mut base, t, first_row);
            assert_eq!(wide, base, "{w:?}");
            let (att, mask) = (wide, rows(4));
            let (mut wide, mut base) = (rows(5), rows(5));
            softmax_backward_rows::run(w, &mut wide, &att, &mask, t, first_row, width);
            softmax_backward_rows_kernel(&mut base, &att, &mask, t, first_row, width);
            assert_eq!(wide, base, "{w:?}");
        }
    }

    #[test]
    fn other_dtypes_and_shapes_take_the_plain_path() {
        let g = Heads { b: 1, t: 4, h: 2, c: 8 };
        let qkv = randn(&[4, 24], 1);
        assert!(probabilities(&qkv.to_dtype(candle_core::DType::F64).unwrap(), g).is_none());
        assert!(probabilities(&qkv, Heads { c: 7, ..g }).is_none());
        assert!(probabilities(&qkv, Heads { t: 3, ..g }).is_none());
        assert!(probabilities(&qkv.t().unwrap(), g).is_none());
    }
}
