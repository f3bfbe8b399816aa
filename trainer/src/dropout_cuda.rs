//! Dropout masks drawn on the GPU, bit for bit the masks the CPU draws.
//!
//! The model's masks come from [`crate::model::HostRng`] (SplitMix64) seeded per site. Drawing
//! them on the host and copying them over made a CUDA run of nanoGPT's shakespeare-char model
//! (dropout 0.2) about 1.2 s per iteration on an H100, against 14 ms for PyTorch: every iteration
//! drew some 10^8 numbers on one CPU core. SplitMix64 is counter-based — its i-th output (from 0)
//! is `mix(seed + (i + 1) * GAMMA)` — so each GPU thread computes its own elements with the same
//! integer arithmetic, and the same mask comes out on either device (checked by
//! `the_host_stream_is_counter_based` here and, on a GPU, by `trainer_memory --probe-dropout`).
//!
//! The kernel is compiled once per process by NVRTC ([`crate::cuda_kernels`]), and the mask is
//! made by a custom op so it is a normal candle tensor from the device's memory pool: an f32
//! tensor of the mask's shape, as the host path's `Tensor::from_vec` makes, so the memory model
//! is the same on both paths.

/// SplitMix64's increment (Steele, Lea and Flood 2014), as [`crate::model::HostRng`] uses it.
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Element `i` of the mask of a site whose stream starts at `seed`: 0 where the uniform draw is
/// below `p`, else `keep_scale`. The host reference of what the kernel computes.
pub fn element(seed: u64, i: u64, p: f64, keep_scale: f32) -> f32 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    if u < p {
        0.0
    } else {
        keep_scale
    }
}

/// The CUDA C source of the kernel: [`element`] for every index, grid-stride.
pub const KERNEL_SOURCE: &str = r#"
extern "C" __global__ void vramfit_dropout_mask(float *out, unsigned long long n, unsigned long long seed,
                                                double p, float keep_scale) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long z = seed + (i + 1ULL) * 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
        out[i] = u < p ? 0.0f : keep_scale;
    }
}
"#;

/// A mask of `shape` for the stream `seed` on `anchor`'s CUDA device (`anchor`'s values are not
/// read: it only says where). `None` when `anchor` is not on a CUDA device or this build has no
/// CUDA: the caller draws on the host.
pub fn mask(
    anchor: &candle_core::Tensor,
    seed: u64,
    p: f64,
    keep_scale: f32,
    shape: &[usize],
) -> Option<candle_core::Result<candle_core::Tensor>> {
    #[cfg(feature = "cuda")]
    if anchor.device().is_cuda() {
        let op = imp::MaskOp { seed, p, keep_scale, shape: shape.to_vec() };
        return Some(anchor.apply_op1_no_bwd(&op));
    }
    let _ = (anchor, seed, p, keep_scale, shape);
    None
}

#[cfg(feature = "cuda")]
mod imp {
    use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
    use candle_core::{CpuStorage, CudaStorage, CustomOp1, Layout, Result, Shape};

    pub struct MaskOp {
        pub seed: u64,
        pub p: f64,
        pub keep_scale: f32,
        pub shape: Vec<usize>,
    }

    impl CustomOp1 for MaskOp {
        fn name(&self) -> &'static str {
            "vramfit-dropout-mask"
        }

        fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
            candle_core::bail!("the GPU dropout mask runs on CUDA only (the CPU draws on the host)")
        }

        fn cuda_fwd(&self, anchor: &CudaStorage, _: &Layout) -> Result<(CudaStorage, Shape)> {
            let device = anchor.device.clone();
            let n: usize = self.shape.iter().product();
            let func = crate::cuda_kernels::function(&device, "vramfit_dropout_mask")?;
            // SAFETY: the kernel writes each of the n elements before anything reads them.
            let mut out = unsafe { device.alloc::<f32>(n) }?;
            if n > 0 {
                let (len, seed, p, scale) = (n as u64, self.seed, self.p, self.keep_scale);
                let stream = device.cuda_stream();
                let mut launch = stream.launch_builder(&func);
                launch.arg(&mut out).arg(&len).arg(&seed).arg(&p).arg(&scale);
                // SAFETY: the arguments match the kernel's parameters in number, order and type.
                unsafe { launch.launch(crate::cuda_kernels::launch_config(n)) }.map_err(|e| candle_core::Error::Cuda(Box::new(e)))?;
            }
            Ok((CudaStorage::wrap_cuda_slice(out, device), Shape::from(self.shape.clone())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::HostRng;

    #[test]
    fn the_host_stream_is_counter_based() {
        // The host draws the mask element by element from HostRng::new(seed); the kernel
        // computes element i alone. They must agree everywhere, including p's edges.
        for (seed, p) in [(0u64, 0.1), (0x1234_5678_9ABC_DEF0, 0.5), (u64::MAX, 0.9), (42, 1e-9)] {
            let scale = (1.0 / (1.0 - p)) as f32;
            let mut rng = HostRng::new(seed);
            for i in 0..10_000u64 {
                let host = if rng.uniform() < p { 0.0 } else { scale };
                assert_eq!(element(seed, i, p, scale).to_bits(), host.to_bits(), "seed {seed}, p {p}, element {i}");
            }
        }
    }

    #[test]
    fn the_kernel_source_uses_the_same_constants() {
        // The C source and `element` must not drift apart: the multipliers, the shifts, the
        // 53-bit scaling and the (i + 1) offset are each written once in both.
        for needle in [
            "0x9E3779B97F4A7C15ULL",
            "0xBF58476D1CE4E5B9ULL",
            "0x94D049BB133111EBULL",
            "(i + 1ULL)",
            "z >> 30",
            "z >> 27",
            "z >> 31",
            "z >> 11",
            "9007199254740992.0",
        ] {
            assert!(KERNEL_SOURCE.contains(needle), "{needle}");
        }
        assert_eq!(9007199254740992u64, 1 << 53);
    }

    #[test]
    fn the_cpu_draws_on_the_host() {
        let anchor = candle_core::Tensor::zeros(1, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        assert!(mask(&anchor, 1, 0.5, 2.0, &[4]).is_none());
    }
}
