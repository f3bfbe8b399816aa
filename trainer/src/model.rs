//! nanoGPT's GPT on candle, with a hand-written backward pass.
//!
//! Tour:
//! - [`Gpt::new`] builds the parameters with nanoGPT's names, order, shapes and initialisation
//!   (N(0, 0.02), residual projections N(0, 0.02/sqrt(2·n_layer)), zero biases, LayerNorm weights 1,
//!   `lm_head` tied to `wte`) from a host-seeded RNG: candle's CPU RNG cannot be seeded.
//! - [`Gpt::loss_and_grads`] runs one micro-step: forward, cross-entropy, backward, one gradient per
//!   parameter in [`Gpt::params`] order.
//! - [`Gpt::eval_loss`] and [`Gpt::next_logits`] run the forward only, keeping nothing.
//!
//! Why not candle's autograd: its graph keeps every op's inputs alive until the loss is dropped and
//! frees nothing during backward (see shared/notes/candle.md: backward peaks at 1.5-1.7x the retained
//! forward). Here every tensor's lifetime is explicit, as in PyTorch: each block's saved tensors die as
//! soon as that block's backward is done. That makes the memory both smaller and exactly predictable,
//! which `vramfit_core::trainer_model` does allocation by allocation; keep the two in step when
//! changing the order of operations here. The weights are used through detached tensors, so candle
//! records no graph at all. A finite-difference test checks every gradient.
//!
//! Memory savers, all optional ([`ModelOptions`]):
//! - activation checkpointing: the forward keeps only each block's input; the backward recomputes one
//!   block at a time;
//! - chunked loss: the logits exist for [`Gpt::loss_chunk_rows`] rows at a time, and the loss head's
//!   gradient is taken chunk by chunk during the forward, so B·T·V logits never exist at once;
//! - eval in chunks: `eval_loss` runs the forward over groups of whole sequences of at most
//!   `eval_chunk_rows` rows.

use candle_core::{DType, Device, Result, Tensor, Var, D};
use vramfit_core::Config;

/// Memory savers beyond nanoGPT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelOptions {
    pub activation_checkpointing: bool,
    pub chunked_loss: bool,
    /// Rows (sequences × positions) per eval forward; `None` = the whole eval batch at once.
    pub eval_chunk_rows: Option<usize>,
}

/// LayerNorm's epsilon in PyTorch's `F.layer_norm` default, which nanoGPT uses.
const LN_EPS: f64 = 1e-5;

/// Indices into the parameter list of one block's tensors.
#[derive(Clone, Copy, Debug)]
struct BlockParams {
    ln1_w: usize,
    ln1_b: Option<usize>,
    attn_w: usize,
    attn_b: Option<usize>,
    attn_proj_w: usize,
    attn_proj_b: Option<usize>,
    ln2_w: usize,
    ln2_b: Option<usize>,
    fc_w: usize,
    fc_b: Option<usize>,
    mlp_proj_w: usize,
    mlp_proj_b: Option<usize>,
}

/// The GPT: parameters (fp32 `Var`s) and the shape of the model.
pub struct Gpt {
    params: Vec<(String, Var)>,
    blocks: Vec<BlockParams>,
    ln_f_w: usize,
    ln_f_b: Option<usize>,
    n_head: usize,
    n_embd: usize,
    block_size: usize,
    vocab_size: usize,
    dropout: f64,
    opts: ModelOptions,
    /// Rows of logits alive at once with `chunked_loss`.
    loss_chunk_rows: usize,
    device: Device,
    /// The parameters' dtype (the master weights): F32 in training; F64 only in the gradient check.
    dtype: DType,
    /// What the linears, attention and GELU compute in: `dtype`, or BF16 / F16 for mixed precision
    /// (as PyTorch's autocast: weights cast per use, the residual stream, layer norms and the loss
    /// in `dtype`, parameter gradients returned in `dtype`).
    compute: DType,
}

/// A small seeded generator (SplitMix64, Steele, Lea and Flood 2014): reproducible on every device.
#[derive(Clone, Debug)]
pub struct HostRng(u64);

