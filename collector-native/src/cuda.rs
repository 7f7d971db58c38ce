//! CUDA backend: the kernels of `kernels/*.cu` (compiled by NVRTC at run time, cached by source hash
//! and compute capability), CUDA-event timing with a real L2 flush before every timed run, and NCCL
//! all-to-all as grouped send/recv with one communicator per GPU inside this process.
//!
//! Nothing here links CUDA at build time (cudarc `dynamic-loading`): [`CudaBackend::new`] first checks
//! that the driver, NVRTC and (for comm) NCCL libraries can be loaded and returns an error naming the
//! missing one, because cudarc panics when a missing library is first used.
//!
//! Threads: NCCL communicators (`cudarc::nccl::Comm`) are not `Send`, and the forward all-to-all needs
//! every rank to start after its own delay, so each GPU gets a long-lived worker thread that creates
//! its communicator (`Comm::from_rank`) and runs the exchanges it is sent; a `Barrier` lines the ranks
//! up before every repetition.

// Kernel launches, raw NCCL group calls and the library-presence checks are `unsafe` in cudarc; they
// are confined to this module, each with the reason it is sound next to it.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileOptions, Ptx};
use planner_core::dataset::{BackendKind, Hardware, fnv1a64};
use planner_core::table::TableSpec;
use serde_json::json;

use crate::backend::{Backend, Timing, check_fp32};
use crate::cpu::{CommTimes, ComputeTimes, LEARNING_RATE};
use crate::workload::{Bags, CommSample};

/// Kernel sources, embedded in the binary.
pub const FWD_SRC: &str = include_str!("../../kernels/embedding_bag_fwd.cu");
/// Backward + SGD kernel source.
pub const BWD_SRC: &str = include_str!("../../kernels/embedding_bag_bwd.cu");
/// L2 flush and device-side fill kernels.
pub const FLUSH_SRC: &str = include_str!("../../kernels/l2_flush.cu");

const BLOCK: u32 = 256;

/// Whether the CUDA driver library can be loaded.
fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library and reports whether it worked; no CUDA call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn nvrtc_present() -> bool {
    // SAFETY: as for the driver, a dlopen probe.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn nccl_present() -> bool {
    // SAFETY: as for the driver, a dlopen probe.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// Where compiled PTX is cached across runs: `$XDG_CACHE_HOME/shardplan/ptx` or `~/.cache/shardplan/ptx`.
fn ptx_cache_dir() -> Option<PathBuf> {
    crate::backend::cache_dir("ptx")
}

/// Compiles `src` for compute capability `cc` with NVRTC, or loads it from the cache keyed by
/// (FNV-1a of the source, cc).
fn compile_cached(name: &str, src: &str, cc: (i32, i32)) -> Result<Ptx> {
    let key = format!("{name}-{:016x}-sm{}{}.ptx", fnv1a64(src.as_bytes()), cc.0, cc.1);
    let cached = ptx_cache_dir().map(|d| d.join(&key));
    if let Some(text) = cached.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        return Ok(Ptx::from_src(text));
    }
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{}{}", cc.0, cc.1), "-std=c++17".into()],
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map_err(|e| anyhow!("NVRTC failed to compile kernels/{name}.cu: {e:?}"))?;
    if let Some(path) = cached {
        // The cache is an optimisation: a read-only home directory must not stop a collection.
        if let Some(dir) = path.parent()
            && std::fs::create_dir_all(dir).is_ok()
        {
            // Atomic: another collector compiling the same kernel never reads half a file.
            let _ = shardplan_files::write_atomic(&path, ptx.to_src().as_bytes());
        }
    }
    Ok(ptx)
}

/// One GPU with its stream and loaded kernels.
struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    total_mem: usize,
    l2_bytes: usize,
    sms: u32,
    fwd: CudaFunction,
    bwd: CudaFunction,
    flush: CudaFunction,
    fill: CudaFunction,
}

