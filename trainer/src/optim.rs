//! The optimizer side of nanoGPT's `train.py`: AdamW with nanoGPT's two parameter groups,
//! gradient clipping by global norm, and the cosine learning-rate schedule with warmup.
//!
//! candle's own `AdamW` has no parameter groups, keeps its moments in the parameter's dtype and
//! hides its state (so it cannot be checkpointed); this one keeps fp32 moments that
//! [`AdamW::state`] exposes and [`AdamW::restore`] puts back.
//!
//! The update is PyTorch's `torch.optim.AdamW` (the fused kernel computes the same formula), per
//! parameter `p` with gradient `g` at step `t` (1-based):
//! ```text
//! p ← p · (1 − lr · wd)                      (decoupled weight decay; wd = 0 for the no-decay group)
//! m ← β1 · m + (1 − β1) · g
//! v ← β2 · v + (1 − β2) · g²
//! p ← p − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)
//! ```
//! nanoGPT's `configure_optimizers` decays every parameter with two or more dimensions (matmul
//! weights and embeddings) and none of the rest (biases, LayerNorm weights).

use candle_core::{DType, Result, Tensor, Var};
use serde::{Deserialize, Serialize};

/// AdamW's hyper-parameters except the learning rate, which the schedule sets per step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamWSettings {
    pub beta1: f64,
    pub beta2: f64,
    /// PyTorch's default, which nanoGPT keeps.
    pub eps: f64,
    pub weight_decay: f64,
}

/// AdamW with fp32 first and second moments, created at the first step as PyTorch does.
pub struct AdamW {
    settings: AdamWSettings,
    /// Whether each parameter (in the model's order) is in the decay group.
    decays: Vec<bool>,
    /// Steps taken so far.
    step: u64,
    /// exp_avg and exp_avg_sq, one per parameter; empty before the first step.
    m: Vec<Tensor>,
    v: Vec<Tensor>,
}

impl AdamW {
    /// Groups `params` as nanoGPT does: rank ≥ 2 decays, the rest does not.
    pub fn new(params: &[(String, Var)], settings: AdamWSettings) -> AdamW {
        let decays = params.iter().map(|(_, p)| p.rank() >= 2).collect();
        AdamW { settings, decays, step: 0, m: Vec::new(), v: Vec::new() }
    }

    /// Parameters in the decay group and in the no-decay group: (tensors, elements) each, as
    /// nanoGPT prints them.
    pub fn group_sizes(&self, params: &[(String, Var)]) -> [(usize, usize); 2] {
        let mut groups = [(0, 0); 2];
        for ((_, p), &decays) in params.iter().zip(&self.decays) {
            let g = &mut groups[usize::from(!decays)];
            g.0 += 1;
            g.1 += p.elem_count();
        }
        groups
    }

    pub fn steps_taken(&self) -> u64 {
        self.step
    }