impl HostRng {
    pub fn new(seed: u64) -> HostRng {
        HostRng(seed)
    }
    /// The whole state: `HostRng::new(rng.state())` continues the same stream.
    pub fn state(&self) -> u64 {
        self.0
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // in (0, 1]: ln is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Everything one block's backward needs, saved by its forward.
struct BlockSaved {
    ln1: LnSaved,
    ln1_out: Tensor,
    /// What attention's backward reads of q, k and v.
    qkv: QkvSaved,
    /// Attention probabilities before dropout, [B, H, T, T].
    att: Tensor,
    att_drop_mask: Option<Tensor>,
    /// Heads merged back, the input of attn.c_proj, [N, C].
    heads: Tensor,
    resid1_mask: Option<Tensor>,
    ln2: LnSaved,
    ln2_out: Tensor,
    /// c_fc's output before GELU, [N, 4C].
    fc_out: Tensor,
    gelu_out: Tensor,
    resid2_mask: Option<Tensor>,
}

/// q, k and v as attention's backward reads them.
enum QkvSaved {
    /// c_attn's output [N, 3C], read in place by `attention.rs` (CPU, f32).
    Fused(Tensor),
    /// Per-head copies [B, H, T, hs], q already multiplied by 1/sqrt(head size) (candle ops).
    Heads { q_scaled: Tensor, k: Tensor, v: Tensor },
}

struct LnSaved {
    xhat: Tensor,
    rstd: Tensor,
}

/// Dropout masks for one forward: a site's mask depends only on (seed, site), so a recomputed block
/// draws the same mask as the original forward.
#[derive(Clone, Copy)]
struct DropoutDraw {
    p: f64,
    seed: u64,
    dtype: DType,
}

/// Site numbers: embedding is 0, block l uses 1 + 3l .. 3 + 3l.
fn site_seed(seed: u64, site: u64) -> u64 {
    let mut rng = HostRng::new(seed ^ site.wrapping_mul(0xA24B_AED4_963E_E407));
    rng.next_u64()
}

impl DropoutDraw {
    /// A mask of 0 and 1/(1-p), or `None` when dropout is off, on `near`'s device (its values are
    /// not read). On CUDA the GPU draws it (`dropout_cuda`), the same numbers as the host's.
    fn mask(&self, site: u64, shape: &[usize], near: &Tensor) -> Result<Option<Tensor>> {
        let Some(p) = (self.p > 0.0).then_some(self.p) else { return Ok(None) };
        let seed = site_seed(self.seed, site);
        let keep_scale = (1.0 / (1.0 - p)) as f32;
        let f32_mask = match crate::dropout_cuda::mask(near, seed, p, keep_scale, shape) {
            Some(on_gpu) => on_gpu?,
            None => {
                let mut rng = HostRng::new(seed);
                let n: usize = shape.iter().product();
                let data: Vec<f32> = (0..n).map(|_| if rng.uniform() < p { 0.0 } else { keep_scale }).collect();
                Tensor::from_vec(data, shape, near.device())?
            }
        };
        Ok(Some(f32_mask.to_dtype(self.dtype)?))
    }
}

fn mul_opt(x: Tensor, mask: &Option<Tensor>) -> Result<Tensor> {
    match mask {
        Some(m) => x.mul(m),
        None => Ok(x),
    }
}

/// `F.layer_norm` over the last dim of `x` [N, C]; returns the output and what backward needs.
fn ln_forward(x: &Tensor, w: &Tensor, b: Option<&Tensor>, keep: bool) -> Result<(Tensor, Option<LnSaved>)> {
    if let Some(fused) = crate::fused::layer_norm(x, w, b, LN_EPS as f32, keep) {
        let (y, kept) = fused?;
        return Ok((y, kept.map(|(xhat, rstd)| LnSaved { xhat, rstd })));
    }
    let mean = x.mean_keepdim(D::Minus1)?;
    let centred = x.broadcast_sub(&mean)?;
    drop(mean);
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    let rstd = var.affine(1.0, LN_EPS)?.sqrt()?.recip()?;
    drop(var);
    let xhat = centred.broadcast_mul(&rstd)?;
    drop(centred);
    let mut y = xhat.broadcast_mul(w)?;
    if let Some(b) = b {
        y = y.broadcast_add(b)?;
    }
    let saved = keep.then_some(LnSaved { xhat, rstd });
    Ok((y, saved))
}

/// LayerNorm's backward: (dx, dw, db).
fn ln_backward(dy: &Tensor, saved: &LnSaved, w: &Tensor, with_bias: bool) -> Result<(Tensor, Tensor, Option<Tensor>)> {
    if let Some(fused) = crate::fused::layer_norm_backward(dy, &saved.xhat, &saved.rstd, w, with_bias) {
        return fused;
    }
    let dw = dy.mul(&saved.xhat)?.sum(0)?;
    let db = if with_bias { Some(dy.sum(0)?) } else { None };
    let dxhat = dy.broadcast_mul(w)?;
    let mean_dxhat = dxhat.mean_keepdim(D::Minus1)?;
    let mean_dxhat_xhat = dxhat.mul(&saved.xhat)?.mean_keepdim(D::Minus1)?;
    let centred = dxhat.broadcast_sub(&mean_dxhat)?;
    drop(dxhat);
    let unscaled = centred.sub(&saved.xhat.broadcast_mul(&mean_dxhat_xhat)?)?;
    drop(centred);
    let dx = unscaled.broadcast_mul(&saved.rstd)?;
    drop(unscaled);
    Ok((dx, dw, db))
}

/// `x @ w^T (+ b)` for x [N, in], w [out, in].
/// a · b: gemm straight into the output on CPU f32 (`fused::matmul`), candle's matmul otherwise.
fn mm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    crate::fused::matmul(a, b).unwrap_or_else(|| a.matmul(b))
}

fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let y = mm(x, &w.t()?)?;
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// Linear's backward: (dx, dw, db) for y = x w^T + b.
fn linear_backward(dy: &Tensor, x: &Tensor, w: &Tensor, with_bias: bool) -> Result<(Tensor, Tensor, Option<Tensor>)> {
    let dw = mm(&dy.t()?, x)?;
    // A half-precision dy is summed in f32 (mixed precision: the bias gradient comes out in f32):
    // a 2-byte sum over B*T rows loses the gradient, and candle's CUDA reduction accumulates in
    // the input's dtype. f32 and f64 are summed as they are (no copy).
    let db = if with_bias {
        let sum_dtype = if matches!(dy.dtype(), DType::BF16 | DType::F16) { DType::F32 } else { dy.dtype() };
        Some(dy.to_dtype(sum_dtype)?.sum(0)?)
    } else {
        None
    };
    let dx = mm(dy, w)?;
    Ok((dx, dw, db))
}

/// d/du of the exact (erf) GELU: Phi(u) + u * phi(u).
fn gelu_backward(dy: &Tensor, u: &Tensor) -> Result<Tensor> {
    if let Some(fused) = crate::fused::gelu_backward(dy, u) {
        return fused;
    }
    let cdf = u.affine(std::f64::consts::FRAC_1_SQRT_2, 0.0)?.erf()?.affine(0.5, 0.5)?;
    let pdf = u.sqr()?.affine(-0.5, 0.0)?.exp()?.affine(1.0 / (std::f64::consts::TAU).sqrt(), 0.0)?;
    let u_pdf = u.mul(&pdf)?;
    drop(pdf);
    let slope = u_pdf.add(&cdf)?;
    drop((u_pdf, cdf));
    dy.mul(&slope)
}

/// Gradients of one block's parameters, in `BlockParams` order.
struct BlockGrads {
    ln1: (Tensor, Option<Tensor>),
    attn: (Tensor, Option<Tensor>),
    attn_proj: (Tensor, Option<Tensor>),
    ln2: (Tensor, Option<Tensor>),
    fc: (Tensor, Option<Tensor>),
    mlp_proj: (Tensor, Option<Tensor>),
}

impl Gpt {
    /// Builds the model with nanoGPT's initialisation from `seed`.
    pub fn new(cfg: &Config, opts: ModelOptions, device: &Device, seed: u64) -> Result<Gpt> {
        Gpt::new_with_dtype(cfg, opts, device, seed, DType::F32)
    }

    /// [`Gpt::new`] with F32 master weights computing in `compute` (BF16 or F16: mixed precision;
    /// F32: the plain model).
    pub fn new_mixed(cfg: &Config, opts: ModelOptions, device: &Device, seed: u64, compute: DType) -> Result<Gpt> {
        if !matches!(compute, DType::F32 | DType::BF16 | DType::F16) {
            candle_core::bail!("mixed precision computes in bf16 or f16, not {compute:?}");
        }
        Ok(Gpt { compute, ..Gpt::new_with_dtype(cfg, opts, device, seed, DType::F32)? })
    }

    /// The dtype the linears and attention compute in.
    pub fn compute_dtype(&self) -> DType {
        self.compute
    }

    /// [`Gpt::new`] with parameters and activations in `dtype` (F64 for gradient checks).
    pub fn new_with_dtype(cfg: &Config, opts: ModelOptions, device: &Device, seed: u64, dtype: DType) -> Result<Gpt> {
        if let Err(e) = cfg.validate() {
            candle_core::bail!("invalid model config: {e}");
        }
        let (l, c, v, t) = (cfg.n_layer as usize, cfg.n_embd as usize, cfg.vocab_size as usize, cfg.block_size as usize);
        let mut rng = HostRng::new(seed);
        let mut params: Vec<(String, Var)> = Vec::new();
        let proj_std = 0.02 / (2.0 * l as f64).sqrt();
        let mut add = |name: String, shape: &[usize], init: Init| -> Result<usize> {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = match init {
                Init::Normal(std) => (0..n).map(|_| (rng.normal() * std) as f32).collect(),
                Init::Ones => vec![1.0; n],
                Init::Zeros => vec![0.0; n],
            };
            let var = if dtype == DType::F32 {
                Var::from_vec(data, shape, device)?
            } else {
                Var::from_tensor(&Tensor::from_vec(data, shape, device)?.to_dtype(dtype)?)?
            };
            params.push((name, var));
            Ok(params.len() - 1)
        };
        add("transformer.wte.weight".into(), &[v, c], Init::Normal(0.02))?;
        add("transformer.wpe.weight".into(), &[t, c], Init::Normal(0.02))?;
        let mut blocks = Vec::with_capacity(l);
        for i in 0..l {
            let p = |s: &str| format!("transformer.h.{i}.{s}");
            let bias = |add: &mut AddParam, s: &str, n: usize| -> Result<Option<usize>> {
                if cfg.bias {
                    Ok(Some(add(p(s), &[n], Init::Zeros)?))
                } else {
                    Ok(None)
                }
            };
            let ln1_w = add(p("ln_1.weight"), &[c], Init::Ones)?;
            let ln1_b = bias(&mut add, "ln_1.bias", c)?;
            let attn_w = add(p("attn.c_attn.weight"), &[3 * c, c], Init::Normal(0.02))?;
            let attn_b = bias(&mut add, "attn.c_attn.bias", 3 * c)?;
            let attn_proj_w = add(p("attn.c_proj.weight"), &[c, c], Init::Normal(proj_std))?;
            let attn_proj_b = bias(&mut add, "attn.c_proj.bias", c)?;
            let ln2_w = add(p("ln_2.weight"), &[c], Init::Ones)?;
            let ln2_b = bias(&mut add, "ln_2.bias", c)?;
            let fc_w = add(p("mlp.c_fc.weight"), &[4 * c, c], Init::Normal(0.02))?;
            let fc_b = bias(&mut add, "mlp.c_fc.bias", 4 * c)?;
            let mlp_proj_w = add(p("mlp.c_proj.weight"), &[c, 4 * c], Init::Normal(proj_std))?;
            let mlp_proj_b = bias(&mut add, "mlp.c_proj.bias", c)?;
            blocks.push(BlockParams {
                ln1_w,
                ln1_b,
                attn_w,
                attn_b,
                attn_proj_w,
                attn_proj_b,
                ln2_w,
                ln2_b,
                fc_w,
                fc_b,
                mlp_proj_w,
                mlp_proj_b,
            });
        }
        let ln_f_w = add("transformer.ln_f.weight".into(), &[c], Init::Ones)?;
        let ln_f_b = if cfg.bias { Some(add("transformer.ln_f.bias".into(), &[c], Init::Zeros)?) } else { None };
        Ok(Gpt {
            params,
            blocks,
            ln_f_w,
            ln_f_b,
            n_head: cfg.n_head as usize,
            n_embd: c,
            block_size: t,
            vocab_size: v,
            dropout: cfg.dropout,
            opts,
            loss_chunk_rows: vramfit_core::trainer_model::loss_chunk_rows(cfg.vocab_size) as usize,
            device: device.clone(),
            dtype,
            compute: dtype,
        })
    }

