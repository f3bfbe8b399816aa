//! The trainer's own CUDA kernels, compiled once per process by NVRTC (the CUDA toolkit's runtime
//! compiler, which candle links with `--features cuda`) and run on candle's stream:
//! - dropout masks drawn on the GPU, bit for bit the host's ([`crate::dropout_cuda`]);
//! - AdamW's three in-place passes ([`crate::fused::adamw_step`]), the same f32 arithmetic as the
//!   CPU's: with FMA contraction off (`--fmad=false`) and IEEE square root and division (NVRTC's
//!   defaults), each element comes out as the CPU computes it.

/// AdamW's passes: a moment's moving average, and the parameter update (see `fused.rs`).
pub const ADAMW_SOURCE: &str = r#"
extern "C" __global__ void vramfit_adamw_moment(float *avg, const float *g, unsigned long long n,
                                                float beta, float rest, int square) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = g[i];
        avg[i] = beta * avg[i] + rest * (square ? gi * gi : gi);
    }
}

extern "C" __global__ void vramfit_adamw_update(float *p, const float *m, const float *v, unsigned long long n,
                                                float decay, float step_size, float inv_bc2, float eps) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        p[i] = p[i] * decay - step_size * (m[i] / (sqrtf(v[i]) * inv_bc2 + eps));
    }
}
"#;

#[cfg(feature = "cuda")]
pub use imp::{function, launch_config};

#[cfg(feature = "cuda")]
mod imp {
    use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig};
    use candle_core::cuda_backend::cudarc::nvrtc;
    use candle_core::{CudaDevice, Result};
    use std::sync::OnceLock;

    /// The PTX of every kernel above, compiled on first use.
    fn ptx() -> Result<&'static str> {
        static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
        PTX.get_or_init(|| {
            let source = format!("{}\n{}", crate::dropout_cuda::KERNEL_SOURCE, super::ADAMW_SOURCE);
            let opts = nvrtc::CompileOptions { fmad: Some(false), ..Default::default() };
            nvrtc::compile_ptx_with_opts(source, opts).map(|p| p.to_src()).map_err(|e| format!("{e:?}"))
        })
        .as_deref()
        .map_err(|e| candle_core::Error::Msg(format!("cannot compile vramfit's CUDA kernels with NVRTC: {e}")))
    }

    /// Kernel `name`, loaded into `device`'s context (launch it on `device.cuda_stream()`).
    pub fn function(device: &CudaDevice, name: &str) -> Result<CudaFunction> {
        Ok(device.get_or_load_custom_func(name, "vramfit_kernels", ptx()?)?.into_cuda_function())
    }

    /// 256 threads a block, enough blocks for one element a thread (capped: the loops stride).
    pub fn launch_config(n: usize) -> LaunchConfig {
        let blocks = u32::try_from(n.div_ceil(256)).unwrap_or(u32::MAX).clamp(1, 65_535 * 8);
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }
}
