//! `DistributedDataParallel`: a model's replicas kept identical across ranks, gradients
//! averaged in buckets after backward, buffers broadcast from rank 0.

use crate::bucket::{self, Bucket};
use crate::error::{DistributedError, Result};
use crate::ffi;
use crate::group::{Backend, ProcessGroup, ReduceOp};
use tch::{Device, Tensor};
use torchlight_nn::{named_tensors, Module, Role};

/// Settings of [`DistributedDataParallel`], with torch's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DdpConfig {
    /// Gradient bucket size in MiB (`bucket_cap_mb`); default 25.
    pub bucket_cap_mb: f64,
    /// Broadcast rank 0's buffers (BatchNorm's running statistics) to every rank at each
    /// [`DistributedDataParallel::sync_gradients`] (`broadcast_buffers`); default true.
    pub broadcast_buffers: bool,
    /// Tolerate trainable parameters without a gradient (`find_unused_parameters`): one extra
    /// small all-reduce per step finds the parameters no rank used, whose gradients stay unset,
    /// and gives those some ranks used a zero gradient where they are missing; default false,
    /// where a missing gradient is an error naming the parameter.
    pub find_unused_parameters: bool,
    /// Buffer broadcasts are bucketed too, with this cap in MiB (torch's 250).
    pub broadcast_bucket_mb: f64,
}

impl Default for DdpConfig {
    fn default() -> Self {
        DdpConfig {
            bucket_cap_mb: 25.0,
            broadcast_buffers: true,
            find_unused_parameters: false,
            broadcast_bucket_mb: 250.0,
        }
    }
}

impl DdpConfig {
    /// torch's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the gradient bucket size in MiB.
    pub fn with_bucket_cap_mb(mut self, mb: f64) -> Self {
        self.bucket_cap_mb = mb;
        self
    }

    /// Sets whether buffers are broadcast from rank 0 at each sync.
    pub fn with_broadcast_buffers(mut self, on: bool) -> Self {
        self.broadcast_buffers = on;
        self
    }

    /// Sets whether trainable parameters may lack a gradient.
    pub fn with_find_unused_parameters(mut self, on: bool) -> Self {
        self.find_unused_parameters = on;
        self
    }

    fn validate(&self) -> Result<()> {
        for (field, mb) in
            [("bucket_cap_mb", self.bucket_cap_mb), ("broadcast_bucket_mb", self.broadcast_bucket_mb)]
        {
            if !(mb.is_finite() && mb > 0.0) {
                return Err(DistributedError::Config {
                    field,
                    reason: format!("{mb} is not a positive size in MiB"),
                });
            }
        }
        Ok(())
    }
}

/// The gradient buckets for one set of participating parameters.
struct GradPlan {
    /// Fingerprint of (index, dtype, device, numel) of the participating parameters.
    key: i64,
    buckets: Vec<Bucket>,
}

/// `torch.nn.parallel.DistributedDataParallel` for any [`Module`], as a gradient
/// synchronizer beside the model rather than a wrapper around it.
///
/// Construction checks that every rank holds the same model (names, shapes, dtypes), then
/// broadcasts rank 0's parameters and buffers, so all replicas start equal. After each
/// backward that ends an optimizer step, [`sync_gradients`](Self::sync_gradients) averages the
/// gradients over the ranks (in buckets of about 25 MiB, each one flat all-reduce) and
/// broadcasts rank 0's buffers; the optimizer step then moves every replica the same way. Its
/// state_dict keys are the model's own: there is no `module.` prefix.
///
/// ```no_run
/// # use torchlight_distributed::*;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let (model, xs, ys) = (torchlight_nn::resnet18(3), tch::Tensor::zeros([8, 3, 64, 64], (tch::Kind::Float, tch::Device::Cpu)), tch::Tensor::zeros([8], (tch::Kind::Int64, tch::Device::Cpu)));
/// use tch::nn::ModuleT;
/// let pg = ProcessGroup::init_from_env(&InitOptions::default())?;
/// let mut ddp = DistributedDataParallel::new(&model, &pg, DdpConfig::default())?;
/// let loss = model.forward_t(&xs, true).cross_entropy_for_logits(&ys);
/// loss.backward();
/// ddp.sync_gradients()?; // after the last backward of the step, before clipping/unscaling
/// // optimizer.step() ...
/// # Ok(()) }
/// ```
///
/// Gradient accumulation: call `sync_gradients` only after the last micro-batch's backward;
/// the earlier backwards accumulate locally, which is what torch's `no_sync()` does. With a
/// GradScaler, sync the scaled gradients (averaging commutes with the scale) and unscale
/// after.
pub struct DistributedDataParallel {
    group: ProcessGroup,
    config: DdpConfig,
    params: Vec<(String, Tensor)>,
    buffers: Vec<(String, Tensor)>,
    grad_plan: Option<GradPlan>,
    buffer_buckets: Vec<Bucket>,
}