    /// The parameters in nanoGPT's `named_parameters()` order and names (`lm_head.weight` is `wte`).
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.device.clone()
    }

    /// The first parameter holding a NaN or an infinity, if any (one sum per parameter: a NaN
    /// or an infinity anywhere makes it non-finite).
    pub fn first_non_finite_param(&self) -> candle_core::Result<Option<&str>> {
        for (name, var) in &self.params {
            let sum = var.as_tensor().sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()?;
            if !sum.is_finite() {
                return Ok(Some(name));
            }
        }
        Ok(None)
    }

    pub fn options(&self) -> ModelOptions {
        self.opts
    }

    /// Rows of logits computed at once by the chunked loss.
    pub fn loss_chunk_rows(&self) -> usize {
        self.loss_chunk_rows
    }

    /// Overrides the chunked loss's rows per chunk (tests use small chunks on small models).
    pub fn set_loss_chunk_rows(&mut self, rows: usize) {
        self.loss_chunk_rows = rows.max(1);
    }

    fn w(&self, i: usize) -> Tensor {
        self.params[i].1.as_detached_tensor()
    }

    fn wo(&self, i: Option<usize>) -> Option<Tensor> {
        i.map(|i| self.w(i))
    }

    /// Parameter `i` in the compute dtype: the master tensor itself, or (mixed precision) a cast
    /// copy that lives only for the op that uses it.
    fn wc(&self, i: usize) -> Result<Tensor> {
        self.w(i).to_dtype(self.compute)
    }

    fn wco(&self, i: Option<usize>) -> Result<Option<Tensor>> {
        i.map(|i| self.wc(i)).transpose()
    }

    /// `t` in the compute dtype (no copy when it already is).
    fn to_compute(&self, t: Tensor) -> Result<Tensor> {
        t.to_dtype(self.compute)
    }

    /// `t` in the master dtype (no copy when it already is).
    fn to_master(&self, t: Tensor) -> Result<Tensor> {
        t.to_dtype(self.dtype)
    }

    /// Linear's gradients (in the compute dtype) as the master dtype's.
    fn grads_to_master(&self, (dw, db): (Tensor, Option<Tensor>)) -> Result<(Tensor, Option<Tensor>)> {
        Ok((self.to_master(dw)?, db.map(|b| self.to_master(b)).transpose()?))
    }

    /// Checks idx/targets shapes and returns (B, T).
    fn batch_dims(&self, idx: &Tensor) -> Result<(usize, usize)> {
        let (b, t) = idx.dims2()?;
        if t == 0 || t > self.block_size {
            candle_core::bail!("sequence length {t} must be in 1..={}", self.block_size);
        }
        if b == 0 {
            candle_core::bail!("empty batch");
        }
        Ok((b, t))
    }

    /// Token + position embedding (then dropout): [B*T, C].
    fn embed(&self, idx: &Tensor, dropout: Option<DropoutDraw>) -> Result<Tensor> {
        let (b, t) = self.batch_dims(idx)?;
        let flat = idx.flatten_all()?;
        let tok = self.w(0).index_select(&flat, 0)?.reshape((b, t, self.n_embd))?;
        let pos = self.w(1).narrow(0, 0, t)?;
        let x = tok.broadcast_add(&pos)?;
        drop(tok);
        let x = x.reshape((b * t, self.n_embd))?;
        let mask = match dropout {
            Some(d) => d.mask(0, &[b * t, self.n_embd], &x)?,
            None => None,
        };
        mul_opt(x, &mask)
    }

    /// The causal mask added to attention scores: 0 on and below the diagonal, -inf above.
    fn causal_mask(&self, t: usize) -> Result<Tensor> {
        let data: Vec<f32> = (0..t * t).map(|i| if i % t > i / t { f32::NEG_INFINITY } else { 0.0 }).collect();
        Tensor::from_vec(data, (t, t), &self.device)?.to_dtype(self.compute)
    }

    /// One block's forward for x [B*T, C]; saves what backward needs when `keep`.
    fn block_forward(
        &self,
        layer: usize,
        x: &Tensor,
        (b, t): (usize, usize),
        mask: &Tensor,
        dropout: Option<DropoutDraw>,
        keep: bool,
    ) -> Result<(Tensor, Option<BlockSaved>)> {
        let bp = self.blocks[layer];
        let (c, h) = (self.n_embd, self.n_head);
        let site = 1 + 3 * layer as u64;
        // The block's dropout masks multiply compute-dtype tensors.
        let dropout = dropout.map(|d| DropoutDraw { dtype: self.compute, ..d });
        let draw = |s: u64, shape: &[usize]| -> Result<Option<Tensor>> {
            match dropout {
                Some(d) => d.mask(s, shape, x),
                None => Ok(None),
            }
        };

        let (ln1_out, ln1) = ln_forward(x, &self.w(bp.ln1_w), self.wo(bp.ln1_b).as_ref(), keep)?;
        // Mixed precision: the cast copy is what c_attn reads and its backward keeps.
        let ln1_out = self.to_compute(ln1_out)?;
        let qkv = linear(&ln1_out, &self.wc(bp.attn_w)?, self.wco(bp.attn_b)?.as_ref())?;
        let geometry = crate::attention::Heads { b, t, h, c };
        let (qkv, att, att_drop_mask, heads) = match crate::attention::probabilities(&qkv, geometry) {
            Some(att) => {
                let att = att?;
                let att_drop_mask = draw(site, &[b, h, t, t])?;
                let dropped = att_drop_mask.as_ref().map(|m| att.mul(m)).transpose()?;
                let heads = crate::attention::values(dropped.as_ref().unwrap_or(&att), &qkv, geometry)
                    .ok_or_else(|| candle_core::Error::Msg("fused attention: probabilities and values disagree on the layout".into()))??;
                drop(dropped);
                (QkvSaved::Fused(qkv), att, att_drop_mask, heads)
            }
            // The dropout mask is drawn once the probabilities exist, as core models it.
            None => self.attention_plain(qkv, (b, t), mask, || draw(site, &[b, h, t, t]))?,
        };
        let proj = linear(&heads, &self.wc(bp.attn_proj_w)?, self.wco(bp.attn_proj_b)?.as_ref())?;
        let resid1_mask = draw(site + 1, &[b * t, c])?;
        let x1 = x.add(&self.to_master(mul_opt(proj, &resid1_mask)?)?)?;

        let (ln2_out, ln2) = ln_forward(&x1, &self.w(bp.ln2_w), self.wo(bp.ln2_b).as_ref(), keep)?;
        let ln2_out = self.to_compute(ln2_out)?;
        let fc_out = linear(&ln2_out, &self.wc(bp.fc_w)?, self.wco(bp.fc_b)?.as_ref())?;
        let gelu_out = match crate::fused::gelu(&fc_out) {
            Some(fused) => fused?,
            None => fc_out.gelu_erf()?,
        };
        let mlp = linear(&gelu_out, &self.wc(bp.mlp_proj_w)?, self.wco(bp.mlp_proj_b)?.as_ref())?;
        let resid2_mask = draw(site + 2, &[b * t, c])?;
        let x2 = x1.add(&self.to_master(mul_opt(mlp, &resid2_mask)?)?)?;
        let saved = match (keep, ln1, ln2) {
            (true, Some(ln1), Some(ln2)) => {
                Some(BlockSaved { ln1, ln1_out, qkv, att, att_drop_mask, heads, resid1_mask, ln2, ln2_out, fc_out, gelu_out, resid2_mask })
            }
            _ => None,
        };
        Ok((x2, saved))
    }

