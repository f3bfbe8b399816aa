//! Fused CPU kernels for the elementwise chains of the trainer's forward and backward.
//!
//! Written as candle ops, layer norm, the exact GELU's backward and the softmax backward each take
//! 4 to 10 passes over their tensors, with a fresh output tensor per pass. On CPU those passes,
//! not the matmuls, were half of a training step's time. Here each chain is one pass (two for layer
//! norm) that reads its inputs and writes only the tensors the caller keeps.
//!
//! Every function takes the fused path only for contiguous f32 tensors on the CPU and returns
//! `None` otherwise; the caller then runs the plain candle composition (f64 in the gradient check,
//! CUDA). Both paths compute the same formulas; `tests` below hold them to each other.
//! `core::trainer_model` follows the fused path's allocations, which are the ones measured.

#[cfg(feature = "cuda")]
use candle_core::CudaStorage;
use candle_core::{CpuStorage, DType, Device, InplaceOp2, InplaceOp3, Layout, Result, Storage, StorageRef, Tensor};
use gemm::Parallelism;
use std::mem::MaybeUninit;

/// A read view of a contiguous f32 tensor on the CPU (holds the storage's read lock).
pub(crate) struct F32View<'a> {
    storage: StorageRef<'a>,
    start: usize,
    end: usize,
}

impl F32View<'_> {
    pub(crate) fn slice(&self) -> &[f32] {
        match &*self.storage {
            Storage::Cpu(cpu) => cpu.as_slice::<f32>().map_or(&[][..], |all| &all[self.start..self.end]),
            _ => &[],
        }
    }
}

/// `t`'s elements, if it is a contiguous f32 tensor on the CPU.
pub(crate) fn view(t: &Tensor) -> Option<F32View<'_>> {
    if t.dtype() != DType::F32 || !t.device().is_cpu() {
        return None;
    }
    let (storage, layout) = t.storage_and_layout();
    let (start, end) = layout.contiguous_offsets()?;
    matches!(&*storage, Storage::Cpu(_)).then_some(F32View { storage, start, end })
}

pub(crate) fn cpu_tensor(data: Vec<f32>, dims: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(data, dims, &Device::Cpu)
}

/// Defines `$name`, which runs the `#[inline(always)]` function `$kernel` compiled for AVX-512 or
/// AVX2/FMA when the CPU has them. The default x86_64 target allows only SSE2, so without this
/// LLVM vectorizes the kernels' loops 4 lanes wide at most. The wide builds live in a module of
/// the same name (modules and functions do not share a namespace), where tests reach each one.
macro_rules! widened {
    ($name:ident => $kernel:ident ( $($arg:ident : $ty:ty),* )) => {
        #[cfg(target_arch = "x86_64")]
        mod $name {
            use super::*;
            #[target_feature(enable = "avx512f")]
            pub(super) fn avx512($($arg: $ty),*) {
                $kernel($($arg),*)
            }
            #[target_feature(enable = "avx2,fma")]
            pub(super) fn avx2($($arg: $ty),*) {
                $kernel($($arg),*)
            }
            /// The `wide` build; a test's call on a CPU without it panics instead of faulting.
            #[cfg(test)]
            pub(super) fn run(wide: $crate::fused::Wide, $($arg: $ty),*) {
                assert!(wide.detected(), "{wide:?} is not available on this CPU");
                match wide {
                    // SAFETY: the CPU has the instruction set (asserted just above).
                    $crate::fused::Wide::Avx512 => unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    $crate::fused::Wide::Avx2 => unsafe { avx2($($arg),*) },
                }
            }
        }
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked just above).
                    return unsafe { $name::avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { $name::avx2($($arg),*) };
                }
            }
            $kernel($($arg),*)
        }
    };
}

/// The wide builds `widened!` makes of a kernel, for tests that compare each with the baseline.
#[cfg(all(test, target_arch = "x86_64"))]
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wide {
    Avx512,
    Avx2,
}

#[cfg(all(test, target_arch = "x86_64"))]
impl Wide {
    pub(crate) fn detected(self) -> bool {
        match self {
            Wide::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            Wide::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
        }
    }

    /// The builds this CPU runs; with none, says so (`test` names the test): the dispatched
    /// kernels are then the baseline itself, and nothing is compared.
    pub(crate) fn on_this_cpu(test: &str) -> Vec<Wide> {
        let found: Vec<Wide> = [Wide::Avx512, Wide::Avx2].into_iter().filter(|w| w.detected()).collect();
        if found.is_empty() {
            println!("{test}: this CPU has neither AVX-512F nor AVX2+FMA: no wide kernel was compared with the baseline");
        }
        found
    }
}