impl DistributedDataParallel {
    /// Checks that all ranks hold the same model and broadcasts rank 0's parameters and buffers
    /// (a collective: every rank calls it at the same point).
    pub fn new(model: &dyn Module, group: &ProcessGroup, config: DdpConfig) -> Result<Self> {
        config.validate()?;
        let mut params = Vec::new();
        let mut buffers = Vec::new();
        for (name, tensor, role) in named_tensors(model) {
            match role {
                Role::Parameter => params.push((name, tensor)),
                Role::Buffer => buffers.push((name, tensor)),
            }
        }
        let buffer_cap = mib(config.broadcast_bucket_mb);
        let buffer_buckets = bucket::plan(buffers.iter().enumerate().map(|(i, (_, t))| (i, t)), buffer_cap);
        let ddp = DistributedDataParallel {
            group: group.clone(),
            config,
            params,
            buffers,
            grad_plan: None,
            buffer_buckets,
        };
        ddp.check_same_model()?;
        ddp.broadcast_from_rank0()?;
        Ok(ddp)
    }

    /// Whether `model`'s parameters are the ones this synchronizer was built for (the same
    /// tensors, not copies).
    pub(crate) fn is_for(&self, model: &dyn Module) -> bool {
        let theirs = torchlight_nn::named_parameters(model);
        theirs.len() == self.params.len()
            && theirs.iter().zip(&self.params).all(|((a, x), (b, y))| a == b && x.data_ptr() == y.data_ptr())
    }

    /// The process group.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The settings.
    pub fn config(&self) -> &DdpConfig {
        &self.config
    }

    /// Copies rank 0's parameters and buffers to every rank (DDP's start-up
    /// `_sync_module_states`), e.g. after only rank 0 loaded a checkpoint.
    pub fn broadcast_from_rank0(&self) -> Result<()> {
        let cap = mib(self.config.broadcast_bucket_mb);
        let all: Vec<&Tensor> = self.params.iter().chain(&self.buffers).map(|(_, t)| t).collect();
        let buckets = bucket::plan(all.iter().copied().enumerate(), cap);
        self.broadcast_buckets(&buckets, &all)
    }

    /// Broadcasts rank 0's buffers (BatchNorm running statistics) to every rank.
    pub fn broadcast_buffers(&self) -> Result<()> {
        let buffers: Vec<&Tensor> = self.buffers.iter().map(|(_, t)| t).collect();
        self.broadcast_buckets(&self.buffer_buckets, &buffers)
    }

    fn broadcast_buckets(&self, buckets: &[Bucket], tensors: &[&Tensor]) -> Result<()> {
        let _guard = torchlight_tensor::no_grad();
        let mut pending = Vec::with_capacity(buckets.len());
        for b in buckets {
            if self.group.is_main() {
                bucket::flatten_into(&b.flat, b.members.iter().map(|&i| tensors[i]));
            }
            pending.push(self.group.broadcast_async(&b.flat, 0)?);
        }
        for (work, b) in pending.into_iter().zip(buckets) {
            work.wait()?;
            if !self.group.is_main() {
                bucket::unflatten_into(&b.flat, b.members.iter().map(|&i| tensors[i]));
            }
        }
        Ok(())
    }