    /// Attention as candle ops (f64, CUDA): per-head copies of q, k and v out of qkv [N, 3C],
    /// masked softmax, p · v, heads merged. Returns what the block saves and the merged heads [N, C].
    fn attention_plain(
        &self,
        qkv: Tensor,
        (b, t): (usize, usize),
        mask: &Tensor,
        draw_mask: impl FnOnce() -> Result<Option<Tensor>>,
    ) -> Result<(QkvSaved, Tensor, Option<Tensor>, Tensor)> {
        let (c, h) = (self.n_embd, self.n_head);
        let hs = c / h;
        let reshaped = qkv.reshape((b, t, 3, h, hs))?;
        // Only the view keeps the storage now, so `drop(qkv)` below frees it.
        drop(qkv);
        let qkv = reshaped;
        let head = |i: usize| -> Result<Tensor> { qkv.narrow(2, i, 1)?.squeeze(2)?.transpose(1, 2)?.contiguous() };
        let q = head(0)?;
        let q_scaled = q.affine(1.0 / (hs as f64).sqrt(), 0.0)?;
        drop(q);
        let k = head(1)?;
        let v = head(2)?;
        drop(qkv);
        let scores = q_scaled.matmul(&k.t()?)?;
        let att = match crate::fused::causal_softmax(&scores) {
            Some(att) => {
                drop(scores);
                att?
            }
            None => {
                let masked = scores.broadcast_add(mask)?;
                drop(scores);
                candle_nn::ops::softmax_last_dim(&masked)?
            }
        };
        let att_drop_mask = draw_mask()?;
        let y = match &att_drop_mask {
            Some(m) => att.mul(m)?.matmul(&v)?,
            None => att.matmul(&v)?,
        };
        let heads = y.transpose(1, 2)?.contiguous()?.reshape((b * t, c))?;
        drop(y);
        Ok((QkvSaved::Heads { q_scaled, k, v }, att, att_drop_mask, heads))
    }

    /// The backward of [`Gpt::attention_plain`]: d(qkv) [N, 3C] from d(heads) [N, C].
    fn attention_plain_backward(
        dheads: Tensor,
        q_scaled: &Tensor,
        k: &Tensor,
        v: &Tensor,
        att: &Tensor,
        att_drop_mask: Option<&Tensor>,
        (b, t, h, hs): (usize, usize, usize, usize),
    ) -> Result<Tensor> {
        let c = h * hs;
        let dy = dheads.reshape((b, t, h, hs))?.transpose(1, 2)?.contiguous()?;
        drop(dheads);
        let dv = match att_drop_mask {
            Some(m) => att.mul(m)?.t()?.matmul(&dy)?,
            None => att.t()?.matmul(&dy)?,
        };
        let datt = dy.matmul(&v.t()?)?;
        // The unmasked gradient goes as soon as the masked one exists (a shadowed binding would
        // keep it to the end of this function: one [B, H, T, T] tensor more at the backward's
        // peak, 360 MiB for GPT-2 124M at batch 16 in bf16, found on an H100).
        let datt = match att_drop_mask {
            Some(m) => {
                let masked = datt.mul(m)?;
                drop(datt);
                masked
            }
            None => datt,
        };
        drop(dy);
        // Softmax backward: ds = att * (datt - sum(datt * att, -1)).
        let ds = match crate::fused::softmax_backward(att, &datt) {
            Some(ds) => {
                drop(datt);
                ds?
            }
            None => {
                let row_dot = datt.mul(att)?.sum_keepdim(D::Minus1)?;
                let centred = datt.broadcast_sub(&row_dot)?;
                drop((datt, row_dot));
                centred.mul(att)?
            }
        };
        let dq = ds.matmul(k)?.affine(1.0 / (hs as f64).sqrt(), 0.0)?;
        let dk = ds.t()?.matmul(q_scaled)?;
        drop(ds);
        let merge = |g: Tensor| -> Result<Tensor> { g.transpose(1, 2)?.contiguous()?.reshape((b, t, c)) };
        let (dq, dk, dv) = (merge(dq)?, merge(dk)?, merge(dv)?);
        let dqkv = Tensor::cat(&[&dq, &dk, &dv], 2)?.reshape((b * t, 3 * c))?;
        drop((dq, dk, dv));
        Ok(dqkv)
    }

    /// One block's backward: gradient w.r.t. its input, and its parameters' gradients.
    fn block_backward(&self, layer: usize, x: &Tensor, s: BlockSaved, dx2: Tensor, b: usize, t: usize) -> Result<(Tensor, BlockGrads)> {
        let bp = self.blocks[layer];
        let (c, h) = (self.n_embd, self.n_head);
        let hs = c / h;
        let _ = x;
        // MLP branch.
        let dmlp = mul_opt(self.to_compute(dx2.clone())?, &s.resid2_mask)?;
        let (dgelu, dw, db) = linear_backward(&dmlp, &s.gelu_out, &self.wc(bp.mlp_proj_w)?, bp.mlp_proj_b.is_some())?;
        let mlp_proj = self.grads_to_master((dw, db))?;
        drop(dmlp);
        let dfc = gelu_backward(&dgelu, &s.fc_out)?;
        drop(dgelu);
        let (dln2, dw, db) = linear_backward(&dfc, &s.ln2_out, &self.wc(bp.fc_w)?, bp.fc_b.is_some())?;
        let fc = self.grads_to_master((dw, db))?;
        drop(dfc);
        let dln2 = self.to_master(dln2)?;
        let (dx1_ln, dw, db) = ln_backward(&dln2, &s.ln2, &self.w(bp.ln2_w), bp.ln2_b.is_some())?;
        drop(dln2);
        let ln2 = (dw, db);
        let dx1 = dx2.add(&dx1_ln)?;
        drop((dx2, dx1_ln));

        // Attention branch.
        let dproj = mul_opt(self.to_compute(dx1.clone())?, &s.resid1_mask)?;
        let (dheads, dw, db) = linear_backward(&dproj, &s.heads, &self.wc(bp.attn_proj_w)?, bp.attn_proj_b.is_some())?;
        let attn_proj = self.grads_to_master((dw, db))?;
        drop(dproj);
        let dqkv = match &s.qkv {
            QkvSaved::Fused(qkv) => {
                let geometry = crate::attention::Heads { b, t, h, c };
                let dropped = s.att_drop_mask.as_ref().map(|m| s.att.mul(m)).transpose()?;
                let p = dropped.as_ref().unwrap_or(&s.att);
                let dqkv = crate::attention::backward(&dheads, qkv, &s.att, p, s.att_drop_mask.as_ref(), geometry)
                    .ok_or_else(|| candle_core::Error::Msg("fused attention: the backward's layouts differ from the forward's".into()))??;
                drop((dropped, dheads));
                dqkv
            }
            QkvSaved::Heads { q_scaled, k, v } => {
                Self::attention_plain_backward(dheads, q_scaled, k, v, &s.att, s.att_drop_mask.as_ref(), (b, t, h, hs))?
            }
        };
        let (dln1, dw, db) = linear_backward(&dqkv, &s.ln1_out, &self.wc(bp.attn_w)?, bp.attn_b.is_some())?;
        let attn = self.grads_to_master((dw, db))?;
        drop(dqkv);
        let dln1 = self.to_master(dln1)?;
        let (dx_ln, dw, db) = ln_backward(&dln1, &s.ln1, &self.w(bp.ln1_w), bp.ln1_b.is_some())?;
        drop(dln1);
        let ln1 = (dw, db);
        let dx = dx1.add(&dx_ln)?;
        Ok((dx, BlockGrads { ln1, attn, attn_proj, ln2, fc, mlp_proj }))
    }