pub(crate) use widened;

/// e^x in f32 without a library call, so loops over it vectorize: e^x = 2^n e^r with
/// n = round(x / ln 2) and |r| <= ln(2)/2, e^r by its Taylor series to degree 7 (truncation below
/// 1e-8 relative), 2^n built in the exponent bits. Below -87, where f32's normal range ends, the
/// result is 0; above 88 it is held at e^88.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two (Cody and Waite) so that n * LN2_HI is exact for the n that occur.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in plain float arithmetic.
    const ROUND: f32 = 12_582_912.0;
    let underflow = x < -87.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * LOG2_E + ROUND;
    let n = shifted - ROUND;
    // n as an integer, read from the mantissa bits of `shifted` (a float-to-int `as` cast would
    // check each lane for NaN and overflow and keep the loop from vectorizing).
    let n_int = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let e = p * f32::from_bits(((n_int + 127) as u32) << 23);
    if underflow {
        0.0
    } else {
        e
    }
}

/// erf(x) by Abramowitz and Stegun, Handbook of Mathematical Functions, formula 7.1.26 (absolute
/// error at most 1.5e-7 in exact arithmetic; in f32 about 6e-7 near x = 0.05, where 1 - poly * gauss
/// cancels: a GELU error of about 2e-7 at most), together with
/// the exp(-x^2) it uses, which the GELU's derivative needs too.
#[inline(always)]
#[allow(clippy::excessive_precision)] // the coefficients as published, rounded to f32 by the compiler
fn erf_and_gauss(x: f32) -> (f32, f32) {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [0.254_829_592, -0.284_496_736, 1.421_413_741, -1.453_152_027, 1.061_405_429];
    let ax = x.abs();
    let t = 1.0 / (1.0 + P * ax);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let gauss = exp_f32(-ax * ax);
    let erf_abs = 1.0 - poly * gauss;
    (erf_abs.copysign(x), gauss)
}

/// Phi(u), the standard normal CDF, and phi(u), its density.
#[inline(always)]
fn normal_cdf_pdf(u: f32) -> (f32, f32) {
    let (erf, gauss) = erf_and_gauss(u * std::f32::consts::FRAC_1_SQRT_2);
    // gauss = exp(-u^2 / 2); phi(u) = gauss / sqrt(2 pi).
    const INV_SQRT_TAU: f32 = 0.398_942_3; // 1 / sqrt(2 pi)
    (0.5 * (1.0 + erf), gauss * INV_SQRT_TAU)
}

#[inline(always)]
fn gelu_kernel(u: &[f32], out: &mut [MaybeUninit<f32>]) {
    for (o, &x) in out.iter_mut().zip(u) {
        o.write(x * normal_cdf_pdf(x).0);
    }
}
widened!(gelu_into => gelu_kernel(u: &[f32], out: &mut [MaybeUninit<f32>]));

#[inline(always)]
fn gelu_backward_kernel(g: &[f32], u: &[f32], out: &mut [MaybeUninit<f32>]) {
    for ((o, &g), &x) in out.iter_mut().zip(g).zip(u) {
        let (cdf, pdf) = normal_cdf_pdf(x);
        o.write(g * (cdf + x * pdf));
    }
}
widened!(gelu_backward_into => gelu_backward_kernel(g: &[f32], u: &[f32], out: &mut [MaybeUninit<f32>]));

/// The exact GELU, u * Phi(u) (PyTorch's `nn.GELU()`, which nanoGPT uses).
pub fn gelu(u: &Tensor) -> Option<Result<Tensor>> {
    let x = view(u)?;
    let mut out = Filled::new(x.slice().len());
    gelu_into(x.slice(), out.slots());
    // SAFETY: the kernel wrote every element.
    Some(cpu_tensor(unsafe { out.into_vec() }, u.dims()))
}

/// GELU's backward: dy * (Phi(u) + u * phi(u)).
pub fn gelu_backward(dy: &Tensor, u: &Tensor) -> Option<Result<Tensor>> {
    if dy.dims() != u.dims() {
        return None;
    }
    let (g, x) = (view(dy)?, view(u)?);
    let mut out = Filled::new(x.slice().len());
    gelu_backward_into(g.slice(), x.slice(), out.slots());
    // SAFETY: the kernel wrote every element.
    Some(cpu_tensor(unsafe { out.into_vec() }, u.dims()))
}

/// Folds `x` with `op` in 16 interleaved accumulators, then folds those: a reduction LLVM can
/// vectorize (a single running value is one long dependent chain). `op` must be associative
/// up to rounding (max, +).
#[inline(always)]
pub(crate) fn lanes(x: &[f32], init: f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a = op(*a, v);
        }
    }
    let mut out = tail.iter().fold(init, |a, &v| op(a, v));
    for a in acc {
        out = op(out, a);
    }
    out
}

