//! GPU tests (feature `cuda-tests`): the `StepRunner`'s out-of-memory guard and the batch-size
//! search (`Trainer::batch_size_find`) on a real CUDA allocation failure; Mixup/CutMix and the model EMA on device tensors; the four text
//! classifiers against the CPU, padding-invariant, and training under AMP.
//!
//! The out-of-memory tests fill the GPU with ballast, so it runs the same on GPUs of any size;
//! every test here holds the torch generator lock, so it owns the device while it runs.

use crate::torch_rng_lock;
use tch::{Device, Kind, Tensor};
use torchlight_nn::{named_parameters, resnet18_on, LayerOptions};
use torchlight_optim::{AdamConfig, AdamW, ParamGroup};
use torchlight_tensor::{cuda_memory, cuda_status, seed_everything};
use torchlight_train::{
    BatchSizeFindConfig, Classification, Progress, StepConfig, StepRunner, TrainError, Trainer,
};

/// Images in the batch that does not fit.
const BATCH: i64 = 1024;
/// Free device memory left beside the ballast, in 64 MiB chunks (512 MiB): far less than a
/// batch of 1024 64-px images needs through resnet18 (about 2 GiB of activations), and far
/// more than one image needs.
const HEADROOM_CHUNKS: usize = 8;

/// Allocates device memory in 64 MiB chunks until an allocation fails, and gives
/// `HEADROOM_CHUNKS` of them back (to libtorch's caching allocator), leaving between 512 and
/// 576 MiB free whatever the GPU's size.
fn fill_the_device(d: Device) -> Vec<Tensor> {
    let mut ballast = Vec::new();
    while let Ok(t) = Tensor::f_empty([64i64 << 20], (Kind::Uint8, d)) {
        ballast.push(t);
    }
    assert!(ballast.len() >= HEADROOM_CHUNKS, "the device filled with {} 64 MiB chunks", ballast.len());
    ballast.truncate(ballast.len() - HEADROOM_CHUNKS);
    ballast
}

#[test]
fn out_of_memory_names_the_largest_batch_that_fits_and_that_batch_trains() {
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let d = Device::Cuda(0);
    let _lock = torch_rng_lock();
    seed_everything(0);
    let model = resnet18_on(2, LayerOptions::new(Kind::Float, d));
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw())]).unwrap();
    let task = Classification::new(2);
    let mut runner = StepRunner::new(StepConfig::default(), d).unwrap();
    let batch =
        |n: i64| (Tensor::randn([n, 3, 64, 64], (Kind::Float, d)), Tensor::randint(2, [n], (Kind::Int64, d)));
    // One small step first, so that cuDNN, cuBLAS and the optimizer state are set up before the
    // device is full, as they are when a real run runs out of memory mid-epoch.
    let _ = runner.step(&model, &task, &batch(2), &mut optimizer, true).unwrap();
    let big = batch(BATCH);

    let ballast = fill_the_device(d);
    let err = runner.forward_backward(&model, &task, &big).unwrap_err();
    let fits = match &err {
        TrainError::OutOfMemory { device, batch_size, input_shape, fits, searched } => {
            assert!(*searched, "a single-process runner searches the batch that fits");
            assert_eq!((device.as_str(), *batch_size), ("cuda:0", BATCH as usize));
            assert_eq!(input_shape.as_slice(), &[BATCH, 3, 64, 64]);
            fits.unwrap_or_else(|| panic!("the guard found no batch that fits: {err}"))
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    };
    // BATCH is a power of two, and so is every halving of it.
    assert!(fits < BATCH as usize && fits.is_power_of_two(), "{fits} is not a halving of {BATCH}");
    let text = err.to_string();
    assert!(text.contains(&format!("set train.batch_size = {fits}")), "{text}");
    assert!(!model.fc.weight.grad().defined(), "the failed step left no gradient behind");

    // The advice holds: with the ballast still in place, a whole step at that batch size runs.
    let part = (big.0.narrow(0, 0, fits as i64), big.1.narrow(0, 0, fits as i64));
    let (loss, _) = runner
        .step(&model, &task, &part, &mut optimizer, true)
        .unwrap_or_else(|e| panic!("a step at the suggested batch size {fits} failed: {e}"));
    assert!(loss.double_value(&[]).is_finite(), "{loss}");
    drop(ballast);
}