    /// The loss head on the final hidden state x [N, C]: ln_f, logits in chunks of `chunk_rows`,
    /// mean cross-entropy. With `grads`, also returns d(loss)/dx and the gradients of wte and ln_f,
    /// taken chunk by chunk so only one chunk's logits are ever alive, all multiplied by
    /// `loss_scale` (f16's loss scaling; 1 otherwise). Mixed precision: the logits are computed in
    /// the compute dtype and the softmax and cross-entropy in the master dtype, as autocast does.
    #[allow(clippy::type_complexity)]
    fn head(
        &self,
        x: &Tensor,
        targets: &Tensor,
        chunk_rows: usize,
        grads: bool,
        loss_scale: f64,
    ) -> Result<(f64, Option<(Tensor, Tensor, Tensor, Option<Tensor>)>)> {
        let n = x.dim(0)?;
        let targets = targets.flatten_all()?;
        if targets.dim(0)? != n {
            candle_core::bail!("targets have {} positions, the batch has {n}", targets.dim(0)?);
        }
        let wte = self.wc(0)?;
        let (hf, ln_saved) = ln_forward(x, &self.w(self.ln_f_w), self.wo(self.ln_f_b).as_ref(), grads)?;
        let hf = self.to_compute(hf)?;
        let mut loss_sum = 0f64;
        let mut dh_chunks: Vec<Tensor> = Vec::new();
        let mut dwte: Option<Tensor> = None;
        let inv_n = 1.0 / n as f64;
        let grad_scale = inv_n * loss_scale;
        let mut start = 0;
        while start < n {
            let rows = chunk_rows.min(n - start);
            let h = hf.narrow(0, start, rows)?;
            let tgt = targets.narrow(0, start, rows)?.unsqueeze(1)?;
            let logits = self.to_master(mm(&h, &wte.t()?)?)?;
            let probs = candle_nn::ops::softmax_last_dim(&logits)?;
            drop(logits);
            let p_target = probs.gather(&tgt, 1)?;
            // -log p(target), floored at p = 1e-30 so an underflowed probability gives a large finite loss.
            let nll = p_target.clamp(1e-30f32, 1f32)?.log()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            loss_sum -= nll;
            if grads {
                // d(mean CE)/dlogits = (softmax - onehot) / N (times the loss scale).
                let minus_one = Tensor::full(-1f32, (rows, 1), &self.device)?.to_dtype(self.dtype)?;
                probs.scatter_add_set(&tgt, &minus_one, 1)?;
                let part = if self.compute == self.dtype {
                    // The 1/N is applied on the small side: dh and h are [rows, C], dlogits [rows, V].
                    let dlogits = probs;
                    dh_chunks.push(mm(&dlogits, &wte)?.affine(grad_scale, 0.0)?);
                    let h_scaled = h.affine(grad_scale, 0.0)?;
                    let part = mm(&dlogits.t()?, &h_scaled)?;
                    drop((dlogits, h_scaled));
                    part
                } else {
                    // Mixed precision: scaled in f32 before the cast, so the loss scale protects
                    // dlogits' small entries from f16's underflow too.
                    let scaled = probs.affine(grad_scale, 0.0)?;
                    drop(probs);
                    let dlogits = self.to_compute(scaled)?;
                    dh_chunks.push(mm(&dlogits, &wte)?);
                    let part = self.to_master(mm(&dlogits.t()?, &h)?)?;
                    drop(dlogits);
                    part
                };
                dwte = Some(match dwte {
                    Some(sum) => sum.add(&part)?,
                    None => part,
                });
            }
            start += rows;
        }
        let loss = loss_sum * inv_n;
        if !grads {
            return Ok((loss, None));
        }
        let dh = if dh_chunks.len() == 1 { dh_chunks.pop().unwrap_or_else(|| unreachable!()) } else { Tensor::cat(&dh_chunks, 0)? };
        drop(dh_chunks);
        let dh = self.to_master(dh)?;
        let ln_saved = ln_saved.ok_or_else(|| candle_core::Error::Msg("ln_f saved tensors missing".into()))?;
        let (dx, dw, db) = ln_backward(&dh, &ln_saved, &self.w(self.ln_f_w), self.ln_f_b.is_some())?;
        let dwte = dwte.ok_or_else(|| candle_core::Error::Msg("empty batch".into()))?;
        Ok((loss, Some((dx, dwte, dw, db))))
    }

    /// One micro-step: mean cross-entropy of `targets` given `idx` (both [B, T] u32) and one
    /// gradient per parameter, in [`Gpt::params`] order. Dropout masks come from `dropout_seed`.
    pub fn loss_and_grads(&self, idx: &Tensor, targets: &Tensor, dropout_seed: u64) -> Result<(f32, Vec<Tensor>)> {
        self.loss_and_grads_scaled(idx, targets, dropout_seed, 1.0)
    }