/// Row r of `s` (rows of length t) gets the softmax of its first r mod t + 1 entries in `out`;
/// the rest of `out` stays zero.
#[inline(always)]
fn causal_softmax_kernel(s: &[f32], t: usize, out: &mut [f32]) {
    for (r, (row, o)) in s.chunks_exact(t).zip(out.chunks_exact_mut(t)).enumerate() {
        let seen = r % t + 1;
        let (row, o) = (&row[..seen], &mut o[..seen]);
        let max = lanes(row, f32::NEG_INFINITY, f32::max);
        for (y, &x) in o.iter_mut().zip(row) {
            *y = exp_f32(x - max);
        }
        let inv = 1.0 / lanes(o, 0.0, |a, b| a + b);
        for y in o.iter_mut() {
            *y *= inv;
        }
    }
}
widened!(causal_softmax_into => causal_softmax_kernel(s: &[f32], t: usize, out: &mut [f32]));

/// An f32 buffer that a kernel fills completely through raw pointers before anything
/// reads it, so it skips the zero-fill that `vec![0.0; n]` (and candle's matmul) pays.
pub(crate) struct Filled(Vec<MaybeUninit<f32>>);

impl Filled {
    pub(crate) fn new(len: usize) -> Filled {
        let mut v = Vec::with_capacity(len);
        // SAFETY: MaybeUninit needs no initialisation; the capacity is `len`.
        unsafe { v.set_len(len) };
        Filled(v)
    }

    pub(crate) fn slots(&mut self) -> &mut [MaybeUninit<f32>] {
        &mut self.0
    }

    pub(crate) fn ptr(&mut self) -> *mut f32 {
        self.0.as_mut_ptr().cast()
    }

    /// SAFETY: every element has been written.
    pub(crate) unsafe fn into_vec(self) -> Vec<f32> {
        let mut v = std::mem::ManuallyDrop::new(self.0);
        // SAFETY: same allocation, length and capacity; MaybeUninit<f32> has f32's layout, and the
        // caller guarantees every element is initialised.
        unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast(), v.len(), v.capacity()) }
    }
}

/// A strided read-only matrix: element (i, j) at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Mat {
    pub(crate) ptr: *const f32,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

impl Mat {
    /// The submatrix starting at row `i`, column `j`.
    pub(crate) fn at(self, i: usize, j: usize) -> Mat {
        // wrapping_offset: computing the address is safe; gemm reads only inside the tensor.
        Mat { ptr: self.ptr.wrapping_offset(i as isize * self.rs + j as isize * self.cs), ..self }
    }

    pub(crate) fn t(self) -> Mat {
        Mat { ptr: self.ptr, rs: self.cs, cs: self.rs }
    }
}

pub(crate) fn parallelism() -> Parallelism {
    match candle_core::utils::get_num_threads() {
        0 | 1 => Parallelism::None,
        n => Parallelism::Rayon(n),
    }
}

/// dst[m×n] (row stride `dst_rs`, unit column stride) = scale · lhs[m×k] · rhs[k×n], overwriting dst.
///
/// SAFETY: the three matrices lie inside live allocations for the given sizes and strides, and
/// dst overlaps neither input.
#[allow(clippy::too_many_arguments)] // the sizes, the destination and its stride, two operands: a thin wrapper of gemm's 19
pub(crate) unsafe fn product(m: usize, n: usize, k: usize, dst: *mut f32, dst_rs: usize, lhs: Mat, rhs: Mat, scale: f32, par: Parallelism) {
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: forwarded from the caller. gemm computes dst = alpha·dst + beta·lhs·rhs and, with
    // read_dst false, never reads dst.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            false,
            lhs.ptr,
            lhs.cs,
            lhs.rs,
            rhs.ptr,
            rhs.cs,
            rhs.rs,
            0.0,
            scale,
            false,
            false,
            false,
            par,
        )
    }
}

/// a · b for 2-D f32 CPU tensors of any strides (transposed views included), as candle's matmul
/// computes it (the same gemm call), into a fresh contiguous [m, n] tensor, without candle's
/// zero-fill of the output first. `None` for anything else; the caller then uses `Tensor::matmul`.
pub fn matmul(a: &Tensor, b: &Tensor) -> Option<Result<Tensor>> {
    let ((m, k), (k2, n)) = (a.dims2().ok()?, b.dims2().ok()?);
    if k != k2 || k == 0 {
        return None;
    }
    let (av, bv) = (strided_view(a)?, strided_view(b)?);
    let (lhs, rhs) = (av.0.mat(av.1), bv.0.mat(bv.1));
    let mut out = Filled::new(m * n);
    // SAFETY: lhs and rhs address only their tensors' elements (m×k and k×n under their strides);
    // out is m×n, contiguous, fresh.
    unsafe { product(m, n, k, out.ptr(), n, lhs, rhs, 1.0, parallelism()) };
    drop((av, bv));
    // SAFETY: gemm wrote all m×n elements.
    Some(cpu_tensor(unsafe { out.into_vec() }, &[m, n]))
}