/// The batch-size search on a real CUDA allocation failure, under AMP (float16 autocast and
/// the GradScaler): with about 512 MiB left beside the ballast, the doubling from 2 runs out of
/// memory below 1024 images and the bisection finds the largest batch that trains; afterwards
/// the device holds what it held before the search (the tries' memory handed back: tolerance
/// 16 MiB, written before a GPU run measured it; the run prints both figures), and, with the
/// ballast still in place, whole steps at the size found run without running out of memory,
/// which is the point of releasing it (Lightning #8028).
#[test]
fn the_batch_size_search_finds_the_largest_batch_on_a_real_out_of_memory_and_gives_the_memory_back() {
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let d = Device::Cuda(0);
    let _lock = torch_rng_lock();
    seed_everything(0);
    let mut model = resnet18_on(2, LayerOptions::new(Kind::Float, d));
    let mut optimizer =
        AdamW::new(vec![ParamGroup::new(named_parameters(&model), AdamConfig::adamw())]).unwrap();
    let task = Classification::new(2);
    let amp = StepConfig { amp: true, ..StepConfig::default() };
    // One small step first, so that cuDNN, cuBLAS (whose workspaces stay allocated) and the
    // optimizer state are set up before the device is full and before the search measures.
    let mut runner = StepRunner::new(amp.clone(), d).unwrap();
    let batch =
        |n: i64| (Tensor::randn([n, 3, 64, 64], (Kind::Float, d)), Tensor::randint(2, [n], (Kind::Int64, d)));
    let _ = runner.step(&model, &task, &batch(2), &mut optimizer, true).unwrap();
    let weights_before: Vec<Tensor> = named_parameters(&model).into_iter().map(|(_, p)| p.copy()).collect();

    let ballast = fill_the_device(d);
    let mut trainer =
        Trainer::builder().device(d).step_config(amp.clone()).progress(Progress::quiet()).build().unwrap();
    // Host batches, as a loader gives them: each try copies its batch to the device.
    let mut batches = |n: usize| -> torchlight_train::Result<(Tensor, Tensor)> {
        let n = n as i64;
        Ok((
            Tensor::randn([n, 3, 64, 64], (Kind::Float, Device::Cpu)),
            Tensor::randint(2, [n], (Kind::Int64, Device::Cpu)),
        ))
    };
    let config = BatchSizeFindConfig::new(BATCH as usize);
    let found = trainer.batch_size_find(&mut model, &task, &mut optimizer, &mut batches, &config).unwrap();
    let largest = found.largest.unwrap_or_else(|| panic!("not even a batch of 1 trained: {:?}", found.tries));
    eprintln!("batch-size search beside the ballast: {:?}", found.tries);
    assert!(largest < BATCH as usize, "{largest}: the headroom cannot hold a batch of {BATCH}");
    assert!(found.tries.iter().any(|t| !t.fits), "a try ran out of memory: {:?}", found.tries);
    for t in &found.tries {
        assert!(t.peak_bytes.is_some(), "{t:?}: every try reports its peak on CUDA");
        assert_eq!(t.fits, t.batch_size <= largest, "{t:?}: sizes fit up to {largest}, none above");
    }
    let (before, after) = found.allocated_bytes.expect("CUDA reports the memory held");
    eprintln!("allocated before the search {before} B, after {after} B");
    assert!(after <= before + (16 << 20), "the search left {} B behind", after.saturating_sub(before));
    for ((_, p), w) in named_parameters(&model).into_iter().zip(&weights_before) {
        assert!(p.equal(w), "the weights are put back exactly");
    }

    // The size found trains, beside the same ballast, step after step.
    let part = batch(largest as i64);
    for _ in 0..3 {
        let (loss, _) = runner
            .step(&model, &task, &part, &mut optimizer, true)
            .unwrap_or_else(|e| panic!("a step at the batch size found, {largest}, failed: {e}"));
        assert!(loss.double_value(&[]).is_finite(), "{loss}");
    }
    assert!(cuda_memory(0).unwrap().allocated >= before, "the ballast is still there");
    drop(ballast);
}

