//! CUDA memory as the trainer's tensors use it: the GPU counterpart of [`crate::mem`].
//!
//! candle 0.11.1 (through cudarc 0.19) allocates every tensor with `cuMemAllocAsync` from the
//! device's default memory pool when the device supports pools (every card since Pascal with a
//! current driver). The pool keeps two counters CUDA documents for this purpose:
//! `CU_MEMPOOL_ATTR_USED_MEM_CURRENT` (bytes handed out and not yet freed) and
//! `CU_MEMPOOL_ATTR_USED_MEM_HIGH` (their high-water mark, which can be reset to 0). They are
//! what `vramfit_core::trainer_model` predicts on CUDA: tensor bytes only, not the CUDA context,
//! cuBLAS's workspace or the pool's own reserve. A device without pools (cudarc then falls back
//! to plain `cuMemAlloc`), or a build without the `cuda` feature, reports `None`.

use candle_core::Device;

/// The pool's counters after the device's queued work has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolBytes {
    /// Bytes of live allocations now.
    pub used: u64,
    /// Most bytes live at once since the pool was created or [`reset_peak`] was called.
    pub used_high: u64,
    /// Most bytes the pool held from the driver at once (live plus cached), as nvidia-smi sees them.
    pub reserved_high: u64,
}

#[cfg(feature = "cuda")]
mod imp {
    use super::PoolBytes;
    use candle_core::cuda_backend::cudarc::driver::sys;
    use candle_core::Device;

    /// The default pool of `device`'s GPU, with the device's context bound to this thread.
    fn pool(device: &Device) -> Option<sys::CUmemoryPool> {
        let cuda = device.as_cuda_device().ok()?;
        let ctx = cuda.cuda_stream().context().clone();
        if !ctx.has_async_alloc() {
            return None;
        }
        ctx.bind_to_thread().ok()?;
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `pool` is a valid out-pointer and `cu_device` a device handle from a live context.
        let rc = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
        (rc == sys::CUresult::CUDA_SUCCESS && !pool.is_null()).then_some(pool)
    }

    fn attribute(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> Option<u64> {
        let mut value: u64 = 0;
        // SAFETY: the four byte-count attributes read here are `cuuint64_t` (CUDA driver API docs).
        let rc = unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&mut value as *mut u64).cast()) };
        (rc == sys::CUresult::CUDA_SUCCESS).then_some(value)
    }

    pub fn bytes(device: &Device) -> Option<PoolBytes> {
        device.synchronize().ok()?;
        let pool = pool(device)?;
        use sys::CUmemPool_attribute::*;
        Some(PoolBytes {
            used: attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            used_high: attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
            reserved_high: attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        })
    }

    pub fn reset_peak(device: &Device) -> Option<()> {
        device.synchronize().ok()?;
        let pool = pool(device)?;
        use sys::CUmemPool_attribute::*;
        for attr in [CU_MEMPOOL_ATTR_USED_MEM_HIGH, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH] {
            // Only 0 may be written: it restarts the high-water mark from the current value.
            let mut zero: u64 = 0;
            // SAFETY: as in `attribute`; the value points at a live cuuint64_t.
            let rc = unsafe { sys::cuMemPoolSetAttribute(pool, attr, (&mut zero as *mut u64).cast()) };
            (rc == sys::CUresult::CUDA_SUCCESS).then_some(())?;
        }
        Some(())
    }
}

/// The pool's counters for `device`, or `None` on the CPU, without pools or without CUDA support.
pub fn bytes(device: &Device) -> Option<PoolBytes> {
    #[cfg(feature = "cuda")]
    return imp::bytes(device);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        None
    }
}

/// Restarts the high-water marks from the bytes live now; `None` where [`bytes`] has no counters.
pub fn reset_peak(device: &Device) -> Option<()> {
    #[cfg(feature = "cuda")]
    return imp::reset_peak(device);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_has_no_pool_counters() {
        assert_eq!(bytes(&Device::Cpu), None);
        assert_eq!(reset_peak(&Device::Cpu), None);
    }
}