/// A 2-D f32 CPU tensor's storage (read-locked) and its strides and start.
fn strided_view(t: &Tensor) -> Option<(F32View<'_>, (usize, [usize; 2]))> {
    if t.dtype() != DType::F32 || !t.device().is_cpu() || t.rank() != 2 {
        return None;
    }
    let (storage, layout) = t.storage_and_layout();
    let stride = layout.stride();
    let start = layout.start_offset();
    matches!(&*storage, Storage::Cpu(_)).then_some((F32View { storage, start, end: start }, (start, [stride[0], stride[1]])))
}

impl F32View<'_> {
    /// The matrix at `start` with row and column strides.
    fn mat(&self, (start, [rs, cs]): (usize, [usize; 2])) -> Mat {
        let all = match &*self.storage {
            Storage::Cpu(cpu) => cpu.as_slice::<f32>().unwrap_or(&[]),
            _ => &[],
        };
        Mat { ptr: all.as_ptr().wrapping_add(start), rs: rs as isize, cs: cs as isize }
    }
}

/// Softmax over the last dim of attention scores [.., T, T] with the causal mask applied: row i
/// (query position i mod T) sees keys 0..=i; the masked keys get probability 0. The same as adding
/// the -inf mask and taking the softmax, without the masked copy.
pub fn causal_softmax(scores: &Tensor) -> Option<Result<Tensor>> {
    let dims = scores.dims();
    let t = *dims.last()?;
    if dims.len() < 2 || dims[dims.len() - 2] != t || t == 0 {
        return None;
    }
    let s = view(scores)?;
    let s = s.slice();
    let mut out = vec![0f32; s.len()];
    causal_softmax_into(s, t, &mut out);
    Some(cpu_tensor(out, dims))
}

/// Softmax's backward along the last dim: att * (datt - sum(datt * att)) row by row.
pub fn softmax_backward(att: &Tensor, datt: &Tensor) -> Option<Result<Tensor>> {
    let dims = att.dims();
    let t = *dims.last()?;
    if datt.dims() != dims || t == 0 {
        return None;
    }
    let (a, g) = (view(att)?, view(datt)?);
    let (a, g) = (a.slice(), g.slice());
    let out = {
        let mut out = vec![0f32; a.len()];
        for ((a, g), o) in a.chunks_exact(t).zip(g.chunks_exact(t)).zip(out.chunks_exact_mut(t)) {
            let dot: f32 = a.iter().zip(g).map(|(a, g)| a * g).sum();
            for ((o, &a), &g) in o.iter_mut().zip(a).zip(g) {
                *o = a * (g - dot);
            }
        }
        out
    };
    Some(cpu_tensor(out, dims))
}

/// Layer norm's forward over the last dim of x [N, C]: y = xhat * w (+ b), with
/// xhat = (x - mean) * rstd and rstd = 1 / sqrt(var + eps) (biased variance, as PyTorch).
/// Returns y and, with `keep`, xhat [N, C] and rstd [N, 1] for the backward.
#[allow(clippy::type_complexity)]
pub fn layer_norm(x: &Tensor, w: &Tensor, b: Option<&Tensor>, eps: f32, keep: bool) -> Option<Result<(Tensor, Option<(Tensor, Tensor)>)>> {
    let (n, c) = x.dims2().ok()?;
    if w.dims() != [c] || b.is_some_and(|b| b.dims() != [c]) || c == 0 {
        return None;
    }
    let (xv, wv) = (view(x)?, view(w)?);
    let bv = match b {
        Some(b) => Some(view(b)?),
        None => None,
    };
    let (x, w, bias) = (xv.slice(), wv.slice(), bv.as_ref().map(F32View::slice));
    let mut y = Filled::new(n * c);
    let mut xhat = Filled::new(if keep { n * c } else { 0 });
    let mut rstds = if keep { vec![0f32; n] } else { Vec::new() };
    let xhat_slots = xhat.slots();
    for (r, (row, out)) in x.chunks_exact(c).zip(y.slots().chunks_exact_mut(c)).enumerate() {
        let mean = row.iter().sum::<f32>() / c as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / c as f32;
        let rstd = 1.0 / (var + eps).sqrt();
        for (j, (o, &v)) in out.iter_mut().zip(row).enumerate() {
            let h = (v - mean) * rstd;
            if keep {
                xhat_slots[r * c + j].write(h);
            }
            o.write(h * w[j] + bias.map_or(0.0, |b| b[j]));
        }
        if keep {
            rstds[r] = rstd;
        }
    }
    // SAFETY: every row of y (and with `keep`, of xhat) was written.
    let (y, xhat) = unsafe { (y.into_vec(), xhat.into_vec()) };
    let kept = keep.then_some((xhat, rstds));
    Some((|| {
        let y = cpu_tensor(y, &[n, c])?;
        let kept = match kept {
            Some((xhat, rstd)) => Some((cpu_tensor(xhat, &[n, c])?, cpu_tensor(rstd, &[n, 1])?)),
            None => None,
        };
        Ok((y, kept))
    })())
}