impl Gpu {
    fn open(ordinal: usize) -> Result<Self> {
        let ctx = CudaContext::new(ordinal).with_context(|| format!("opening GPU {ordinal}"))?;
        let stream = ctx.default_stream();
        let cc = ctx.compute_capability()?;
        let l2_bytes = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize;
        let sms = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let load = |name: &str, src: &str, func: &str| -> Result<CudaFunction> {
            let module = ctx
                .load_module(compile_cached(name, src, cc)?)
                .with_context(|| format!("loading kernels/{name}.cu"))?;
            Ok(module.load_function(func)?)
        };
        Ok(Self {
            name: ctx.name()?,
            total_mem: ctx.total_mem()?,
            fwd: load("embedding_bag_fwd", FWD_SRC, "embedding_bag_fwd")?,
            bwd: load("embedding_bag_bwd", BWD_SRC, "embedding_bag_bwd_sgd")?,
            flush: load("l2_flush", FLUSH_SRC, "l2_flush")?,
            fill: load("l2_flush", FLUSH_SRC, "fill_uniform")?,
            ctx,
            stream,
            cc,
            l2_bytes,
            sms,
        })
    }

    fn grid_stride_cfg(&self) -> LaunchConfig {
        LaunchConfig { grid_dim: (self.sms * 8, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
    }

    fn fill(&self, buf: &mut CudaSlice<f32>, seed: u64) -> Result<()> {
        let n = buf.len() as u64;
        // SAFETY: `fill_uniform(float*, u64, u64)` matches the three arguments pushed; it writes only
        // indices < n, the length of `buf`.
        unsafe { self.stream.launch_builder(&self.fill).arg(buf).arg(&n).arg(&seed).launch(self.grid_stride_cfg()) }?;
        Ok(())
    }

    fn flush_l2(&self, buf: &mut CudaSlice<f32>) -> Result<()> {
        let n = buf.len() as u64;
        // SAFETY: `l2_flush(float*, u64)` matches the arguments; it touches only indices < n.
        unsafe { self.stream.launch_builder(&self.flush).arg(buf).arg(&n).launch(self.grid_stride_cfg()) }?;
        Ok(())
    }
}

/// A fused set resident on one GPU, in the layout the kernels expect (see `kernels/embedding_bag_fwd.cu`).
pub struct GpuSet {
    weights: CudaSlice<f32>,
    weight_offsets: CudaSlice<u64>,
    dims: CudaSlice<u32>,
    col_offsets: CudaSlice<u32>,
    indices: CudaSlice<u32>,
    offsets: CudaSlice<u64>,
    out: CudaSlice<f32>,
    grad: CudaSlice<f32>,
    num_tables: u32,
    batch: u32,
    total_dim: u32,
}

/// Host-side layout of a set: per-table weight offsets, column offsets, concatenated indices and
/// absolute bag offsets. Shared by the collection path and the correctness tests.
struct Layout {
    weight_offsets: Vec<u64>,
    dims: Vec<u32>,
    col_offsets: Vec<u32>,
    indices: Vec<u32>,
    offsets: Vec<u64>,
    total_weights: u64,
    total_dim: u32,
    batch: u32,
}

fn layout(dims_rows: &[(u32, u64)], bags: &[Bags]) -> Result<Layout> {
    let batch = bags.first().map_or(0, Bags::batch);
    let batch = u32::try_from(batch).map_err(|_| anyhow!("batch {batch} does not fit the kernels' 32-bit bag ids"))?;
    let mut l = Layout {
        weight_offsets: Vec::new(),
        dims: Vec::new(),
        col_offsets: Vec::new(),
        indices: Vec::with_capacity(bags.iter().map(|b| b.indices.len()).sum()),
        offsets: Vec::with_capacity(bags.len() * (batch as usize + 1)),
        total_weights: 0,
        total_dim: 0,
        batch,
    };
    for (&(dim, rows), b) in dims_rows.iter().zip(bags) {
        if b.batch() != batch as usize {
            bail!("every table of a set needs the same batch ({} vs {batch})", b.batch());
        }
        let base = l.indices.len() as u64;
        l.offsets.extend(b.offsets.iter().map(|&o| base + u64::from(o)));
        l.indices.extend_from_slice(&b.indices);
        l.weight_offsets.push(l.total_weights);
        l.dims.push(dim);
        l.col_offsets.push(l.total_dim);
        l.total_weights += rows * u64::from(dim);
        l.total_dim += dim;
    }
    Ok(l)
}

impl GpuSet {
    fn upload(gpu: &Gpu, l: &Layout, weights: Option<&[f32]>, grad: Option<&[f32]>, seed: u64) -> Result<Self> {
        let s = &gpu.stream;
        let out_len = l.batch as usize * l.total_dim as usize;
        let mut w = match weights {
            Some(h) => s.clone_htod(h)?,
            None => s.alloc_zeros::<f32>(l.total_weights as usize).context("allocating the weights on the GPU")?,
        };
        if weights.is_none() {
            gpu.fill(&mut w, seed)?;
        }
        let g = if let Some(h) = grad {
            s.clone_htod(h)?
        } else {
            let mut g = s.alloc_zeros::<f32>(out_len)?;
            gpu.fill(&mut g, seed ^ 0x6772_6164)?;
            g
        };
        Ok(Self {
            weights: w,
            weight_offsets: s.clone_htod(&l.weight_offsets)?,
            dims: s.clone_htod(&l.dims)?,
            col_offsets: s.clone_htod(&l.col_offsets)?,
            indices: s.clone_htod(&l.indices)?,
            offsets: s.clone_htod(&l.offsets)?,
            out: s.alloc_zeros::<f32>(out_len)?,
            grad: g,
            num_tables: l.dims.len() as u32,
            batch: l.batch,
            total_dim: l.total_dim,
        })
    }

    fn cfg(&self) -> LaunchConfig {
        let threads = u64::from(self.num_tables) * u64::from(self.batch) * 32;
        LaunchConfig {
            grid_dim: (threads.div_ceil(u64::from(BLOCK)) as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn forward(&mut self, gpu: &Gpu) -> Result<()> {
        let cfg = self.cfg();
        // SAFETY: the arguments match `embedding_bag_fwd`'s signature in order and type. The layout
        // invariants the kernel relies on hold by construction in `layout`: offsets are absolute and
        // within `indices`, every index < its table's rows (generator contract), weight/column offsets
        // and dims are multiples of 4, and the grid covers num_tables × batch warps (extra warps exit).
        unsafe {
            gpu.stream
                .launch_builder(&gpu.fwd)
                .arg(&self.weights)
                .arg(&self.weight_offsets)
                .arg(&self.dims)
                .arg(&self.col_offsets)
                .arg(&self.indices)
                .arg(&self.offsets)
                .arg(&mut self.out)
                .arg(&self.num_tables)
                .arg(&self.batch)
                .arg(&self.total_dim)
                .launch(cfg)
        }?;
        Ok(())
    }

    fn backward(&mut self, gpu: &Gpu) -> Result<()> {
        let cfg = self.cfg();
        let lr = LEARNING_RATE;
        // SAFETY: as for `forward`, with `embedding_bag_bwd_sgd`'s signature; concurrent writes to a
        // row are atomic adds.
        unsafe {
            gpu.stream
                .launch_builder(&gpu.bwd)
                .arg(&mut self.weights)
                .arg(&self.weight_offsets)
                .arg(&self.dims)
                .arg(&self.col_offsets)
                .arg(&self.indices)
                .arg(&self.offsets)
                .arg(&self.grad)
                .arg(&self.num_tables)
                .arg(&self.batch)
                .arg(&self.total_dim)
                .arg(&lr)
                .launch(cfg)
        }?;
        Ok(())
    }
}

/// One exchange a comm worker runs: per-peer float counts, its start delay and the repetitions.
struct CommJob {
    send_counts: Vec<usize>,
    recv_counts: Vec<usize>,
    delay: Duration,
    timing: Timing,
    barrier: Arc<Barrier>,
    reply: Sender<Result<Vec<f64>, String>>,
}

/// A long-lived thread owning one GPU's NCCL communicator.
struct CommWorker {
    jobs: Sender<CommJob>,
    handle: JoinHandle<()>,
}

fn comm_worker(
    ordinal: usize,
    rank: usize,
    world: usize,
    id: cudarc::nccl::Id,
    jobs: &Receiver<CommJob>,
    ready: &Sender<Result<(), String>>,
) {
    let setup = (|| -> Result<(Arc<CudaContext>, Arc<CudaStream>, cudarc::nccl::Comm)> {
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.new_stream()?;
        let comm = cudarc::nccl::Comm::from_rank(stream.clone(), rank, world, id)
            .map_err(|e| anyhow!("NCCL init of rank {rank}: {e:?}"))?;
        Ok((ctx, stream, comm))
    })();
    let (ctx, stream, comm) = match setup {
        Ok(v) => {
            let _ = ready.send(Ok(()));
            v
        }
        Err(e) => {
            let _ = ready.send(Err(format!("{e:#}")));
            return;
        }
    };
    while let Ok(job) = jobs.recv() {
        let result = run_exchange(&ctx, &stream, &comm, &job).map_err(|e| format!("rank {rank}: {e:#}"));
        let _ = job.reply.send(result);
    }
}

fn run_exchange(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    comm: &cudarc::nccl::Comm,
    job: &CommJob,
) -> Result<Vec<f64>> {
    let send_total: usize = job.send_counts.iter().sum();
    let recv_total: usize = job.recv_counts.iter().sum();
    let send = stream.alloc_zeros::<f32>(send_total.max(1))?;
    let mut recv = stream.alloc_zeros::<f32>(recv_total.max(1))?;
    let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    stream.synchronize()?;
    let mut times = Vec::new();
    let mut failure = None;
    for it in 0..job.timing.warmup + job.timing.reps {
        // Every rank reaches the barrier every repetition, even after a failure, so no peer waits forever.
        job.barrier.wait();
        if failure.is_some() {
            continue;
        }
        let step = (|| -> Result<f64> {
            if !job.delay.is_zero() {
                std::thread::sleep(job.delay);
            }
            start.record(stream)?;
            cudarc::nccl::result::group_start().map_err(|e| anyhow!("ncclGroupStart: {e:?}"))?;
            let (mut so, mut ro) = (0, 0);
            for peer in 0..job.send_counts.len() {
                let (ns, nr) = (job.send_counts[peer], job.recv_counts[peer]);
                let peer_i32 = i32::try_from(peer)?;
                if ns > 0 {
                    comm.send(&send.slice(so..so + ns), peer_i32).map_err(|e| anyhow!("ncclSend to {peer}: {e:?}"))?;
                }
                if nr > 0 {
                    comm.recv(&mut recv.slice_mut(ro..ro + nr), peer_i32)
                        .map_err(|e| anyhow!("ncclRecv from {peer}: {e:?}"))?;
                }
                so += ns;
                ro += nr;
            }
            cudarc::nccl::result::group_end().map_err(|e| anyhow!("ncclGroupEnd: {e:?}"))?;
            end.record(stream)?;
            end.synchronize()?;
            Ok(f64::from(start.elapsed_ms(&end)?))
        })();
        match step {
            Ok(ms) if it >= job.timing.warmup => times.push(ms),
            Ok(_) => {}
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(times),
    }
}

/// The CUDA backend: every visible GPU.
pub struct CudaBackend {
    gpus: Vec<Gpu>,
    hardware: Hardware,
    flush: bool,
    workers: Vec<CommWorker>,
    ptx_keys: HashMap<&'static str, u64>,
}

impl CudaBackend {
    /// Opens every visible GPU and compiles the kernels. Fails with a clear error (never a panic)
    /// where the driver or NVRTC cannot be loaded or no GPU is visible.
    pub fn new(flush: bool) -> Result<Self> {
        if !driver_present() {
            bail!(
                "the CUDA driver library (libcuda.so) cannot be loaded: this machine has no NVIDIA driver; use --backend cpu"
            );
        }
        if !nvrtc_present() {
            bail!("NVRTC (libnvrtc.so) cannot be loaded: add the CUDA toolkit's lib64 directory to LD_LIBRARY_PATH");
        }
        let count = CudaContext::device_count().context("counting GPUs")?;
        if count <= 0 {
            bail!("the CUDA driver reports no GPU; use --backend cpu");
        }
        let gpus = (0..count as usize).map(Gpu::open).collect::<Result<Vec<_>>>()?;
        let mut driver = 0i32;
        // SAFETY: the driver library is present (checked above) and `driver` is a valid out pointer.
        let _ = unsafe { cudarc::driver::sys::cuDriverGetVersion(&raw mut driver) };
        let (mut nv_major, mut nv_minor) = (0i32, 0i32);
        // SAFETY: NVRTC is present (checked above); both are valid out pointers.
        let _ = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&raw mut nv_major, &raw mut nv_minor) };
        let nccl = if nccl_present() { cudarc::nccl::result::get_nccl_version().ok() } else { None };
        let first = &gpus[0];
        let hardware = Hardware {
            backend: BackendKind::Cuda,
            fingerprint: format!("cuda:{}:sm{}{}:x{}:driver{driver}", first.name, first.cc.0, first.cc.1, gpus.len()),
            devices: gpus.iter().map(|g| g.name.clone()).collect(),
            software: format!(
                "driver {driver}, nvrtc {nv_major}.{nv_minor}, nccl {}, shardplan-collect {}",
                nccl.map_or_else(|| "absent".into(), |v| v.to_string()),
                env!("CARGO_PKG_VERSION")
            ),
        };
        let ptx_keys = [("embedding_bag_fwd", FWD_SRC), ("embedding_bag_bwd", BWD_SRC), ("l2_flush", FLUSH_SRC)]
            .into_iter()
            .map(|(n, s)| (n, fnv1a64(s.as_bytes())))
            .collect();
        Ok(Self { gpus, hardware, flush, workers: Vec::new(), ptx_keys })
    }

    fn gpu(&self, device: usize) -> Result<&Gpu> {
        self.gpus.get(device).ok_or_else(|| anyhow!("GPU {device} does not exist; {} visible", self.gpus.len()))
    }

    /// Starts (or restarts with another size) the per-GPU NCCL workers for `world` ranks.
    fn ensure_workers(&mut self, world: usize) -> Result<()> {
        if self.workers.len() == world {
            return Ok(());
        }
        for w in self.workers.drain(..) {
            drop(w.jobs);
            let _ = w.handle.join();
        }
        if !nccl_present() {
            bail!(
                "NCCL (libnccl.so) cannot be loaded: install it and put a `libnccl.so` on LD_LIBRARY_PATH \
                 (pip's nvidia-nccl ships only libnccl.so.2; see docs/COLLECTOR.md for the symlink)"
            );
        }
        let id = cudarc::nccl::Id::new().map_err(|e| anyhow!("ncclGetUniqueId: {e:?}"))?;
        let (ready_tx, ready_rx) = channel();
        for rank in 0..world {
            let (tx, rx) = channel::<CommJob>();
            let ready = ready_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("nccl-rank-{rank}"))
                .spawn(move || comm_worker(rank, rank, world, id, &rx, &ready))
                .context("spawning an NCCL worker")?;
            self.workers.push(CommWorker { jobs: tx, handle });
        }
        for _ in 0..world {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => bail!("NCCL setup failed: {e}"),
                Err(_) => bail!("an NCCL worker exited during setup"),
            }
        }
        Ok(())
    }

    /// Runs one all-to-all series on every rank; `counts(r)` gives rank r's (send, recv) per peer.
    fn exchange(
        &mut self,
        counts: &dyn Fn(usize) -> (Vec<usize>, Vec<usize>),
        delays: &[f64],
        timing: Timing,
    ) -> Result<Vec<Vec<f64>>> {
        let world = delays.len();
        self.ensure_workers(world)?;
        let barrier = Arc::new(Barrier::new(world));
        let mut replies = Vec::with_capacity(world);
        for (r, w) in self.workers.iter().enumerate() {
            let (send_counts, recv_counts) = counts(r);
            let (tx, rx) = channel();
            w.jobs
                .send(CommJob {
                    send_counts,
                    recv_counts,
                    delay: Duration::from_secs_f64(delays[r] / 1e3),
                    timing,
                    barrier: Arc::clone(&barrier),
                    reply: tx,
                })
                .map_err(|_| anyhow!("NCCL worker {r} is gone"))?;
            replies.push(rx);
        }
        replies
            .into_iter()
            .enumerate()
            .map(|(r, rx)| {
                rx.recv().map_err(|_| anyhow!("NCCL worker {r} died")).and_then(|x| x.map_err(|e| anyhow!(e)))
            })
            .collect()
    }

    /// Forward output and updated weights of one forward + backward (correctness tests).
    #[cfg(test)]
    fn run_once(&self, set: &crate::cpu::FusedSet, grad: &[f32]) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        let gpu = self.gpu(0)?;
        let dims_rows: Vec<(u32, u64)> = set.dims.iter().zip(&set.rows).map(|(&d, &r)| (d as u32, r as u64)).collect();
        let l = layout(&dims_rows, &set.bags)?;
        let flat: Vec<f32> = set.weights.iter().flatten().copied().collect();
        let mut g = GpuSet::upload(gpu, &l, Some(&flat), Some(grad), 0)?;
        g.forward(gpu)?;
        g.backward(gpu)?;
        let out = gpu.stream.clone_dtoh(&g.out)?;
        let w = gpu.stream.clone_dtoh(&g.weights)?;
        let mut per_table = Vec::new();
        let mut at = 0;
        for t in &set.weights {
            per_table.push(w[at..at + t.len()].to_vec());
            at += t.len();
        }
        Ok((out, per_table))
    }
}

impl Backend for CudaBackend {
    fn hardware(&self) -> &Hardware {
        &self.hardware
    }

