//! `BatchNorm2d` (`torch.nn.BatchNorm2d`), with running statistics and `num_batches_tracked`,
//! and the hook through which a data-parallel world synchronises its batch statistics
//! (`torch.nn.SyncBatchNorm`).

use crate::module::{visit_modules_mut, Module};
use crate::options::LayerOptions;
use std::cell::RefCell;
use std::sync::Arc;
use tch::{Kind, Tensor};
use torchlight_tensor::no_grad;

/// Options of a [`BatchNorm2d`], with PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormConfig {
    /// Added to the variance for stability (default 1e-5).
    pub eps: f64,
    /// Weight of the new batch statistics in the running average (default 0.1);
    /// `None` means a cumulative average over all batches (`1 / num_batches_tracked`).
    pub momentum: Option<f64>,
    /// Learnable `weight` and `bias` (default on).
    pub affine: bool,
    /// Keep running statistics for evaluation (default on).
    pub track_running_stats: bool,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        BatchNormConfig { eps: 1e-5, momentum: Some(0.1), affine: true, track_running_stats: true }
    }
}

/// Batch normalisation over `[N, C, H, W]`, per channel.
///
/// In training (`forward_t(.., true)`) it normalises with the batch's statistics and, when
/// tracking, updates `running_mean` / `running_var` (unbiased) and increments
/// `num_batches_tracked`; in evaluation it uses the running statistics and changes nothing.
///
/// # Panics
/// Normalising with batch statistics over one value per channel (`N * H * W == 1`: a batch of
/// one whose feature map is 1x1) panics with PyTorch's message, "Expected more than 1 value
/// per channel when training, got input size [1, C, 1, 1]": its variance is 0 and its unbiased
/// running variance NaN, which would poison the running statistics without a word.
/// [`probe_single_value_batch_norm`] finds such an input without panicking.
#[derive(Debug, Module)]
pub struct BatchNorm2d {
    /// `[C]` scale, when affine.
    #[param]
    pub weight: Option<Tensor>,
    /// `[C]` shift, when affine.
    #[param]
    pub bias: Option<Tensor>,
    /// `[C]` running mean, when tracking.
    #[buffer]
    pub running_mean: Option<Tensor>,
    /// `[C]` running variance, when tracking.
    #[buffer]
    pub running_var: Option<Tensor>,
    /// Scalar int64 count of training batches seen, when tracking.
    #[buffer]
    pub num_batches_tracked: Option<Tensor>,
    /// eps, momentum, affine, tracking.
    #[module(skip)]
    pub config: BatchNormConfig,
    /// Frozen, as timm's `freeze_batch_norm_2d` and Lightning's
    /// `BaseFinetuning.freeze(train_bn=False)` leave a BatchNorm: the layer behaves as in
    /// evaluation whatever `forward_t`'s `train` says (it normalises with the running
    /// statistics and never updates them or `num_batches_tracked`). Set with
    /// [`freeze_batch_norm`], which also stops its weight and bias training. Not part of the
    /// `state_dict`: a program sets it again after building the model. Default off.
    #[module(skip)]
    pub frozen: bool,
    /// The synchronised batch normalisation a training forward runs instead of the plain one
    /// (`torch.nn.SyncBatchNorm`), set by a data-parallel world (torchlight-distributed's
    /// `convert_sync_batchnorm`); `None` (the default) is plain BatchNorm. Evaluation and a
    /// [`frozen`](Self::frozen) layer stay plain. Not part of the `state_dict`: the parameters
    /// and buffers are the same either way, so checkpoints and exports do not change.
    #[module(skip)]
    pub sync: Option<Arc<dyn BatchNormSync>>,
}

/// A batch normalisation whose batch statistics cover more than this process's batch: the
/// training forward of a [`BatchNorm2d`] with [`sync`](BatchNorm2d::sync) set. nn defines the
/// hook; torchlight-distributed implements it over a process group (so nn needs no
/// collectives).
pub trait BatchNormSync: std::fmt::Debug + Send + Sync {
    /// The training forward over `xs` `[N, C, ...]`: normalised with the mean and biased
    /// variance over every participant's batch, `running_mean` / `running_var` (when given)
    /// updated in place with `momentum` and the unbiased variance over the total count, as
    /// `F.batch_norm(training=True)` on the concatenated batch would; its backward must give
    /// that batch's gradients too.
    ///
    /// # Panics
    /// When the participants cannot agree (a peer failed, the timeout passed) or hold one
    /// value per channel in all; a forward has no error channel.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm(
        &self,
        xs: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        running_mean: Option<&Tensor>,
        running_var: Option<&Tensor>,
        momentum: f64,
        eps: f64,
    ) -> Tensor;
}