/// Layer norm's backward for dy [N, C] given the forward's xhat [N, C], rstd [N, 1] and weight
/// w \[C\]: (dx, dw, db). dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) * rstd with
/// dxhat = dy * w; dw = sum over rows of dy * xhat; db = sum over rows of dy.
#[allow(clippy::type_complexity)]
pub fn layer_norm_backward(
    dy: &Tensor,
    xhat: &Tensor,
    rstd: &Tensor,
    w: &Tensor,
    with_bias: bool,
) -> Option<Result<(Tensor, Tensor, Option<Tensor>)>> {
    let (n, c) = dy.dims2().ok()?;
    if xhat.dims() != [n, c] || rstd.dims() != [n, 1] || w.dims() != [c] || c == 0 {
        return None;
    }
    let (gv, hv, rv, wv) = (view(dy)?, view(xhat)?, view(rstd)?, view(w)?);
    let (dy, xhat, rstd, w) = (gv.slice(), hv.slice(), rv.slice(), wv.slice());
    let mut dx = Filled::new(n * c);
    let mut dw = vec![0f32; c];
    let mut db = if with_bias { vec![0f32; c] } else { Vec::new() };
    for (r, ((g, h), out)) in dy.chunks_exact(c).zip(xhat.chunks_exact(c)).zip(dx.slots().chunks_exact_mut(c)).enumerate() {
        let (mut sum_dxhat, mut sum_dxhat_xhat) = (0f32, 0f32);
        for j in 0..c {
            let d = g[j] * w[j];
            sum_dxhat += d;
            sum_dxhat_xhat += d * h[j];
            dw[j] += g[j] * h[j];
        }
        if with_bias {
            db.iter_mut().zip(g).for_each(|(s, &v)| *s += v);
        }
        let (m1, m2) = (sum_dxhat / c as f32, sum_dxhat_xhat / c as f32);
        for j in 0..c {
            out[j].write((g[j] * w[j] - m1 - h[j] * m2) * rstd[r]);
        }
    }
    drop((gv, hv, rv, wv));
    // SAFETY: every row of dx was written.
    let dx = unsafe { dx.into_vec() };
    Some((|| {
        let db = if with_bias { Some(cpu_tensor(db, &[c])?) } else { None };
        Ok((cpu_tensor(dx, &[n, c])?, cpu_tensor(dw, &[c])?, db))
    })())
}

/// AdamW's constants for one parameter at one step (see `optim.rs` for the formula).
#[derive(Clone, Copy, Debug)]
pub struct AdamWStep {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// 1 - lr * weight_decay for the decay group, 1 otherwise.
    pub decay: f32,
    /// lr / (1 - beta1^t).
    pub step_size: f32,
    /// sqrt(1 - beta2^t).
    pub bias_correction2_sqrt: f32,
}

/// The mutable f32 elements of `s` under layout `l`, if contiguous.
fn slice_mut<'a>(s: &'a mut CpuStorage, l: &Layout) -> Result<&'a mut [f32]> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("in-place AdamW needs contiguous tensors".into()))?;
    match s {
        CpuStorage::F32(v) => Ok(&mut v[start..end]),
        _ => candle_core::bail!("in-place AdamW needs f32 tensors"),
    }
}

fn slice<'a>(s: &'a CpuStorage, l: &Layout) -> Result<&'a [f32]> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("in-place AdamW needs contiguous tensors".into()))?;
    Ok(&s.as_slice::<f32>()?[start..end])
}

/// m <- beta m + (1 - beta) g, or with `square` v <- beta v + (1 - beta) g^2, in place.
struct MovingAverage {
    beta: f32,
    square: bool,
}