    /// [`Gpt::loss_and_grads`] with every gradient multiplied by `loss_scale` (f16 training's loss
    /// scaling, which keeps small gradients representable; the caller divides it back out).
    pub fn loss_and_grads_scaled(&self, idx: &Tensor, targets: &Tensor, dropout_seed: u64, loss_scale: f64) -> Result<(f32, Vec<Tensor>)> {
        let (b, t) = self.batch_dims(idx)?;
        let n = b * t;
        let drop_draw = (self.dropout > 0.0).then_some(DropoutDraw { p: self.dropout, seed: dropout_seed, dtype: self.dtype });
        let mask = self.causal_mask(t)?;
        let ckpt = self.opts.activation_checkpointing;

        // Forward: block inputs always; saved tensors only without checkpointing.
        let mut inputs: Vec<Tensor> = Vec::with_capacity(self.blocks.len());
        let mut saved: Vec<Option<BlockSaved>> = Vec::with_capacity(self.blocks.len());
        let mut x = self.embed(idx, drop_draw)?;
        for layer in 0..self.blocks.len() {
            let (out, s) = self.block_forward(layer, &x, (b, t), &mask, drop_draw, !ckpt)?;
            inputs.push(x);
            saved.push(s);
            x = out;
        }
        let chunk = if self.opts.chunked_loss { self.loss_chunk_rows } else { n };
        let (loss, head_grads) = self.head(&x, targets, chunk, true, loss_scale)?;
        drop(x);
        let (mut dx, dwte_head, dln_f_w, dln_f_b) = head_grads.ok_or_else(|| candle_core::Error::Msg("no head gradients".into()))?;

        let mut grads: Vec<Option<Tensor>> = vec![None; self.params.len()];
        grads[self.ln_f_w] = Some(dln_f_w);
        if let (Some(i), Some(g)) = (self.ln_f_b, dln_f_b) {
            grads[i] = Some(g);
        }
        for layer in (0..self.blocks.len()).rev() {
            let input = inputs.pop().ok_or_else(|| candle_core::Error::Msg("block input missing".into()))?;
            let s = match saved.pop().flatten() {
                Some(s) => s,
                None => {
                    let (out, s) = self.block_forward(layer, &input, (b, t), &mask, drop_draw, true)?;
                    drop(out);
                    s.ok_or_else(|| candle_core::Error::Msg("recompute saved nothing".into()))?
                }
            };
            let (dinput, g) = self.block_backward(layer, &input, s, dx, b, t)?;
            dx = dinput;
            drop(input);
            let bp = self.blocks[layer];
            let mut put = |w: usize, bias: Option<usize>, (gw, gb): (Tensor, Option<Tensor>)| {
                grads[w] = Some(gw);
                if let (Some(i), Some(g)) = (bias, gb) {
                    grads[i] = Some(g);
                }
            };
            put(bp.ln1_w, bp.ln1_b, g.ln1);
            put(bp.attn_w, bp.attn_b, g.attn);
            put(bp.attn_proj_w, bp.attn_proj_b, g.attn_proj);
            put(bp.ln2_w, bp.ln2_b, g.ln2);
            put(bp.fc_w, bp.fc_b, g.fc);
            put(bp.mlp_proj_w, bp.mlp_proj_b, g.mlp_proj);
        }
        drop(mask);

        // Embedding backward: dropout, then position rows and token rows.
        let demb = match drop_draw.map(|d| d.mask(0, &[n, self.n_embd], &dx)).transpose()?.flatten() {
            Some(mask) => {
                let masked = dx.mul(&mask)?;
                drop((dx, mask));
                masked
            }
            None => dx,
        };
        let dpos = demb.reshape((b, t, self.n_embd))?.sum(0)?;
        grads[1] = Some(if t < self.block_size { dpos.pad_with_zeros(0, 0, self.block_size - t)? } else { dpos });
        let flat = idx.flatten_all()?;
        let dwte = dwte_head.index_add(&flat, &demb, 0)?;
        drop((dwte_head, demb));
        grads[0] = Some(dwte);

        let grads = grads
            .into_iter()
            .enumerate()
            .map(|(i, g)| g.ok_or_else(|| candle_core::Error::Msg(format!("no gradient for {}", self.params[i].0))))
            .collect::<Result<Vec<_>>>()?;
        Ok((loss as f32, grads))
    }

    /// Forward through the blocks with no saved tensors and no dropout: final hidden state [B*T, C].
    fn forward_hidden(&self, idx: &Tensor) -> Result<Tensor> {
        self.forward_hidden_with(idx, None)
    }

    fn forward_hidden_with(&self, idx: &Tensor, dropout: Option<DropoutDraw>) -> Result<Tensor> {
        let (b, t) = self.batch_dims(idx)?;
        let mask = self.causal_mask(t)?;
        let mut x = self.embed(idx, dropout)?;
        for layer in 0..self.blocks.len() {
            x = self.block_forward(layer, &x, (b, t), &mask, dropout, false)?.0;
        }
        Ok(x)
    }

    /// The training loss (with dropout from `dropout_seed`) in f64, without gradients: the
    /// function the gradient check differentiates numerically.
    #[cfg(test)]
    fn train_loss_f64(&self, idx: &Tensor, targets: &Tensor, dropout_seed: u64) -> Result<f64> {
        let draw = (self.dropout > 0.0).then_some(DropoutDraw { p: self.dropout, seed: dropout_seed, dtype: self.dtype });
        let x = self.forward_hidden_with(idx, draw)?;
        Ok(self.head(&x, targets, x.dim(0)?, false, 1.0)?.0)
    }

    /// Mean cross-entropy without dropout or gradients, in groups of whole sequences of at most
    /// `eval_chunk_rows` rows.
    pub fn eval_loss(&self, idx: &Tensor, targets: &Tensor) -> Result<f32> {
        let (b, t) = self.batch_dims(idx)?;
        if targets.dims2()? != (b, t) {
            candle_core::bail!("targets shape {:?} differs from idx shape {:?}", targets.dims(), idx.dims());
        }
        let seqs_per_group = match self.opts.eval_chunk_rows {
            Some(rows) => (rows / t).clamp(1, b),
            None => b,
        };
        let mut loss_sum = 0f64;
        let mut start = 0;
        while start < b {
            let seqs = seqs_per_group.min(b - start);
            let x = self.forward_hidden(&idx.narrow(0, start, seqs)?)?;
            let (loss, _) = self.head(&x, &targets.narrow(0, start, seqs)?, seqs * t, false, 1.0)?;
            loss_sum += loss * seqs as f64;
            start += seqs;
        }
        Ok((loss_sum / b as f64) as f32)
    }

    /// Logits of the next token after each sequence of `idx` [B, T] (T <= block_size): [B, V] f32.
    pub fn next_logits(&self, idx: &Tensor) -> Result<Tensor> {
        let (b, t) = self.batch_dims(idx)?;
        let x = self.forward_hidden(idx)?;
        let last = x.reshape((b, t, self.n_embd))?.narrow(1, t - 1, 1)?.squeeze(1)?.contiguous()?;
        drop(x);
        let (h, _) = ln_forward(&last, &self.w(self.ln_f_w), self.wo(self.ln_f_b).as_ref(), false)?;
        let h = self.to_compute(h)?;
        self.to_master(mm(&h, &self.wc(0)?.t()?)?)
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }
}

/// Adds one parameter tensor and returns its index.
type AddParam<'a> = dyn FnMut(String, &[usize], Init) -> Result<usize> + 'a;

#[derive(Clone, Copy)]
enum Init {
    Normal(f64),
    Ones,
    Zeros,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nan_or_infinite_parameter_is_found() {
        let cfg = tiny(true, 0.0);
        let model = Gpt::new_with_dtype(&cfg, ModelOptions::default(), &Device::Cpu, 3, DType::F32).unwrap();
        assert_eq!(model.first_non_finite_param().unwrap(), None);
        for bad in [f32::NAN, f32::INFINITY] {
            let (name, var) = &model.params()[2];
            let mut values = flat(var.as_tensor());
            let kept = values[1];
            values[1] = bad;
            var.set(&Tensor::from_vec(values.clone(), var.as_tensor().shape(), &Device::Cpu).unwrap()).unwrap();
            assert_eq!(model.first_non_finite_param().unwrap(), Some(name.as_str()), "{bad}");
            values[1] = kept;
            var.set(&Tensor::from_vec(values, var.as_tensor().shape(), &Device::Cpu).unwrap()).unwrap();
        }
        assert_eq!(model.first_non_finite_param().unwrap(), None);
    }

    /// The f32 model runs the fused CPU kernels (`fused.rs`), the f64 one candle's op-by-op
    /// compositions that the finite-difference check validates: their gradients must agree.
    #[test]
    fn fused_f32_gradients_match_the_plain_f64_path() {
        for (bias, dropout) in [(true, 0.0), (false, 0.25)] {
            let cfg = tiny(bias, dropout);
            let plain = Gpt::new_with_dtype(&cfg, ModelOptions::default(), &Device::Cpu, 11, DType::F64).unwrap();
            let fused = Gpt::new_with_dtype(&cfg, ModelOptions::default(), &Device::Cpu, 11, DType::F32).unwrap();
            let (x, y) = batch(&cfg, 2, 6, 13);
            let (loss64, grads64) = plain.loss_and_grads(&x, &y, 17).unwrap();
            let (loss32, grads32) = fused.loss_and_grads(&x, &y, 17).unwrap();
            assert!((loss64 - loss32).abs() < 1e-5, "loss {loss32} (fused f32) vs {loss64} (plain f64)");
            for ((name, _), (g64, g32)) in plain.params().iter().zip(grads64.iter().zip(&grads32)) {
                let want: Vec<f64> = g64.flatten_all().unwrap().to_vec1::<f64>().unwrap();
                let got = flat(g32);
                let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
                assert!(scale > 0.0, "{name}: zero gradient");
                for (w, g) in want.iter().zip(&got) {
                    assert!((w - f64::from(*g)).abs() <= 1e-4 * scale, "{name} (bias {bias}, dropout {dropout}): {g} vs {w}");
                }
            }
        }
    }