/// Sets (or, with `None`, clears) the [`sync`](BatchNorm2d::sync) hook of every
/// [`BatchNorm2d`] of `module`, frozen ones included (they stay plain while frozen and
/// synchronise once thawed). Returns how many layers it set.
pub fn set_batch_norm_sync(module: &mut dyn Module, sync: Option<Arc<dyn BatchNormSync>>) -> usize {
    let mut count = 0;
    visit_modules_mut(module, &mut |_, m| {
        if let Some(bn) = m.as_any_mut().downcast_mut::<BatchNorm2d>() {
            bn.sync = sync.clone();
            count += 1;
        }
    });
    count
}

impl BatchNorm2d {
    /// A float32 CPU layer over `num_features` channels: weight 1, bias 0, running mean 0,
    /// variance 1.
    pub fn new(num_features: i64, config: BatchNormConfig) -> Self {
        Self::new_on(num_features, config, LayerOptions::default())
    }

    /// The layer with its tensors created in `options`' dtype on its device
    /// (`num_batches_tracked` stays int64), initialised unless skipped.
    pub fn new_on(num_features: i64, config: BatchNormConfig, options: impl Into<LayerOptions>) -> Self {
        let o = options.into();
        let n = [num_features];
        let (weight, bias) = if config.affine {
            (
                Some(o.full(&n, 1.0, o.kind).set_requires_grad(true)),
                Some(o.full(&n, 0.0, o.kind).set_requires_grad(true)),
            )
        } else {
            (None, None)
        };
        let track = config.track_running_stats;
        BatchNorm2d {
            weight,
            bias,
            running_mean: track.then(|| o.full(&n, 0.0, o.kind)),
            running_var: track.then(|| o.full(&n, 1.0, o.kind)),
            num_batches_tracked: track.then(|| o.full(&[], 0.0, Kind::Int64)),
            config,
            frozen: false,
            sync: None,
        }
    }
}

/// Freezes every [`BatchNorm2d`] of `module` (timm's `freeze_batch_norm_2d`, Lightning's
/// `BaseFinetuning.freeze(train_bn=False)`): each is [`frozen`](BatchNorm2d::frozen), so
/// training forwards use and keep its running statistics, and its weight and bias stop
/// training (`requires_grad` off). [`unfreeze`](crate::unfreeze) and
/// [`freeze_all_but`](crate::freeze_all_but) leave a frozen BatchNorm's parameters frozen
/// (so a backbone unfrozen after its first epochs keeps its BatchNorms fixed); only
/// [`unfreeze_batch_norm`] thaws them. Returns how many layers it froze (those already frozen
/// included).
pub fn freeze_batch_norm(module: &mut dyn Module) -> usize {
    set_batch_norm_frozen(module, true)
}

/// Undoes [`freeze_batch_norm`]: every [`BatchNorm2d`] trains again, statistics and
/// parameters. Returns how many layers it changed or kept unfrozen.
pub fn unfreeze_batch_norm(module: &mut dyn Module) -> usize {
    set_batch_norm_frozen(module, false)
}

fn set_batch_norm_frozen(module: &mut dyn Module, frozen: bool) -> usize {
    let mut count = 0;
    visit_modules_mut(module, &mut |_, m| {
        if let Some(bn) = m.as_any_mut().downcast_mut::<BatchNorm2d>() {
            bn.frozen = frozen;
            for p in [&bn.weight, &bn.bias].into_iter().flatten() {
                let _ = p.shallow_clone().set_requires_grad(!frozen);
            }
            count += 1;
        }
    });
    count
}

thread_local! {
    /// While [`probe_single_value_batch_norm`] runs on this thread: the first input seen that
    /// would leave a BatchNorm one value per channel, instead of a panic.
    static PROBE: RefCell<Option<Option<Vec<i64>>>> = const { RefCell::new(None) };
}

/// Runs `forward` (a training-mode forward pass) and returns the shape of the first input with
/// which a [`BatchNorm2d`] in it would normalise over one value per channel (the case PyTorch
/// refuses, see [`BatchNorm2d`]'s panics), or `None` when every BatchNorm sees more. Such a
/// layer does not panic during the probe; its running statistics are then not to be trusted,
/// so probe a throwaway model.
pub fn probe_single_value_batch_norm(forward: impl FnOnce()) -> Option<Vec<i64>> {
    PROBE.with(|p| *p.borrow_mut() = Some(None));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            PROBE.with(|p| *p.borrow_mut() = None);
        }
    }
    let _reset = Reset;
    forward();
    PROBE.with(|p| p.borrow().clone().flatten())
}