    /// Averages the trainable parameters' gradients over all ranks and, with
    /// `broadcast_buffers`, copies rank 0's buffers to every rank: call it after the backward
    /// that ends an optimizer step, on every rank. Parameters with `requires_grad` off are left
    /// alone, so freezing and unfreezing need no new `DistributedDataParallel` (every rank must
    /// freeze the same ones; a mismatch is an error naming the ranks).
    pub fn sync_gradients(&mut self) -> Result<()> {
        let rank = self.group.rank();
        let trainable: Vec<usize> =
            (0..self.params.len()).filter(|&i| self.params[i].1.requires_grad()).collect();
        let mut participating = Vec::with_capacity(trainable.len());
        let mut unused_here = Vec::new();
        for &i in &trainable {
            if self.params[i].1.grad().defined() {
                participating.push(i);
            } else if self.config.find_unused_parameters {
                unused_here.push(i);
            } else {
                return Err(DistributedError::MissingGradient { rank, name: self.params[i].0.clone() });
            }
        }
        if self.config.find_unused_parameters {
            participating = self.used_somewhere(&trainable, &unused_here)?;
        }
        let grads: Vec<Tensor> = participating.iter().map(|&i| self.params[i].1.grad()).collect();
        self.ensure_grad_plan(&participating, &grads)?;
        let plan = self.grad_plan.as_ref().expect("just built");

        let world = self.group.world_size() as f64;
        let mut pending = Vec::with_capacity(plan.buckets.len());
        {
            let _guard = torchlight_tensor::no_grad();
            for b in &plan.buckets {
                bucket::flatten_into(&b.flat, b.members.iter().map(|&k| &grads[k]));
                // Divided before the sum, as DDP does, so low-precision sums do not overflow.
                let _ = b.flat.shallow_clone().divide_scalar_(world);
                pending.push(self.group.all_reduce_async(&b.flat, ReduceOp::Sum)?);
            }
        }
        if self.config.broadcast_buffers {
            self.broadcast_buffers()?;
        }
        let _guard = torchlight_tensor::no_grad();
        for (work, b) in pending.into_iter().zip(&plan.buckets) {
            work.wait()?;
            bucket::unflatten_into(&b.flat, b.members.iter().map(|&k| &grads[k]));
        }
        Ok(())
    }

    /// With `find_unused_parameters`: the trainable parameters some rank used, in order, after
    /// giving those this rank did not use a zero gradient.
    fn used_somewhere(&self, trainable: &[usize], unused_here: &[usize]) -> Result<Vec<usize>> {
        let device = self.control_device();
        let mask: Vec<u8> = trainable.iter().map(|i| u8::from(!unused_here.contains(i))).collect();
        let used = Tensor::from_slice(&mask).to_device(device);
        self.group.all_reduce(&used, ReduceOp::Max)?;
        let used =
            Vec::<u8>::try_from(&used.to_device(Device::Cpu)).map_err(|e| DistributedError::Tensor {
                rank: self.group.rank(),
                op: "find_unused_parameters",
                reason: e.to_string(),
            })?;
        let mut participating = Vec::new();
        for (&i, &u) in trainable.iter().zip(&used) {
            if u == 0 {
                continue;
            }
            if unused_here.contains(&i) {
                let param = &self.params[i].1;
                let zeros = param.zeros_like();
                // SAFETY: both tensors are live; the shim only sets the parameter's grad field.
                let rc = unsafe { ffi::tl_dist_set_grad(ffi::raw(param), ffi::raw(&zeros)) };
                ffi::check(
                    Some(self.group.rank()),
                    || format!("give `{}` a zero gradient", self.params[i].0),
                    rc,
                )?;
            }
            participating.push(i);
        }
        Ok(participating)
    }