    /// One AdamW step at learning rate `lr`. `grads` are in the order of `params`.
    pub fn step(&mut self, params: &[(String, Var)], grads: &[Tensor], lr: f64) -> Result<()> {
        if params.len() != self.decays.len() || grads.len() != params.len() {
            candle_core::bail!("AdamW: {} parameters, {} gradients, {} expected", params.len(), grads.len(), self.decays.len());
        }
        if self.m.is_empty() {
            for (_, p) in params {
                self.m.push(Tensor::zeros(p.shape(), DType::F32, p.device())?);
                self.v.push(Tensor::zeros(p.shape(), DType::F32, p.device())?);
            }
        }
        // A checkpoint's count is checked against its iteration on load; saturating keeps even a
        // count at u64::MAX from wrapping to step 0 (bias corrections of 1 − β^0 = 0: division by zero).
        self.step = self.step.saturating_add(1);
        let AdamWSettings { beta1, beta2, eps, weight_decay } = self.settings;
        let step_size = lr / (1.0 - pow_steps(beta1, self.step));
        let bias_correction2_sqrt = (1.0 - pow_steps(beta2, self.step)).sqrt();
        for (i, ((_, p), g)) in params.iter().zip(grads).enumerate() {
            let decay = if self.decays[i] { 1.0 - lr * weight_decay } else { 1.0 };
            let fused = crate::fused::AdamWStep {
                beta1: beta1 as f32,
                beta2: beta2 as f32,
                eps: eps as f32,
                decay: decay as f32,
                step_size: step_size as f32,
                bias_correction2_sqrt: bias_correction2_sqrt as f32,
            };
            // CPU f32: three in-place passes, no temporaries; elsewhere the tensor-op formula.
            if let Some(done) = crate::fused::adamw_step(p.as_tensor(), g, &self.m[i], &self.v[i], fused) {
                done?;
                continue;
            }
            let g = g.to_dtype(DType::F32)?;
            let m = ((&self.m[i] * beta1)? + (&g * (1.0 - beta1))?)?;
            let v = ((&self.v[i] * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
            let denom = v.sqrt()?.affine(1.0 / bias_correction2_sqrt, eps)?;
            let updated = ((p.as_tensor() * decay)? - (m.div(&denom)? * step_size)?)?;
            p.set(&updated)?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// (steps taken, exp_avg per parameter, exp_avg_sq per parameter); the vectors are empty
    /// before the first step.
    pub fn state(&self) -> (u64, &[Tensor], &[Tensor]) {
        (self.step, &self.m, &self.v)
    }

    /// Puts back a state [`AdamW::state`] returned (from a checkpoint), checking the shapes.
    pub fn restore(&mut self, params: &[(String, Var)], step: u64, m: Vec<Tensor>, v: Vec<Tensor>) -> std::result::Result<(), String> {
        if step == 0 {
            if !m.is_empty() || !v.is_empty() {
                return Err("optimizer state present but its step count is 0".into());
            }
        } else {
            if m.len() != params.len() || v.len() != params.len() {
                return Err(format!("optimizer state has {} moments for {} parameters", m.len(), params.len()));
            }
            for (((name, p), m), v) in params.iter().zip(&m).zip(&v) {
                if m.dims() != p.dims() || v.dims() != p.dims() {
                    return Err(format!("optimizer state for {name} has shape {:?}, the parameter {:?}", m.dims(), p.dims()));
                }
            }
        }
        self.step = step;
        self.m = m;
        self.v = v;
        Ok(())
    }
}

/// `beta^t` for a step count `t`: `powi` (bit for bit what earlier versions computed) while `t`
/// fits its i32, `powf` beyond, where a cast would truncate the count (even negative).
fn pow_steps(beta: f64, t: u64) -> f64 {
    match i32::try_from(t) {
        Ok(t) => beta.powi(t),
        Err(_) => beta.powf(t as f64),
    }
}

/// Scales `grads` so their global L2 norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_` does (coefficient `max_norm / (norm + 1e-6)`, only applied
/// when below 1). Returns the norm before clipping.
pub fn clip_grad_norm(grads: &mut [Tensor], max_norm: f64) -> Result<f64> {
    let norm = grad_norm(grads)?;
    let coef = max_norm / (norm + 1e-6);
    if coef < 1.0 {
        for g in grads.iter_mut() {
            *g = (&*g * coef)?;
        }
    }
    Ok(norm)
}

/// The global L2 norm of `grads` (inf or NaN if any element is).
pub fn grad_norm(grads: &[Tensor]) -> Result<f64> {
    let mut sum_sq = 0f64;
    for g in grads {
        sum_sq += g.to_dtype(DType::F32)?.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
    }
    Ok(sum_sq.sqrt())
}

/// Dynamic loss scaling for f16 training, as PyTorch's `torch.amp.GradScaler` with its defaults:
/// the backward runs on the loss times `scale`, so gradients too small for f16 stay representable;
/// a step whose gradients overflowed (inf or NaN) is skipped and the scale halved; after
/// `GROWTH_INTERVAL` good steps in a row the scale doubles.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    pub scale: f64,
    /// Good steps since the scale last changed.
    pub good_steps: u32,
}

impl LossScaler {
    /// GradScaler's `init_scale`, `growth_interval`, `growth_factor` and `backoff_factor`.
    pub const INIT_SCALE: f64 = 65536.0;
    pub const GROWTH_INTERVAL: u32 = 2000;

    pub fn new() -> LossScaler {
        LossScaler { scale: Self::INIT_SCALE, good_steps: 0 }
    }

    /// Records a step's outcome: whether its (unscaled) gradients were finite. Returns whether the
    /// optimizer may take the step.
    pub fn update(&mut self, finite: bool) -> bool {
        if finite {
            // Saturating: a checkpoint's count past the interval must not overflow (it resets below).
            self.good_steps = self.good_steps.saturating_add(1);
            if self.good_steps >= Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good_steps = 0;
            }
        } else {
            self.scale *= 0.5;
            self.good_steps = 0;
        }
        finite
    }
}

impl Default for LossScaler {
    fn default() -> Self {
        LossScaler::new()
    }
}

/// The learning-rate schedule's settings (nanoGPT's names).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrSchedule {
    pub learning_rate: f64,
    /// false: constant `learning_rate`.
    pub decay_lr: bool,
    pub warmup_iters: u64,
    pub lr_decay_iters: u64,
    pub min_lr: f64,
}

impl LrSchedule {
    /// nanoGPT's `get_lr(it)`: linear warmup from `lr/(warmup+1)` to `lr`, cosine decay to
    /// `min_lr` at `lr_decay_iters`, then `min_lr`.
    pub fn at(&self, it: u64) -> f64 {
        if !self.decay_lr {
            return self.learning_rate;
        }
        if it < self.warmup_iters {
            // In f64: `warmup_iters + 1` overflows u64 at u64::MAX (and wraps to a division by
            // zero in release builds). Here `it < warmup_iters`, so the ratio stays at most 1.
            return self.learning_rate * (it as f64 + 1.0) / (self.warmup_iters as f64 + 1.0);
        }
        if it > self.lr_decay_iters {
            return self.min_lr;
        }
        // warmup_iters == lr_decay_iters leaves 0/0 here; nanoGPT would divide by zero too, so
        // treat that single iteration as the start of the decay.
        let span = self.lr_decay_iters.saturating_sub(self.warmup_iters).max(1) as f64;
        let decay_ratio = (it - self.warmup_iters) as f64 / span;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * decay_ratio).cos());
        self.min_lr + coeff * (self.learning_rate - self.min_lr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn var(data: &[f32], shape: &[usize]) -> Var {
        Var::from_vec(data.to_vec(), shape, &Device::Cpu).unwrap()
    }

    fn values(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    /// GradScaler's schedule: halve and skip on overflow, double after 2000 good steps in a row.
    #[test]
    fn loss_scaler_backs_off_on_overflow_and_grows_after_good_steps() {
        let mut s = LossScaler::new();
        assert_eq!(s.scale, 65536.0);
        assert!(!s.update(false));
        assert_eq!((s.scale, s.good_steps), (32768.0, 0));
        for _ in 0..LossScaler::GROWTH_INTERVAL - 1 {
            assert!(s.update(true));
        }
        assert_eq!((s.scale, s.good_steps), (32768.0, LossScaler::GROWTH_INTERVAL - 1));
        assert!(s.update(true));
        assert_eq!((s.scale, s.good_steps), (65536.0, 0));
        assert!(s.update(true));
        assert!(!s.update(false));
        assert_eq!((s.scale, s.good_steps), (32768.0, 0));
    }

    #[test]
    fn grad_norm_sees_overflow() {
        let t = |v: Vec<f32>| Tensor::from_vec(v, 2, &Device::Cpu).unwrap();
        assert_eq!(grad_norm(&[t(vec![3.0, 0.0]), t(vec![0.0, 4.0])]).unwrap(), 5.0);
        assert!(!grad_norm(&[t(vec![f32::INFINITY, 0.0])]).unwrap().is_finite());
        assert!(!grad_norm(&[t(vec![1.0, f32::NAN])]).unwrap().is_finite());
    }

    /// Two AdamW steps on a matrix (decay group) and a vector (no decay), against the formula
    /// worked out by hand in f64 for each element.
    #[test]
    fn adamw_matches_hand_computed_steps() {
        let settings = AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };
        let params = vec![("w".to_string(), var(&[0.5, -1.0, 2.0, 0.0], &[2, 2])), ("b".to_string(), var(&[1.0, -0.25], &[2]))];
        let grads1 = [vec![0.1f32, -0.2, 0.3, 0.0], vec![-1.0f32, 0.5]];
        let grads2 = [vec![-0.3f32, 0.1, 0.2, 1.0], vec![0.25f32, 0.5]];
        let lrs = [1e-2, 5e-3];
        let mut opt = AdamW::new(&params, settings);
        assert_eq!(opt.group_sizes(&params), [(1, 4), (1, 2)]);

        // The expected values, one element at a time.
        let mut expected: Vec<Vec<f64>> = vec![vec![0.5, -1.0, 2.0, 0.0], vec![1.0, -0.25]];
        let mut m = vec![vec![0f64; 4], vec![0f64; 2]];
        let mut v = m.clone();
        for (step, (grads, lr)) in [&grads1, &grads2].iter().zip(lrs).enumerate() {
            let t = (step + 1) as i32;
            for (pi, wd) in [(0usize, 0.1f64), (1, 0.0)] {
                for e in 0..expected[pi].len() {
                    let g = grads[pi][e] as f64;
                    expected[pi][e] *= 1.0 - lr * wd;
                    m[pi][e] = 0.9 * m[pi][e] + 0.1 * g;
                    v[pi][e] = 0.95 * v[pi][e] + 0.05 * g * g;
                    let m_hat = m[pi][e] / (1.0 - 0.9f64.powi(t));
                    let v_hat_sqrt = v[pi][e].sqrt() / (1.0 - 0.95f64.powi(t)).sqrt();
                    expected[pi][e] -= lr * m_hat / (v_hat_sqrt + 1e-8);
                }
            }
            let g: Vec<Tensor> = vec![
                Tensor::from_vec(grads[0].clone(), (2, 2), &Device::Cpu).unwrap(),
                Tensor::from_vec(grads[1].clone(), 2, &Device::Cpu).unwrap(),
            ];
            opt.step(&params, &g, lr).unwrap();
        }
        for (pi, (_, p)) in params.iter().enumerate() {
            for (got, want) in values(p.as_tensor()).iter().zip(&expected[pi]) {
                assert!((*got as f64 - want).abs() < 1e-6, "param {pi}: {got} vs {want}");
            }
        }
        // A zero gradient on a decayed weight still moves it by weight decay only on step 1
        // (m = v = 0 there) — element 3 of w had g = 0 then g = 1, so it must have moved.
        assert!(values(params[0].1.as_tensor())[3] != 0.0);
        let (steps, ms, vs) = opt.state();
        assert_eq!((steps, ms.len(), vs.len()), (2, 2, 2));
        for (got, want) in values(&ms[1]).iter().zip(&m[1]) {
            assert!((*got as f64 - want).abs() < 1e-7);
        }
    }

    #[test]
    fn restore_rejects_wrong_shapes() {
        let settings = AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };
        let params = vec![("w".to_string(), var(&[0.5, -1.0, 2.0, 0.0], &[2, 2]))];
        let mut opt = AdamW::new(&params, settings);
        let wrong = Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap();
        assert!(opt.restore(&params, 1, vec![wrong.clone()], vec![wrong]).is_err());
        assert!(opt.restore(&params, 1, vec![], vec![]).is_err());
        assert!(opt.restore(&params, 0, vec![], vec![]).is_ok());
    }