/// PyTorch's `_verify_batch_size`: batch statistics need more than one value per channel.
fn verify_batch_size(xs: &Tensor) {
    let size = xs.size();
    let values: i64 = size.first().copied().unwrap_or(1) * size.iter().skip(2).product::<i64>();
    if values != 1 {
        return;
    }
    let probed = PROBE.with(|p| match p.borrow_mut().as_mut() {
        Some(first) => {
            first.get_or_insert(size.clone());
            true
        }
        None => false,
    });
    if !probed {
        panic!("Expected more than 1 value per channel when training, got input size {size:?}");
    }
}

impl tch::nn::ModuleT for BatchNorm2d {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        let train = train && !self.frozen;
        let tracking = self.running_mean.is_some();
        let sync = self.sync.as_ref().filter(|_| train);
        // A synchronised layer checks the count over every rank instead.
        if (train || !tracking) && sync.is_none() {
            verify_batch_size(xs);
        }
        let mut momentum = self.config.momentum.unwrap_or(0.0);
        if train {
            if let Some(n) = &self.num_batches_tracked {
                let _guard = no_grad();
                let _ = n.shallow_clone().g_add_scalar_(1);
                if self.config.momentum.is_none() {
                    // A cumulative average needs the count on the host, as in PyTorch.
                    momentum = 1.0 / n.int64_value(&[]) as f64;
                }
            }
        }
        if let Some(sync) = sync {
            return sync.batch_norm(
                xs,
                self.weight.as_ref(),
                self.bias.as_ref(),
                self.running_mean.as_ref(),
                self.running_var.as_ref(),
                momentum,
                self.config.eps,
            );
        }
        xs.batch_norm(
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.running_mean.as_ref(),
            self.running_var.as_ref(),
            train || !tracking,
            momentum,
            self.config.eps,
            true,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::{count_parameters, freeze_all_but, named_buffers, named_parameters, unfreeze};
    use tch::nn::ModuleT;
    use tch::Device;

    /// PyTorch refuses batch statistics over one value per channel
    /// (`torch.nn.BatchNorm2d(3).train()(torch.zeros(1, 3, 1, 1))` raises "Expected more than 1
    /// value per channel when training, got input size torch.Size([1, 3, 1, 1])"), in training
    /// and without running statistics; evaluation, a frozen layer and two values pass.
    #[test]
    fn one_value_per_channel_in_training_panics_as_pytorch_refuses_it() {
        let one = Tensor::zeros([1, 3, 1, 1], (Kind::Float, Device::Cpu));
        let bn = BatchNorm2d::new(3, BatchNormConfig::default());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bn.forward_t(&one, true)));
        let message =
            *caught.expect_err("a training forward over [1, 3, 1, 1]").downcast::<String>().unwrap();
        assert_eq!(
            message,
            "Expected more than 1 value per channel when training, got input size [1, 3, 1, 1]"
        );
        assert_eq!(
            bn.running_var.as_ref().unwrap().sum(Kind::Float).double_value(&[]),
            3.0,
            "statistics untouched"
        );