    fn tiny(bias: bool, dropout: f64) -> Config {
        Config { n_layer: 2, n_head: 2, n_embd: 8, block_size: 6, vocab_size: 11, bias, dropout, batch_size: 3, ..Config::default() }
    }

    /// A batch of token ids (b, t) drawn from `seed`, and the next-token targets.
    fn batch(cfg: &Config, b: usize, t: usize, seed: u64) -> (Tensor, Tensor) {
        let mut rng = HostRng::new(seed);
        let mut ids = || -> Vec<u32> { (0..b * t).map(|_| (rng.next_u64() % u64::from(cfg.vocab_size)) as u32).collect() };
        let x = Tensor::from_vec(ids(), (b, t), &Device::Cpu).unwrap();
        let y = Tensor::from_vec(ids(), (b, t), &Device::Cpu).unwrap();
        (x, y)
    }

    fn flat(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    #[test]
    fn names_shapes_and_counts_match_nanogpt_and_core() {
        for (l, h, c, t, v, bias) in [(2, 2, 8, 6, 11, true), (3, 4, 32, 16, 65, false), (1, 1, 4, 3, 7, true), (4, 6, 48, 64, 100, false)]
        {
            let cfg = Config { n_layer: l, n_head: h, n_embd: c, block_size: t, vocab_size: v, bias, ..Config::default() };
            let gpt = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 1).unwrap();
            let total: usize = gpt.params().iter().map(|(_, p)| p.elem_count()).sum();
            let counts = vramfit_core::params::count(&cfg);
            assert_eq!(total as u64, counts.total, "{cfg:?}");
            assert_eq!(gpt.params().len() as u64, counts.tensors, "{cfg:?}");
            assert_eq!(gpt.params()[0].0, "transformer.wte.weight");
            assert_eq!(gpt.params()[1].0, "transformer.wpe.weight");
            assert_eq!(gpt.params()[2].0, "transformer.h.0.ln_1.weight");
            let expected_third = if bias { "transformer.h.0.ln_1.bias" } else { "transformer.h.0.attn.c_attn.weight" };
            assert_eq!(gpt.params()[3].0, expected_third);
            let last = &gpt.params()[gpt.params().len() - 1].0;
            assert_eq!(last, if bias { "transformer.ln_f.bias" } else { "transformer.ln_f.weight" });
        }
    }