    /// Rebuilds the gradient buckets when the participating parameters changed (first step,
    /// freezing, a move to another device), after checking that every rank agrees.
    fn ensure_grad_plan(&mut self, participating: &[usize], grads: &[Tensor]) -> Result<()> {
        let mut h = Fingerprint::new();
        for (&i, g) in participating.iter().zip(grads) {
            h.add_str(&format!("{:?}", g.kind()));
            h.add(&[i as i64, device_code(g.device()), g.numel() as i64]);
        }
        let key = h.finish();
        if self.grad_plan.as_ref().is_some_and(|p| p.key == key) {
            return Ok(());
        }
        let count = participating.len() as i64;
        let elements: i64 = grads.iter().map(|g| g.numel() as i64).sum();
        if let Some(differing) = self.differing_ranks([key, count, elements])? {
            return Err(DistributedError::Mismatch {
                rank: self.group.rank(),
                detail: format!(
                    "the parameters with gradients to average differ across ranks ({differing}); every \
                     rank must freeze and unfreeze the same parameters and run the same model"
                ),
            });
        }
        // Later layers' gradients come first, as torch's DDP orders its buckets.
        let cap = mib(self.config.bucket_cap_mb);
        let buckets = bucket::plan(grads.iter().enumerate().rev(), cap);
        self.grad_plan = Some(GradPlan { key, buckets });
        Ok(())
    }

    /// Fails unless every rank holds a model with the same tensor names, roles, shapes and
    /// dtypes.
    fn check_same_model(&self) -> Result<()> {
        let mut h = Fingerprint::new();
        let mut elements = 0i64;
        for (role, list) in [(0, &self.params), (1, &self.buffers)] {
            for (name, t) in list.iter() {
                h.add_str(name);
                h.add_str(&format!("{:?}", t.kind()));
                h.add(&[role]);
                h.add(&t.size());
                elements += t.numel() as i64;
            }
        }
        let count = (self.params.len() + self.buffers.len()) as i64;
        match self.differing_ranks([h.finish(), count, elements])? {
            None => Ok(()),
            Some(differing) => Err(DistributedError::Mismatch {
                rank: self.group.rank(),
                detail: format!(
                    "the model differs across ranks in its tensor names, shapes or dtypes ({differing}); \
                     DistributedDataParallel needs the same model on every rank"
                ),
            }),
        }
    }

    /// All-gathers `[fingerprint, count, elements]`; `None` when every rank agrees with rank 0,
    /// else a description of the ranks that differ, with their counts of tensors and elements.
    fn differing_ranks(&self, values: [i64; 3]) -> Result<Option<String>> {
        let mine = Tensor::from_slice(&values).to_device(self.control_device());
        let all: Vec<Vec<i64>> = self
            .group
            .all_gather(&mine)?
            .iter()
            .map(|t| Vec::<i64>::try_from(&t.to_device(Device::Cpu)).unwrap_or_default())
            .collect();
        let differing: Vec<usize> = (1..all.len()).filter(|&r| all[r] != all[0]).collect();
        if differing.is_empty() {
            return Ok(None);
        }
        let count = |r: usize| format!("rank {r}: {} tensors, {} elements", all[r][1], all[r][2]);
        let mut text = count(0);
        for r in differing {
            text.push_str("; ");
            text.push_str(&count(r));
        }
        Ok(Some(text))
    }

    /// Where small control tensors live: CPU for Gloo, the model's GPU for NCCL.
    fn control_device(&self) -> Device {
        match self.group.backend() {
            Backend::Gloo => Device::Cpu,
            Backend::Nccl => self.params.first().map_or(Device::Cpu, |(_, t)| t.device()),
        }
    }
}

fn mib(mb: f64) -> usize {
    (mb * 1024.0 * 1024.0) as usize
}

fn device_code(device: Device) -> i64 {
    match device {
        Device::Cpu => -1,
        Device::Cuda(i) => i as i64,
        Device::Mps => -2,
        Device::Vulkan => -3,
    }
}

/// FNV-1a over integers and strings, as an `i64` for a tensor.
struct Fingerprint(u64);

impl Fingerprint {
    fn new() -> Self {
        Fingerprint(0xcbf2_9ce4_8422_2325)
    }

    fn add_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn add(&mut self, values: &[i64]) {
        for v in values {
            self.add_bytes(&v.to_le_bytes());
        }
        self.add_bytes(b";");
    }

    fn add_str(&mut self, s: &str) {
        self.add_bytes(s.as_bytes());
        self.add_bytes(b"\0");
    }

    fn finish(&self) -> i64 {
        self.0 as i64
    }
}