    /// Step counts past i32 (a long run, or a checkpoint's count up to u64::MAX) keep their bias
    /// corrections of about 1: truncated to i32, 2^40 + 1 became step 1 and a step ten times too
    /// large; u64::MAX + 1 overflowed.
    #[test]
    fn adamw_steps_past_i32_and_at_u64_max() {
        let settings = AdamWSettings { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0 };
        for steps in [(1u64 << 40), u64::MAX - 1, u64::MAX] {
            let params = vec![("b".to_string(), var(&[1.0], &[1]))];
            let mut opt = AdamW::new(&params, settings);
            let zeros = || Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap();
            opt.restore(&params, steps, vec![zeros()], vec![zeros()]).unwrap();
            opt.step(&params, &[Tensor::new(&[2.0f32], &Device::Cpu).unwrap()], 1e-2).unwrap();
            // m = 0.1·g, √v = √0.05·|g|, both bias corrections 1.
            let want = 1.0 - 1e-2 * 0.2 / (0.05f64.sqrt() * 2.0 + 1e-8);
            let got = values(params[0].1.as_tensor())[0] as f64;
            assert!((got - want).abs() < 1e-6, "{steps} steps: {got} vs {want}");
            assert_eq!(opt.steps_taken(), steps.saturating_add(1));
        }
    }