/// Mixup/CutMix on a CUDA batch: the draws come from the CPU generator as torchvision's do, so
/// the device batch mixes as the CPU one; the mixing itself runs on the device. Tolerance:
/// exact for CutMix (a copy) and the targets' one-hot/mix (the same float ops on both sides);
/// 1e-6 of |x| for Mixup's images (elementwise mul/add, IEEE-rounded on both; written before
/// a GPU run measured it).
#[test]
fn mixup_and_cutmix_on_the_device_mix_as_on_the_cpu() {
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let d = Device::Cuda(0);
    let _lock = torch_rng_lock();
    let x = Tensor::randn([7, 3, 16, 16], (Kind::Float, Device::Cpu));
    let y = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 0, 1]);
    let mix = torchlight_train::MixupCutMix::new(5, 0.8, 1.0).unwrap().with_label_smoothing(0.1).unwrap();
    let (mut mixups, mut cutmixes) = (0, 0);
    for seed in 0..12u64 {
        let (cx, cy, choice) =
            torchlight_tensor::with_torch_seed(seed, || mix.mix(&x, &y, 0)).unwrap().unwrap();
        let (gx, gy, gchoice) =
            torchlight_tensor::with_torch_seed(seed, || mix.mix(&x.to_device(d), &y.to_device(d), 0))
                .unwrap()
                .unwrap();
        assert_eq!(choice, gchoice, "seed {seed}: the same draws");
        assert_eq!(gx.device(), d);
        assert!(gy.to_device(Device::Cpu).equal(&cy), "seed {seed}: targets");
        let gx = gx.to_device(Device::Cpu);
        match choice {
            torchlight_train::Mixed::Mixup(_) => {
                mixups += 1;
                let diff = (&gx - &cx).abs().max().double_value(&[]);
                assert!(
                    diff <= 1e-6 * cx.abs().max().double_value(&[]),
                    "seed {seed}: Mixup differs by {diff}"
                );
            }
            _ => {
                cutmixes += 1;
                assert!(gx.equal(&cx), "seed {seed}: CutMix differs");
            }
        }
    }
    assert!(mixups > 0 && cutmixes > 0);
}

/// The model EMA on CUDA tensors (one `_foreach_lerp_` launch group per dtype) follows the CPU
/// EMA of the same weights: tolerance 1e-6 of max(|x|, 1) after 20 updates (the CUDA lerp
/// kernel may fuse its multiply-add; written before a GPU run measured it). The averaged
/// tensors stay on the device.
#[test]
fn the_model_ema_updates_on_the_device_as_on_the_cpu() {
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let d = Device::Cuda(0);
    let _lock = torch_rng_lock();
    seed_everything(3);
    let cpu = resnet18_on(10, LayerOptions::new(Kind::Float, Device::Cpu));
    let gpu = resnet18_on(10, LayerOptions::new(Kind::Float, d));
    let copy_into = |dst: &dyn torchlight_nn::Module, src: &dyn torchlight_nn::Module| {
        let _g = torchlight_tensor::no_grad();
        for ((_, mut a), (_, b)) in
            torchlight_nn::state_dict(dst).into_iter().zip(torchlight_nn::state_dict(src))
        {
            a.copy_(&b);
        }
    };
    copy_into(&gpu, &cpu);
    let mut ema_cpu = torchlight_train::ModelEma::torchvision(0.9, 1).unwrap();
    let mut ema_gpu = torchlight_train::ModelEma::torchvision(0.9, 1).unwrap();
    ema_cpu.init(&cpu);
    ema_gpu.init(&gpu);
    for step in 1..=20u64 {
        {
            let _g = torchlight_tensor::no_grad();
            for (_, mut p) in named_parameters(&cpu) {
                let _ = p.g_add_(&(Tensor::randn_like(&p) * 0.1));
            }
        }
        copy_into(&gpu, &cpu);
        ema_cpu.update(&cpu, step).unwrap();
        ema_gpu.update(&gpu, step).unwrap();
    }
    for ((k, a), (_, b)) in ema_cpu.weights().iter().zip(ema_gpu.weights()) {
        assert_eq!(b.device(), d, "{k} stays on the device");
        let b = b.to_device(Device::Cpu);
        if !a.is_floating_point() {
            assert!(a.equal(&b), "{k}");
            continue;
        }
        let diff = (a - &b).abs().max().double_value(&[]);
        assert!(diff <= 1e-6 * a.abs().max().double_value(&[]).max(1.0), "{k}: {diff}");
    }
}