    fn cache_flush(&self) -> bool {
        self.flush
    }

    fn max_comm_devices(&self) -> Option<usize> {
        Some(self.gpus.len())
    }

    fn memory_bytes(&self, device: usize) -> Result<u64> {
        let gpu = self.gpu(device)?;
        gpu.ctx.bind_to_thread()?;
        let (free, _) = gpu.ctx.mem_get_info()?;
        // Keep room for indices, outputs, gradients and the flush buffer next to the weights.
        Ok((free as u64).saturating_sub(1 << 30))
    }

    fn compute(
        &mut self,
        device: usize,
        tables: &[TableSpec],
        bags: Vec<Bags>,
        seed: u64,
        timing: Timing,
    ) -> Result<ComputeTimes> {
        check_fp32(tables)?;
        let gpu = self.gpu(device)?;
        gpu.ctx.bind_to_thread()?;
        let dims_rows: Vec<(u32, u64)> = tables.iter().map(|t| (t.dim, t.rows)).collect();
        let l = layout(&dims_rows, &bags)?;
        let mut set = GpuSet::upload(gpu, &l, None, None, seed)?;
        let mut flush_buf =
            if self.flush { Some(gpu.stream.alloc_zeros::<f32>((2 * gpu.l2_bytes).max(8 << 20) / 4)?) } else { None };
        let e0 = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let e1 = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let e2 = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let mut times = ComputeTimes::default();
        for it in 0..timing.warmup + timing.reps {
            if let Some(buf) = flush_buf.as_mut() {
                gpu.flush_l2(buf)?;
            }
            e0.record(&gpu.stream)?;
            set.forward(gpu)?;
            e1.record(&gpu.stream)?;
            set.backward(gpu)?;
            e2.record(&gpu.stream)?;
            e2.synchronize()?;
            if it >= timing.warmup {
                times.fwd_ms.push(f64::from(e0.elapsed_ms(&e1)?));
                times.bwd_ms.push(f64::from(e1.elapsed_ms(&e2)?));
            }
        }
        Ok(times)
    }