    /// A count of good steps past the growth interval (a doctored checkpoint) does not overflow.
    #[test]
    fn loss_scaler_good_steps_saturate() {
        let mut s = LossScaler { scale: 1024.0, good_steps: u32::MAX };
        assert!(s.update(true));
        assert_eq!((s.scale, s.good_steps), (2048.0, 0));
    }

    #[test]
    fn clipping_scales_to_max_norm_and_leaves_small_gradients() {
        let mut grads = vec![Tensor::new(&[3.0f32, 0.0], &Device::Cpu).unwrap(), Tensor::new(&[4.0f32], &Device::Cpu).unwrap()];
        let norm = clip_grad_norm(&mut grads, 1.0).unwrap();
        assert!((norm - 5.0).abs() < 1e-6);
        let after: f64 = grads.iter().map(|g| values(g).iter().map(|x| (*x as f64).powi(2)).sum::<f64>()).sum::<f64>().sqrt();
        assert!((after - 1.0).abs() < 1e-5, "{after}");
        let mut small = vec![Tensor::new(&[0.3f32, 0.4], &Device::Cpu).unwrap()];
        assert!((clip_grad_norm(&mut small, 1.0).unwrap() - 0.5).abs() < 1e-6);
        assert_eq!(values(&small[0]), vec![0.3, 0.4]);
    }