/// The four text classifiers (`FastText`, `TextCnn`, `BiLstmClassifier` through cuDNN's
/// packed LSTM, `TransformerClassifier`) on CUDA, each from the same weights as on the CPU:
/// - fp32 logits against the CPU's: within 1e-2 (cuDNN convolutions and RNNs may use TF32,
///   PyTorch's default there: about 1e-3 relative per product; written before a GPU run
///   measured it, the run prints the largest difference);
/// - fp16 autocast logits against the device's fp32 ones: within 5e-2;
/// - padding invariance on the device: a document alone and batched beside a much longer one,
///   within 1e-3 (other shapes pick other kernels);
/// - an AMP step (fp16 autocast + GradScaler, the recipe's `train.amp`) through the
///   `StepRunner` with `(Inputs, targets)` batches trains the synthetic task of 64 documents
///   to a cross-entropy below 0.2 (from about ln 2) in 60 steps, no step skipped at the end.
#[test]
fn text_classifiers_on_the_device_match_the_cpu_and_train_under_amp() {
    use torchlight_nn::{
        BiLstmClassifier, FastText, Inputs, MultiInput, TextClassifierConfig, TextCnn, TransformerClassifier,
    };
    assert!(cuda_status().available, "CUDA not detected: {:?}", cuda_status().reason);
    let _lock = torch_rng_lock();
    let config = TextClassifierConfig::new(30, 2)
        .with_embed_dim(16)
        .with_num_filters(8)
        .with_hidden_size(16)
        .with_nhead(2)
        .with_dim_feedforward(32)
        .with_encoder_layers(1)
        .with_max_len(48)
        .with_dropout(0.0)
        .with_encoder_dropout(0.0);
    // Deterministic documents: ids 1..=29, lengths 3, 40 and 10 (the first is shorter than
    // TextCnn's widest filter), padded with 0.
    let doc = |seed: i64, len: i64| -> Vec<i64> { (0..len).map(|i| 1 + (seed * 7 + i * 13) % 29).collect() };
    let pad = |docs: &[Vec<i64>]| -> Inputs {
        let t = docs.iter().map(Vec::len).max().unwrap();
        let mut ids = vec![0i64; docs.len() * t];
        for (r, doc) in docs.iter().enumerate() {
            ids[r * t..r * t + doc.len()].copy_from_slice(doc);
        }
        let lengths: Vec<i64> = docs.iter().map(|d| d.len() as i64).collect();
        Inputs::new()
            .with("ids", Tensor::from_slice(&ids).reshape([docs.len() as i64, t as i64]))
            .with("lengths", Tensor::from_slice(&lengths))
    };
    let (short, long, mid) = (doc(1, 3), doc(2, 40), doc(3, 10));
    let batched = pad(&[short.clone(), long, mid.clone()]);
    // The synthetic task of nn's learning tests: filler ids 1..=20 and one signal id, from
    // 21..=25 for class 0 and 26..=29 for class 1.
    let (task_inputs, labels) = {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut below = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as i64
        };
        let mut docs = Vec::new();
        let mut labels = Vec::new();
        for i in 0..64 {
            let label = (i % 2) as i64;
            let len = 3 + below(10);
            let mut d: Vec<i64> = (0..len).map(|_| 1 + below(20)).collect();
            let at = below(len as u64) as usize;
            d[at] = if label == 0 { 21 + below(5) } else { 26 + below(4) };
            docs.push(d);
            labels.push(label);
        }
        (pad(&docs), Tensor::from_slice(&labels))
    };

    fn check<M: MultiInput + torchlight_nn::Module>(
        tag: &str,
        build: impl Fn(LayerOptions) -> M,
        batched: &Inputs,
        alone: [(usize, &Inputs); 2],
        task: &(Inputs, Tensor),
    ) {
        let d = Device::Cuda(0);
        seed_everything(5);
        let cpu = build(LayerOptions::new(Kind::Float, Device::Cpu));
        let gpu = build(LayerOptions::new(Kind::Float, d));
        {
            let _g = torchlight_tensor::no_grad();
            for ((_, mut a), (_, b)) in
                torchlight_nn::state_dict(&gpu).into_iter().zip(torchlight_nn::state_dict(&cpu))
            {
                a.copy_(&b);
            }
        }
        let on = |i: &Inputs| i.map(|t| t.to_device(d));
        let max_diff = |a: &Tensor, b: &Tensor| {
            (a.to_device(Device::Cpu).to_kind(Kind::Float) - b.to_device(Device::Cpu).to_kind(Kind::Float))
                .abs()
                .max()
                .double_value(&[])
        };
        let (cpu_logits, gpu_logits, half_logits) = {
            let _g = torchlight_tensor::no_grad();
            let c = cpu.forward_inputs(batched, false).unwrap();
            let g = gpu.forward_inputs(&on(batched), false).unwrap();
            let h = {
                let _ac = torchlight_tensor::autocast(d, Kind::Half).unwrap();
                gpu.forward_inputs(&on(batched), false).unwrap()
            };
            (c, g, h)
        };
        assert_eq!(gpu_logits.device(), d, "{tag}: logits on the device");
        let fp32 = max_diff(&cpu_logits, &gpu_logits);
        let fp16 = max_diff(&half_logits, &gpu_logits);
        let mut padding = 0f64;
        for (row, inputs) in alone {
            let _g = torchlight_tensor::no_grad();
            let one = gpu.forward_inputs(&on(inputs), false).unwrap().get(0);
            padding = padding.max(max_diff(&one, &gpu_logits.get(row as i64)));
        }
        eprintln!("{tag}: |cuda fp32 - cpu| {fp32:.3e}, |fp16 autocast - fp32| {fp16:.3e}, padding invariance {padding:.3e}");
        assert!(fp32 <= 1e-2, "{tag}: CUDA fp32 logits differ from the CPU's by {fp32}");
        assert!(fp16 <= 5e-2, "{tag}: fp16 autocast logits differ from fp32 by {fp16}");
        assert!(padding <= 1e-3, "{tag}: a document's logits alone and batched differ by {padding}");

        let mut optimizer = AdamW::new(vec![ParamGroup::new(
            named_parameters(&gpu),
            AdamConfig::adamw().with_lr(0.03).with_weight_decay(0.0),
        )])
        .unwrap();
        let mut runner = StepRunner::new(StepConfig { amp: true, ..StepConfig::default() }, d).unwrap();
        let classification = Classification::new(2);
        let batch = (on(&task.0), task.1.to_device(d));
        let loss = |m: &M| {
            let _g = torchlight_tensor::no_grad();
            m.forward_inputs(&batch.0, false).unwrap().cross_entropy_for_logits(&batch.1).double_value(&[])
        };
        let before = loss(&gpu);
        let mut last = f64::NAN;
        for _ in 0..60 {
            let (l, _) = runner.step(&gpu, &classification, &batch, &mut optimizer, true).unwrap();
            last = l.double_value(&[]);
        }
        let after = loss(&gpu);
        let scale = runner.scaler().get_scale();
        eprintln!("{tag}: AMP cross-entropy {before:.3} -> {after:.3} in 60 steps (last step {last:.3}, scale {scale})");
        for (k, p) in named_parameters(&gpu) {
            assert_eq!((p.kind(), p.device()), (Kind::Float, d), "{tag}: {k} stays float32 on the device");
        }
        assert!(scale.is_finite() && scale >= 1.0, "{tag}: GradScaler scale {scale}");
        assert!(after < 0.2, "{tag}: under AMP the loss fell only from {before:.3} to {after:.3}");
    }

    let alone_short = pad(&[short]);
    let alone_mid = pad(&[mid]);
    let alone = [(0, &alone_short), (2, &alone_mid)];
    let task = (task_inputs, labels);
    check("fasttext", |o| FastText::new_on(&config, o), &batched, alone, &task);
    check("textcnn", |o| TextCnn::new_on(&config, o), &batched, alone, &task);
    check("bilstm", |o| BiLstmClassifier::new_on(&config, o), &batched, alone, &task);
    check("transformer", |o| TransformerClassifier::new_on(&config, o), &batched, alone, &task);
}