    fn comm(&mut self, sample: &CommSample, batch: usize, timing: Timing) -> Result<CommTimes> {
        let d = sample.device_dims.len();
        if d == 0 || d > self.gpus.len() {
            bail!("an all-to-all over {d} devices needs {d} GPUs; {} visible", self.gpus.len());
        }
        if batch < d {
            bail!("--batch-size = {batch} must be at least the device count {d}");
        }
        let rows = batch / d;
        let sums: Vec<usize> = sample.dim_sums().iter().map(|&x| x as usize).collect();
        // Forward: r sends rows × sums[r] to every s and receives rows × sums[s] from s.
        let fw = |r: usize| ((0..d).map(|_| rows * sums[r]).collect(), (0..d).map(|s| rows * sums[s]).collect());
        // Backward (the reverse): r sends rows × sums[s] to s and receives rows × sums[r] from everyone.
        let bw = |r: usize| ((0..d).map(|s| rows * sums[s]).collect(), (0..d).map(|_| rows * sums[r]).collect());
        let fw_ms = self.exchange(&fw, &sample.delays_ms, timing)?;
        let bw_ms = self.exchange(&bw, &vec![0.0; d], timing)?;
        Ok(CommTimes { fw_ms, bw_ms })
    }

    fn probe(&mut self) -> Result<serde_json::Value> {
        let mut devices = Vec::new();
        for (i, gpu) in self.gpus.iter().enumerate() {
            gpu.ctx.bind_to_thread()?;
            let bytes = (gpu.total_mem / 8).min(1 << 30) / 4 * 4;
            let src = gpu.stream.alloc_zeros::<u8>(bytes)?;
            let mut dst = gpu.stream.alloc_zeros::<u8>(bytes)?;
            let e0 = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            let e1 = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            let mut best = f64::INFINITY;
            for _ in 0..6 {
                e0.record(&gpu.stream)?;
                gpu.stream.memcpy_dtod(&src, &mut dst)?;
                e1.record(&gpu.stream)?;
                e1.synchronize()?;
                best = best.min(f64::from(e0.elapsed_ms(&e1)?));
            }
            devices.push(json!({
                "ordinal": i,
                "name": gpu.name,
                "compute_capability": format!("{}.{}", gpu.cc.0, gpu.cc.1),
                "total_mem_bytes": gpu.total_mem,
                "l2_bytes": gpu.l2_bytes,
                "multiprocessors": gpu.sms,
                "d2d_copy": {
                    "buffer_bytes": bytes,
                    "formula": "2 x buffer bytes (read + write) / best of 6 cudaMemcpy device-to-device, CUDA events",
                    "gb_per_s": 2.0 * bytes as f64 / (best / 1e3) / 1e9,
                },
            }));
        }
        Ok(json!({
            "backend": "cuda",
            "fingerprint": self.hardware.fingerprint,
            "software": self.hardware.software,
            "ptx_source_hashes": self.ptx_keys,
            "ptx_cache": ptx_cache_dir().map(|p| p.display().to_string()),
            "devices": devices,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{BackwardScratch, FusedSet, backward_sgd, fill, forward};
    use crate::workload::generate_bags;
    use planner_core::ElementType;
    use planner_core::pool::dlrm_pool;

    /// GPU tests run only with `SHARDPLAN_GPU_TESTS=1`; otherwise they say so and pass.
    fn gpu_tests_enabled(test: &str) -> bool {
        let on = std::env::var("SHARDPLAN_GPU_TESTS").is_ok_and(|v| v == "1");
        if !on {
            eprintln!("{test}: skipped (set SHARDPLAN_GPU_TESTS=1 on a machine with an NVIDIA GPU to run it)");
        }
        on
    }

    #[test]
    fn kernel_sources_are_embedded_and_declare_their_entry_points() {
        assert!(FWD_SRC.contains("extern \"C\" __global__ void embedding_bag_fwd("));
        assert!(BWD_SRC.contains("extern \"C\" __global__ void embedding_bag_bwd_sgd("));
        assert!(FLUSH_SRC.contains("void l2_flush(") && FLUSH_SRC.contains("void fill_uniform("));
    }

    #[test]
    fn layout_is_absolute_and_aligned() {
        let bags = vec![
            Bags { offsets: vec![0, 2, 3], indices: vec![1, 1, 0] },
            Bags { offsets: vec![0, 0, 1], indices: vec![4] },
        ];
        let l = layout(&[(8, 2), (4, 5)], &bags).unwrap();
        assert_eq!(l.offsets, vec![0, 2, 3, 3, 3, 4]);
        assert_eq!(l.indices, vec![1, 1, 0, 4]);
        assert_eq!(l.weight_offsets, vec![0, 16]);
        assert_eq!(l.col_offsets, vec![0, 8]);
        assert_eq!((l.total_dim, l.total_weights, l.batch), (12, 36, 2));
    }

    /// Fresh random sets (hot duplicated rows, several dims incl. > 128) on the GPU vs the CPU path,
    /// which is itself tested against a naive reference. Bound: |gpu − cpu| ≤ 1e-4·max(|gpu|,|cpu|) + 1e-6:
    /// the forward sums in the same order (only FMA contraction differs); the backward's atomics
    /// add in any order, a few ulps on sums of at most a few thousand terms of size ≤ 0.01.
    #[test]
    fn gpu_kernels_match_the_cpu_reference() {
        if !gpu_tests_enabled("gpu_kernels_match_the_cpu_reference") {
            return;
        }
        let backend = CudaBackend::new(false).unwrap();
        let pool = dlrm_pool().unwrap();
        for (round, dims) in [[4u32, 8, 16], [64, 128, 256]].into_iter().enumerate() {
            let tables: Vec<TableSpec> = dims
                .iter()
                .enumerate()
                .map(|(k, &d)| {
                    let p = &pool[(round * 97 + k * 31) % pool.len()];
                    let mut t = p.at_dim(format!("t{k}"), d, ElementType::Fp32).unwrap();
                    t.rows = t.rows.min(20_000);
                    t
                })
                .collect();
            let bags: Vec<Bags> =
                tables.iter().enumerate().map(|(k, t)| generate_bags(t, 513, 99 + k as u64).unwrap()).collect();
            let mut set = FusedSet::new(&tables, bags, 7 + round as u64, 2).unwrap();
            let mut grad = vec![0.0; set.batch * set.total_dim];
            fill(&mut grad, 11, 2);
            let (gpu_out, gpu_w) = backend.run_once(&set, &grad).unwrap();
            let mut out = vec![0.0; grad.len()];
            forward(&set, &mut out, 2);
            backward_sgd(&mut set, &grad, LEARNING_RATE, 2, &mut BackwardScratch::default());
            let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * a.abs().max(b.abs()) + 1e-6;
            assert!(out.iter().zip(&gpu_out).all(|(a, b)| close(*a, *b)), "forward differs (round {round})");
            for (t, w) in set.weights.iter().enumerate() {
                assert!(
                    w.iter().zip(&gpu_w[t]).all(|(a, b)| close(*a, *b)),
                    "backward differs for table {t} (round {round})"
                );
            }
        }
    }

    #[test]
    fn gpu_collection_and_all_to_all_run() {
        if !gpu_tests_enabled("gpu_collection_and_all_to_all_run") {
            return;
        }
        let mut backend = CudaBackend::new(true).unwrap();
        let t = dlrm_pool().unwrap()[5].at_dim("t".into(), 64, ElementType::Fp32).unwrap();
        let bags = vec![generate_bags(&t, 4096, 1).unwrap()];
        let times = backend.compute(0, std::slice::from_ref(&t), bags, 3, Timing { warmup: 2, reps: 3 }).unwrap();
        assert!(times.fwd_ms.iter().chain(&times.bwd_ms).all(|&x| x > 0.0));
        let d = backend.max_comm_devices().unwrap();
        let sample = crate::workload::sample_comm(d, 4, 20.0, 0.0, false);
        let c = backend.comm(&sample, 4096, Timing { warmup: 1, reps: 3 }).unwrap();
        assert_eq!(c.fw_ms.len(), d);
        assert!(c.fw_ms.iter().chain(&c.bw_ms).all(|v| v.len() == 3 && v.iter().all(|&x| x >= 0.0)));
    }
}