    #[test]
    fn schedule_is_nanogpts_get_lr() {
        let s = LrSchedule { learning_rate: 6e-4, decay_lr: true, warmup_iters: 10, lr_decay_iters: 110, min_lr: 6e-5 };
        assert!((s.at(0) - 6e-4 / 11.0).abs() < 1e-15);
        assert!((s.at(9) - 6e-4 * 10.0 / 11.0).abs() < 1e-15);
        assert!((s.at(10) - 6e-4).abs() < 1e-15); // cos(0) = 1
        assert!((s.at(60) - (6e-5 + 0.5 * (6e-4 - 6e-5))).abs() < 1e-12); // halfway: cos(pi/2) = 0
        assert!((s.at(110) - 6e-5).abs() < 1e-12);
        assert_eq!(s.at(111), 6e-5);
        assert!(s.at(30) > s.at(31));
        // Iteration counts up to u64::MAX: no overflow (warmup_iters + 1), a finite rate.
        let endless = LrSchedule { warmup_iters: u64::MAX, lr_decay_iters: u64::MAX, ..s };
        for it in [0, 3, u64::MAX - 1, u64::MAX] {
            let lr = endless.at(it);
            assert!(lr.is_finite() && lr > 0.0 && lr <= 6e-4 * (1.0 + 1e-12), "{it}: {lr}");
        }
        assert_eq!(endless.at(u64::MAX - 1), 6e-4);
        let flat = LrSchedule { decay_lr: false, ..s };
        assert_eq!(flat.at(0), 6e-4);
        assert_eq!(flat.at(1000), 6e-4);
    }
}