impl InplaceOp2 for MovingAverage {
    fn name(&self) -> &'static str {
        "adamw-moment"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<()> {
        let (avg, g) = (slice_mut(s1, l1)?, slice(s2, l2)?);
        let (beta, rest) = (self.beta, 1.0 - self.beta);
        if self.square {
            avg.iter_mut().zip(g).for_each(|(a, &g)| *a = beta * *a + rest * (g * g));
        } else {
            avg.iter_mut().zip(g).for_each(|(a, &g)| *a = beta * *a + rest * g);
        }
        Ok(())
    }

    /// The same arithmetic in one kernel (`cuda_kernels::ADAMW_SOURCE`).
    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &mut CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout) -> Result<()> {
        use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
        let ((a0, a1), (g0, g1)) = (cuda_range(l1)?, cuda_range(l2)?);
        let device = s1.device.clone();
        let func = crate::cuda_kernels::function(&device, "vramfit_adamw_moment")?;
        let g = s2.as_cuda_slice::<f32>()?.slice(g0..g1);
        let mut avg = s1.as_cuda_slice_mut::<f32>()?.slice_mut(a0..a1);
        let (n, beta, rest, square) = ((a1 - a0) as u64, self.beta, 1.0 - self.beta, i32::from(self.square));
        let stream = device.cuda_stream();
        let mut launch = stream.launch_builder(&func);
        launch.arg(&mut avg).arg(&g).arg(&n).arg(&beta).arg(&rest).arg(&square);
        // SAFETY: the arguments match the kernel's parameters; both views hold n f32 elements.
        unsafe { launch.launch(crate::cuda_kernels::launch_config(a1 - a0)) }.map_err(|e| candle_core::Error::Cuda(Box::new(e)))?;
        Ok(())
    }
}

/// A contiguous f32 tensor's element range in its CUDA storage.
#[cfg(feature = "cuda")]
fn cuda_range(l: &Layout) -> Result<(usize, usize)> {
    l.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("in-place AdamW needs contiguous tensors".into()))
}

/// p <- p * decay - step_size * m / (sqrt(v) / bias_correction2_sqrt + eps), in place.
struct AdamWUpdate(AdamWStep);

impl InplaceOp3 for AdamWUpdate {
    fn name(&self) -> &'static str {
        "adamw-update"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<()> {
        let (p, m, v) = (slice_mut(s1, l1)?, slice(s2, l2)?, slice(s3, l3)?);
        let AdamWStep { eps, decay, step_size, bias_correction2_sqrt, .. } = self.0;
        let inv_bc2 = 1.0 / bias_correction2_sqrt;
        for ((p, &m), &v) in p.iter_mut().zip(m).zip(v) {
            *p = *p * decay - step_size * (m / (v.sqrt() * inv_bc2 + eps));
        }
        Ok(())
    }

    /// The same arithmetic in one kernel (`cuda_kernels::ADAMW_SOURCE`).
    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &mut CudaStorage, l1: &Layout, s2: &CudaStorage, l2: &Layout, s3: &CudaStorage, l3: &Layout) -> Result<()> {
        use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
        let ((p0, p1), (m0, m1), (v0, v1)) = (cuda_range(l1)?, cuda_range(l2)?, cuda_range(l3)?);
        let AdamWStep { eps, decay, step_size, bias_correction2_sqrt, .. } = self.0;
        let inv_bc2 = 1.0 / bias_correction2_sqrt;
        let device = s1.device.clone();
        let func = crate::cuda_kernels::function(&device, "vramfit_adamw_update")?;
        let m = s2.as_cuda_slice::<f32>()?.slice(m0..m1);
        let v = s3.as_cuda_slice::<f32>()?.slice(v0..v1);
        let mut p = s1.as_cuda_slice_mut::<f32>()?.slice_mut(p0..p1);
        let n = (p1 - p0) as u64;
        let stream = device.cuda_stream();
        let mut launch = stream.launch_builder(&func);
        launch.arg(&mut p).arg(&m).arg(&v).arg(&n).arg(&decay).arg(&step_size).arg(&inv_bc2).arg(&eps);
        // SAFETY: the arguments match the kernel's parameters; the three views hold n f32 elements.
        unsafe { launch.launch(crate::cuda_kernels::launch_config(p1 - p0)) }.map_err(|e| candle_core::Error::Cuda(Box::new(e)))?;
        Ok(())
    }
}