    #[test]
    fn initialisation_follows_nanogpt() {
        let cfg = Config { n_layer: 4, n_head: 4, n_embd: 64, block_size: 32, vocab_size: 500, bias: true, ..Config::default() };
        let gpt = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 7).unwrap();
        let std_of = |name: &str| {
            let (_, p) = gpt.params().iter().find(|(n, _)| n == name).unwrap();
            let v = flat(p.as_tensor());
            let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
            (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        assert!((std_of("transformer.wte.weight") - 0.02).abs() < 0.001);
        assert!((std_of("transformer.h.0.mlp.c_fc.weight") - 0.02).abs() < 0.001);
        let proj = 0.02 / (8f64).sqrt();
        assert!((std_of("transformer.h.1.mlp.c_proj.weight") - proj).abs() < 0.05 * proj);
        assert!((std_of("transformer.h.3.attn.c_proj.weight") - proj).abs() < 0.1 * proj);
        let ones = flat(gpt.params().iter().find(|(n, _)| n == "transformer.h.0.ln_2.weight").unwrap().1.as_tensor());
        assert!(ones.iter().all(|&x| x == 1.0));
        let zeros = flat(gpt.params().iter().find(|(n, _)| n == "transformer.h.0.attn.c_attn.bias").unwrap().1.as_tensor());
        assert!(zeros.iter().all(|&x| x == 0.0));
        // Same seed, same weights; another seed, other weights.
        let again = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 7).unwrap();
        let other = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 8).unwrap();
        assert_eq!(flat(gpt.params()[0].1.as_tensor()), flat(again.params()[0].1.as_tensor()));
        assert_ne!(flat(gpt.params()[0].1.as_tensor()), flat(other.params()[0].1.as_tensor()));
    }

    #[test]
    fn every_parameter_gets_a_nonzero_gradient() {
        for (bias, dropout) in [(true, 0.0), (false, 0.1), (true, 0.2)] {
            let cfg = tiny(bias, dropout);
            let gpt = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 3).unwrap();
            let (x, y) = batch(&cfg, 3, 6, 5);
            let (loss, grads) = gpt.loss_and_grads(&x, &y, 9).unwrap();
            assert!(loss.is_finite() && loss > 0.0);
            assert_eq!(grads.len(), gpt.params().len());
            for ((name, p), g) in gpt.params().iter().zip(&grads) {
                assert_eq!(g.dims(), p.dims(), "{name}");
                let v = flat(g);
                assert!(v.iter().all(|x| x.is_finite()), "{name}");
                assert!(v.iter().any(|&x| x != 0.0), "{name} has an all-zero gradient");
            }
        }
    }

    /// Loss at the initial weights is close to ln(V): the init is small, the logits near uniform.
    #[test]
    fn initial_loss_is_near_uniform() {
        let cfg = Config { vocab_size: 50, ..tiny(false, 0.0) };
        let gpt = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 3).unwrap();
        let (x, y) = batch(&cfg, 3, 6, 5);
        let loss = gpt.eval_loss(&x, &y).unwrap();
        assert!((loss as f64 - 50f64.ln()).abs() < 0.05, "{loss}");
    }

    /// Central differences along one random unit direction per parameter tensor match the
    /// analytic directional derivative, in f64 (candle's CPU runs every op here in f64).
    #[test]
    fn gradients_match_finite_differences() {
        for (bias, dropout) in [(true, 0.0), (false, 0.25)] {
            let cfg = tiny(bias, dropout);
            let gpt = Gpt::new_with_dtype(&cfg, ModelOptions::default(), &Device::Cpu, 11, DType::F64).unwrap();
            let (x, y) = batch(&cfg, 2, 5, 13);
            let (_, grads) = gpt.loss_and_grads(&x, &y, 17).unwrap();
            // Same dropout seed: the same masks, so the loss is a smooth function of the weights.
            let loss_at = |gpt: &Gpt| -> f64 { gpt.train_loss_f64(&x, &y, 17).unwrap() };
            let mut rng = HostRng::new(19);
            for (i, g) in grads.iter().enumerate() {
                let (name, var) = &gpt.params()[i];
                let original = var.as_tensor().copy().unwrap();
                let n = var.elem_count();
                let dir: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
                let norm = dir.iter().map(|d| d * d).sum::<f64>().sqrt();
                let dir = Tensor::from_vec(dir.iter().map(|d| d / norm).collect::<Vec<_>>(), var.shape(), &Device::Cpu).unwrap();
                let analytic: f64 = g.mul(&dir).unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap();
                let eps = 1e-5;
                var.set(&(&original + dir.affine(eps, 0.0).unwrap()).unwrap()).unwrap();
                let up = loss_at(&gpt);
                var.set(&(&original - dir.affine(eps, 0.0).unwrap()).unwrap()).unwrap();
                let down = loss_at(&gpt);
                var.set(&original).unwrap();
                let numeric = (up - down) / (2.0 * eps);
                let tol = 1e-5 * analytic.abs() + 1e-9;
                assert!(analytic.abs() > 1e-7, "{name}: directional derivative {analytic} too small to test");
                assert!(
                    (numeric - analytic).abs() < tol,
                    "{name} (bias {bias}, dropout {dropout}): finite difference {numeric} vs gradient {analytic}"
                );
            }
        }
    }

    fn assert_close(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-6 + 1e-5 * x.abs().max(y.abs()), "{what}: {x} vs {y}");
        }
    }

    /// ||a - b|| / ||b|| over all elements.
    fn relative_error(a: &Tensor, b: &Tensor) -> f64 {
        let diff = a.to_dtype(DType::F64).unwrap().sub(&b.to_dtype(DType::F64).unwrap()).unwrap();
        let norm = |t: &Tensor| t.sqr().unwrap().sum_all().unwrap().to_scalar::<f64>().unwrap().sqrt();
        norm(&diff) / norm(&b.to_dtype(DType::F64).unwrap())
    }

    /// Mixed precision (f32 master weights, bf16 or f16 compute) follows the f32 model to the
    /// compute dtype's precision, returns f32 gradients, and f16's loss scale divides back out.
    #[test]
    fn mixed_precision_follows_the_f32_model() {
        for dropout in [0.0, 0.2] {
            let cfg =
                Config { n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, vocab_size: 13, bias: true, dropout, ..Config::default() };
            let (x, y) = batch(&cfg, 3, 16, 5);
            let full = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 7).unwrap();
            let (loss32, grads32) = full.loss_and_grads(&x, &y, 3).unwrap();
            // bf16 keeps 8 significant bits, f16 11. Measured: gradients within 1.5% (bf16) and
            // 0.2% (f16) of f32 in norm; the bounds leave about 3x.
            for (compute, tol) in [(DType::BF16, 0.04), (DType::F16, 0.006)] {
                let mixed = Gpt::new_mixed(&cfg, ModelOptions::default(), &Device::Cpu, 7, compute).unwrap();
                assert_eq!(mixed.compute_dtype(), compute);
                let (loss, grads) = mixed.loss_and_grads(&x, &y, 3).unwrap();
                assert!(((loss - loss32) / loss32).abs() < tol as f32, "{compute:?} dropout {dropout}: loss {loss} vs {loss32}");
                for ((name, _), (g, g32)) in full.params().iter().zip(grads.iter().zip(&grads32)) {
                    assert_eq!(g.dtype(), DType::F32, "{name}");
                    let err = relative_error(g, g32);
                    assert!(err < tol, "{compute:?} dropout {dropout}: {name} off by {err:.4} (relative)");
                }
                if compute == DType::F16 {
                    let (_, scaled) = mixed.loss_and_grads_scaled(&x, &y, 3, 1024.0).unwrap();
                    for ((name, _), (s, g)) in full.params().iter().zip(scaled.iter().zip(&grads)) {
                        let err = relative_error(&(s / 1024.0).unwrap(), g);
                        assert!(err < 2e-3, "{name}: scaled gradient / 1024 off by {err}");
                    }
                    // Too large a scale overflows f16 (max 65504): the loop sees a non-finite norm.
                    let (_, overflowed) = mixed.loss_and_grads_scaled(&x, &y, 3, 1e12).unwrap();
                    assert!(!crate::optim::grad_norm(&overflowed).unwrap().is_finite());
                }
            }
        }
        assert!(Gpt::new_mixed(&tiny(false, 0.0), ModelOptions::default(), &Device::Cpu, 1, DType::F64).is_err());
    }

    #[test]
    fn checkpointing_and_chunked_loss_give_the_plain_results() {
        for (bias, dropout) in [(true, 0.0), (false, 0.3)] {
            let cfg = tiny(bias, dropout);
            let (x, y) = batch(&cfg, 3, 6, 23);
            let run = |opts: ModelOptions, chunk: Option<usize>| {
                let mut gpt = Gpt::new(&cfg, opts, &Device::Cpu, 29).unwrap();
                if let Some(rows) = chunk {
                    gpt.set_loss_chunk_rows(rows);
                }
                gpt.loss_and_grads(&x, &y, 31).unwrap()
            };
            let (plain_loss, plain) = run(ModelOptions::default(), None);
            let variants = [
                (ModelOptions { activation_checkpointing: true, ..Default::default() }, None),
                (ModelOptions { chunked_loss: true, ..Default::default() }, Some(4)),
                (ModelOptions { activation_checkpointing: true, chunked_loss: true, eval_chunk_rows: None }, Some(7)),
            ];
            for (opts, chunk) in variants {
                let (loss, grads) = run(opts, chunk);
                assert!((loss - plain_loss).abs() < 1e-6, "{opts:?}: {loss} vs {plain_loss}");
                for (g, p) in grads.iter().zip(&plain) {
                    assert_close(&flat(g), &flat(p), &format!("{opts:?}"));
                }
            }
        }
    }

    #[test]
    fn eval_in_chunks_matches_eval_whole_and_the_training_loss_without_dropout() {
        let cfg = tiny(true, 0.0);
        let (x, y) = batch(&cfg, 5, 6, 37);
        let whole = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 41).unwrap();
        let chunked = Gpt::new(&cfg, ModelOptions { eval_chunk_rows: Some(12), ..Default::default() }, &Device::Cpu, 41).unwrap();
        let a = whole.eval_loss(&x, &y).unwrap();
        let b = chunked.eval_loss(&x, &y).unwrap();
        let (train, _) = whole.loss_and_grads(&x, &y, 0).unwrap();
        assert!((a - b).abs() < 1e-6 && (a - train).abs() < 1e-6, "{a} {b} {train}");
    }

    /// next_logits(x[:, :k]) are position k-1's logits: the cross-entropy they give y[k-1] is what
    /// position k-1 adds to the summed eval loss, k * loss(:k) - (k-1) * loss(:k-1) (causal
    /// attention leaves the earlier positions' losses unchanged).
    #[test]
    fn next_logits_are_the_last_positions_logits() {
        let cfg = tiny(false, 0.0);
        let gpt = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 43).unwrap();
        let t = cfg.block_size as usize;
        let (x, y) = batch(&cfg, 1, t, 47);
        let targets = y.flatten_all().unwrap().to_vec1::<u32>().unwrap();
        let summed_loss = |k: usize| {
            if k == 0 {
                return 0.0;
            }
            k as f64 * f64::from(gpt.eval_loss(&x.narrow(1, 0, k).unwrap(), &y.narrow(1, 0, k).unwrap()).unwrap())
        };
        for k in 1..=t {
            let logits = gpt.next_logits(&x.narrow(1, 0, k).unwrap()).unwrap();
            assert_eq!(logits.dims(), &[1, cfg.vocab_size as usize]);
            let logits: Vec<f64> = flat(&logits).into_iter().map(f64::from).collect();
            let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let log_sum_exp = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
            let cross_entropy = log_sum_exp - logits[targets[k - 1] as usize];
            let from_losses = summed_loss(k) - summed_loss(k - 1);
            assert!(
                (cross_entropy - from_losses).abs() <= 1e-4 * from_losses.abs(),
                "position {}: -log_softmax(next_logits)[y] = {cross_entropy}, from the eval losses {from_losses}",
                k - 1
            );
        }
    }

    #[test]
    fn bad_shapes_are_errors_not_panics() {
        let cfg = tiny(false, 0.0);
        let gpt = Gpt::new(&cfg, ModelOptions::default(), &Device::Cpu, 1).unwrap();
        let (x, y) = batch(&cfg, 2, 6, 1);
        let too_long = Tensor::zeros((1, 7), DType::U32, &Device::Cpu).unwrap();
        assert!(gpt.loss_and_grads(&too_long, &too_long, 0).is_err());
        assert!(gpt.eval_loss(&x, &y.narrow(1, 0, 5).unwrap()).is_err());
        let bad = Config { n_embd: 9, ..cfg };
        assert!(Gpt::new(&bad, ModelOptions::default(), &Device::Cpu, 1).is_err());
    }
}