        let untracked =
            BatchNorm2d::new(3, BatchNormConfig { track_running_stats: false, ..Default::default() });
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| untracked.forward_t(&one, false)))
            .is_err());

        let _ = bn.forward_t(&one, false);
        let _ = bn.forward_t(&Tensor::zeros([2, 3, 1, 1], (Kind::Float, Device::Cpu)), true);
        let _ = bn.forward_t(&Tensor::zeros([1, 3, 2, 1], (Kind::Float, Device::Cpu)), true);
        let mut frozen = BatchNorm2d::new(3, BatchNormConfig::default());
        freeze_batch_norm(&mut frozen);
        let _ = frozen.forward_t(&one, true);

        // The probe reports the first such input instead, once, and leaves the thread as it was.
        let seen = probe_single_value_batch_norm(|| {
            let _ = bn.forward_t(&one, true);
            let _ = bn.forward_t(&Tensor::zeros([1, 3, 1, 1], (Kind::Float, Device::Cpu)), true);
        });
        assert_eq!(seen, Some(vec![1, 3, 1, 1]));
        assert_eq!(
            probe_single_value_batch_norm(|| drop(
                bn.forward_t(&Tensor::zeros([2, 3, 1, 1], (Kind::Float, Device::Cpu)), true)
            )),
            None
        );
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bn.forward_t(&one, true))).is_err());
    }

    fn snapshot(m: &dyn Module) -> Vec<(String, Tensor)> {
        let mut all = named_parameters(m);
        all.extend(named_buffers(m));
        all.into_iter().map(|(n, t)| (n, t.detach().copy())).collect()
    }

    fn unchanged(before: &[(String, Tensor)], m: &dyn Module) -> bool {
        snapshot(m).iter().zip(before).all(|((_, a), (_, b))| a.equal(b))
    }

    #[test]
    fn a_frozen_batch_norm_trains_as_it_evaluates_and_keeps_its_statistics() {
        let mut bn = BatchNorm2d::new(3, BatchNormConfig::default());
        let x = Tensor::randn([4, 3, 5, 5], (Kind::Float, Device::Cpu)) * 3.0 + 1.0;
        let _ = bn.forward_t(&x, true); // statistics that are not the initial ones
        let before = snapshot(&bn);
        assert_eq!(freeze_batch_norm(&mut bn), 1);
        assert!(bn.frozen && !bn.weight.as_ref().unwrap().requires_grad());
        let train = bn.forward_t(&x, true);
        assert!(train.equal(&bn.forward_t(&x, false)), "train mode is eval mode");
        assert!(unchanged(&before, &bn), "running stats and num_batches_tracked kept");
        assert_eq!(unfreeze_batch_norm(&mut bn), 1);
        assert!(bn.weight.as_ref().unwrap().requires_grad());
        let _ = bn.forward_t(&x, true);
        assert!(!unchanged(&before, &bn), "thawed, it tracks again");
    }

    /// A hook that counts its calls and runs plain BatchNorm.
    #[derive(Debug, Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl BatchNormSync for Counting {
        fn batch_norm(
            &self,
            xs: &Tensor,
            weight: Option<&Tensor>,
            bias: Option<&Tensor>,
            running_mean: Option<&Tensor>,
            running_var: Option<&Tensor>,
            momentum: f64,
            eps: f64,
        ) -> Tensor {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            xs.batch_norm(weight, bias, running_mean, running_var, true, momentum, eps, true)
        }
    }

    #[test]
    fn only_training_forwards_of_unfrozen_layers_reach_the_sync_hook() {
        let hook = Arc::new(Counting::default());
        let calls = || hook.0.load(std::sync::atomic::Ordering::SeqCst);
        let mut model = crate::resnet::resnet18(4);
        let keys = |m: &dyn Module| snapshot(m).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        let before = keys(&model);
        assert_eq!(set_batch_norm_sync(&mut model, Some(hook.clone())), 20);
        assert_eq!(keys(&model), before, "the same parameters and buffers");
        let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
        let _ = model.forward_t(&x, false);
        assert_eq!(calls(), 0, "eval is plain");
        let _ = model.forward_t(&x, true);
        assert_eq!(calls(), 20, "every BatchNorm in training");
        // The momentum handed over is the layer's; a cumulative average's is 1/num_batches.
        let mut bn = BatchNorm2d::new(3, BatchNormConfig { momentum: None, ..Default::default() });
        set_batch_norm_sync(&mut bn, Some(hook.clone()));
        let xs = Tensor::randn([4, 3, 2, 2], (Kind::Float, Device::Cpu));
        let _ = bn.forward_t(&xs, true);
        let _ = bn.forward_t(&xs, true);
        assert_eq!(bn.num_batches_tracked.as_ref().unwrap().int64_value(&[]), 2);
        freeze_batch_norm(&mut model);
        let _ = model.forward_t(&x, true);
        assert_eq!(calls(), 22, "frozen layers are plain");
        unfreeze_batch_norm(&mut model);
        assert_eq!(set_batch_norm_sync(&mut model, None), 20);
        let _ = model.forward_t(&x, true);
        assert_eq!(calls(), 22, "cleared");
    }

    #[test]
    fn unfreezing_a_backbone_leaves_its_frozen_batch_norms_frozen() {
        let mut model = crate::resnet::resnet18(4);
        assert_eq!(freeze_batch_norm(&mut model), 20);
        let bn_values: i64 = named_parameters(&model)
            .iter()
            .filter(|(n, _)| n.contains("bn") || n.contains("downsample.1"))
            .map(|(_, t)| t.numel() as i64)
            .sum();
        let total = count_parameters(&model).total;
        assert_eq!(count_parameters(&model).trainable, total - bn_values);
        freeze_all_but(&model, "fc.");
        assert_eq!(count_parameters(&model).trainable, 4 * 512 + 4);
        unfreeze(&model, "");
        assert_eq!(count_parameters(&model).trainable, total - bn_values, "BatchNorms stay frozen");
        unfreeze_batch_norm(&mut model);
        assert_eq!(count_parameters(&model).trainable, total);
    }
}