/// One AdamW step for parameter `p` with gradient `g` and moments `m`, `v`, updating `p`, `m` and
/// `v` in place in three passes and allocating nothing, if all four are contiguous f32 tensors of
/// one shape on the CPU, or on CUDA in a build with `--features cuda` (three kernels:
/// `cuda_kernels`); `None` (nothing changed) otherwise.
pub fn adamw_step(p: &Tensor, g: &Tensor, m: &Tensor, v: &Tensor, k: AdamWStep) -> Option<Result<()>> {
    let on_cuda = |t: &Tensor| cfg!(feature = "cuda") && t.device().is_cuda() && t.dtype() == DType::F32 && t.is_contiguous();
    let fusable = |t: &Tensor| t.dims() == p.dims() && t.device().same_device(p.device()) && (view(t).is_some() || on_cuda(t));
    if !(fusable(p) && fusable(g) && fusable(m) && fusable(v)) {
        return None;
    }
    Some((|| {
        m.inplace_op2(g, &MovingAverage { beta: k.beta1, square: false })?;
        v.inplace_op2(g, &MovingAverage { beta: k.beta2, square: true })?;
        p.inplace_op3(m, v, &AdamWUpdate(k))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::D;

    fn randn(dims: &[usize], seed: u64) -> Tensor {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let data: Vec<f32> = (0..dims.iter().product::<usize>())
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 6.0
            })
            .collect();
        Tensor::from_vec(data, dims, &Device::Cpu).unwrap()
    }

    fn close(a: &Tensor, b: &Tensor, tol: f32) {
        assert_eq!(a.dims(), b.dims());
        let (a, b) = (a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "element {i}: fused {x} vs candle {y}");
        }
    }

    #[test]
    fn erf_matches_the_exact_function_within_its_f32_error() {
        // Reference values of erf from the f64 series sum_k (-1)^k x^(2k+1) / (k! (2k+1)) * 2/sqrt(pi),
        // on a fine grid (the f32 error peaks near x = 0.05).
        for i in -40_000..=40_000 {
            let x = i as f64 / 10_000.0;
            let (mut term, mut sum, mut k) = (x, x, 0.0);
            while term.abs() > 1e-17 && k < 200.0 {
                k += 1.0;
                term *= -x * x / k;
                sum += term / (2.0 * k + 1.0);
            }
            let exact = sum * 2.0 / std::f64::consts::PI.sqrt();
            let (fast, gauss) = erf_and_gauss(x as f32);
            assert!((fast as f64 - exact).abs() < 7e-7, "erf({x}): {fast} vs {exact}");
            assert!((gauss as f64 - (-x * x).exp()).abs() < 1e-6);
        }
    }

    #[test]
    fn exp_matches_the_library_function() {
        for i in -8700..=8800 {
            let x = i as f32 / 100.0;
            let (fast, exact) = (exp_f32(x) as f64, (x as f64).exp());
            assert!((fast - exact).abs() <= 4e-7 * exact, "exp({x}): {fast} vs {exact}");
        }
        // Below f32's normal range the result is exactly 0, so that x * e^x stays 0 too.
        assert_eq!(exp_f32(-90.0), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-1e4), 0.0);
    }

    #[test]
    fn gelu_and_its_backward_match_candles_exact_gelu() {
        let u = randn(&[7, 33], 1);
        let dy = randn(&[7, 33], 2);
        close(&gelu(&u).unwrap().unwrap(), &u.gelu_erf().unwrap(), 1e-6);
        // candle's composition of the derivative, as the trainer runs it off the fused path.
        let cdf = u.affine(std::f64::consts::FRAC_1_SQRT_2, 0.0).unwrap().erf().unwrap().affine(0.5, 0.5).unwrap();
        let pdf = u.sqr().unwrap().affine(-0.5, 0.0).unwrap().exp().unwrap().affine(1.0 / std::f64::consts::TAU.sqrt(), 0.0).unwrap();
        let want = dy.mul(&u.mul(&pdf).unwrap().add(&cdf).unwrap()).unwrap();
        close(&gelu_backward(&dy, &u).unwrap().unwrap(), &want, 1e-6);
    }

    /// Each wide build of the kernels this CPU runs (AVX-512, AVX2) gives the same bits as the
    /// same kernels compiled for the baseline target: no fused multiply-adds or reassociation are
    /// allowed, so vector width does not change any result.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn wide_and_baseline_kernels_agree_bit_for_bit() {
        let u = randn(&[5, 77], 11).flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let g = randn(&[5, 77], 12).flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let written = |kernel: &dyn Fn(&mut [MaybeUninit<f32>])| {
            let mut out = Filled::new(u.len());
            kernel(out.slots());
            // SAFETY: the kernels write every element.
            unsafe { out.into_vec() }
        };
        let t = 35;
        let s = randn(&[3, t, t], 13).flatten_all().unwrap().to_vec1::<f32>().unwrap();
        for w in Wide::on_this_cpu("wide_and_baseline_kernels_agree_bit_for_bit") {
            assert_eq!(written(&|o| gelu_into::run(w, &u, o)), written(&|o| gelu_kernel(&u, o)), "{w:?}");
            let backward = written(&|o| gelu_backward_into::run(w, &g, &u, o));
            assert_eq!(backward, written(&|o| gelu_backward_kernel(&g, &u, o)), "{w:?}");
            let (mut wide, mut base) = (vec![0f32; s.len()], vec![0f32; s.len()]);
            causal_softmax_into::run(w, &s, t, &mut wide);
            causal_softmax_kernel(&s, t, &mut base);
            assert_eq!(wide, base, "{w:?}");
        }
    }

    #[test]
    fn causal_softmax_equals_mask_then_softmax() {
        // Rows up to 40 long: longer than the 16 lanes of `lanes`, with a remainder.
        let t = 40;
        let scores = randn(&[2, 3, t, t], 3);
        let mask: Vec<f32> = (0..t * t).map(|i| if i % t > i / t { f32::NEG_INFINITY } else { 0.0 }).collect();
        let mask = Tensor::from_vec(mask, (t, t), &Device::Cpu).unwrap();
        let want = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&mask).unwrap()).unwrap();
        close(&causal_softmax(&scores).unwrap().unwrap(), &want, 1e-6);
    }

    #[test]
    fn softmax_backward_matches_the_composition() {
        let att = candle_nn::ops::softmax_last_dim(&randn(&[2, 2, 37, 37], 4)).unwrap();
        let datt = randn(&[2, 2, 37, 37], 5);
        let dot = datt.mul(&att).unwrap().sum_keepdim(D::Minus1).unwrap();
        let want = datt.broadcast_sub(&dot).unwrap().mul(&att).unwrap();
        close(&softmax_backward(&att, &datt).unwrap().unwrap(), &want, 1e-6);
    }

    #[test]
    fn layer_norm_forward_and_backward_match_the_composition() {
        let (n, c) = (6, 20);
        let x = randn(&[n, c], 6);
        let w = randn(&[c], 7);
        let b = randn(&[c], 8);
        let dy = randn(&[n, c], 9);
        let eps = 1e-5;
        let mean = x.mean_keepdim(D::Minus1).unwrap();
        let centred = x.broadcast_sub(&mean).unwrap();
        let rstd = centred.sqr().unwrap().mean_keepdim(D::Minus1).unwrap().affine(1.0, eps).unwrap().sqrt().unwrap().recip().unwrap();
        let xhat = centred.broadcast_mul(&rstd).unwrap();
        let y = xhat.broadcast_mul(&w).unwrap().broadcast_add(&b).unwrap();
        let (fy, kept) = layer_norm(&x, &w, Some(&b), eps as f32, true).unwrap().unwrap();
        let (fxhat, frstd) = kept.unwrap();
        close(&fy, &y, 1e-5);
        close(&fxhat, &xhat, 1e-5);
        close(&frstd, &rstd, 1e-5);
        let (fy_nokeep, none) = layer_norm(&x, &w, None, eps as f32, false).unwrap().unwrap();
        assert!(none.is_none());
        close(&fy_nokeep, &xhat.broadcast_mul(&w).unwrap(), 1e-5);

        let dxhat = dy.broadcast_mul(&w).unwrap();
        let m1 = dxhat.mean_keepdim(D::Minus1).unwrap();
        let m2 = dxhat.mul(&xhat).unwrap().mean_keepdim(D::Minus1).unwrap();
        let dx = dxhat.broadcast_sub(&m1).unwrap().sub(&xhat.broadcast_mul(&m2).unwrap()).unwrap().broadcast_mul(&rstd).unwrap();
        let (fdx, fdw, fdb) = layer_norm_backward(&dy, &xhat, &rstd, &w, true).unwrap().unwrap();
        close(&fdx, &dx, 1e-5);
        close(&fdw, &dy.mul(&xhat).unwrap().sum(0).unwrap(), 1e-5);
        close(&fdb.unwrap(), &dy.sum(0).unwrap(), 1e-5);
    }

    #[test]
    fn other_dtypes_and_shapes_take_the_plain_path() {
        let u64_ = randn(&[3, 4], 1).to_dtype(DType::F64).unwrap();
        assert!(gelu(&u64_).is_none());
        let strided = randn(&[4, 3], 2).t().unwrap();
        assert!(gelu(&strided).is_none());
        assert!(causal_softmax(&randn(&[2, 3], 3)).is_none());
        assert!(gelu_backward(&randn(&[2, 3], 1), &randn(&[3, 2], 2)).is_none());
    }
}
