//! TrivialAugmentWide and RandAugment against torchvision 0.26 on PIL images
//! (`tests/fixtures/make_policies.py`): seeded with a `TorchGenerator` as
//! `torch.manual_seed(seed)` before each image, every output equals torchvision's, byte for
//! byte, over hundreds of seeds; torch's linspace (the magnitudes) equal bit for bit.

use crate::read_safetensors;
use torchlight_vision::{torch_linspace_f32, Image, RandAugment, TorchGenerator, TrivialAugmentWide};

fn run(policy: &str, image: Image, seed: u64) -> Image {
    let mut g = TorchGenerator::new(seed);
    let gray = image.channels() == 1;
    let fill: &[u8] = if gray { &[40] } else { &[10, 20, 30] };
    match policy {
        "ta_wide" => TrivialAugmentWide::default().apply_with(image, &mut g),
        "ta_wide_fill" => TrivialAugmentWide::new(17).with_fill(fill).apply_with(image, &mut g),
        "ra" => RandAugment::default().apply_with(image, &mut g),
        "ra_strong" => RandAugment::new(3, 25, 31).apply_with(image, &mut g),
        other => panic!("unknown policy {other}"),
    }
    .unwrap()
}

#[test]
fn seeded_policies_equal_torchvisions_images() {
    let fixtures = read_safetensors("policies.safetensors");
    let mut checked = 0;
    for (key, want) in &fixtures {
        let (policy, name) = key.split_once('/').unwrap();
        if policy == "input" || policy == "linspace" {
            continue;
        }
        let input = &fixtures[&format!("input/{name}")];
        let image = Image::new(input.shape[1], input.shape[0], input.shape[2], input.u8s.clone());
        let n = image.pixels().len();
        let mut changed = 0;
        for (seed, want) in want.u8s.chunks_exact(n).enumerate() {
            let got = run(policy, image.clone(), seed as u64);
            assert_eq!((got.width(), got.height()), (image.width(), image.height()), "{key} seed {seed}");
            let diffs = got.pixels().iter().zip(want).filter(|(a, b)| a != b).count();
            assert_eq!(diffs, 0, "{key} seed {seed}: {diffs} of {n} bytes differ from torchvision");
            changed += usize::from(got.pixels() != image.pixels());
            checked += 1;
        }
        println!("{key}: {} seeds equal torchvision, {changed} changed the image", want.shape[0]);
    }
    assert_eq!(checked, 3 * (200 + 60 + 100 + 50), "outputs checked");
}

#[test]
fn linspace_equals_torchs() {
    let fixtures = read_safetensors("policies.safetensors");
    let mut checked = 0;
    for (key, want) in &fixtures {
        let parts: Vec<&str> = key.split('/').collect();
        if parts[0] != "linspace" {
            continue;
        }
        let got = torch_linspace_f32(
            parts[1].parse().unwrap(),
            parts[2].parse().unwrap(),
            parts[3].parse().unwrap(),
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want.f32s), "{key}");
        checked += 1;
    }
    assert_eq!(checked, 36);
}

/// The recipe's train transform with `data.auto_augment = "ta_wide"` and
/// `data.random_erase = 0.25`, every step drawing through torch's rules from one
/// `TorchGenerator` seeded as `torch.manual_seed(seed)` before the image: torchvision's tensor
/// bit for bit over 80 seeds (`pipeline.safetensors`).
#[test]
fn seeded_preset_pipeline_equals_torchvisions_tensors() {
    use torchlight_vision::{
        Compose, Normalize, RandomErasing, RandomHorizontalFlip, RandomResizedCrop, Sample, ToTensor,
        Transform,
    };
    let fixtures = read_safetensors("pipeline.safetensors");
    let input = &fixtures["input"];
    let image = Image::new(input.shape[1], input.shape[0], input.shape[2], input.u8s.clone());
    let want = &fixtures["out"];
    let (crop, flip, policy) =
        (RandomResizedCrop::new(10), RandomHorizontalFlip::default(), TrivialAugmentWide::default());
    let to_tensor = Compose::default().then(ToTensor).then(Normalize::imagenet());
    let erase = RandomErasing::new(0.25);
    let n = 3 * 10 * 10;
    let mut erased = 0;
    for (seed, want) in want.f32s.chunks_exact(n).enumerate() {
        let mut g = TorchGenerator::new(seed as u64);
        let b = crop.get_params_with(image.height(), image.width(), &mut g);
        let x = crop.crop_resize(&image, b);
        let x = flip.apply_with(x, &mut g);
        let x = policy.apply_with(x, &mut g).unwrap();
        let unused = &mut torchlight_base::seed::rng_from_seed(0);
        let t = to_tensor.apply(Sample::Image(x), unused).unwrap().into_tensor().unwrap();
        let before = t.data.clone();
        let t = erase.apply_with(t, &mut g).unwrap();
        erased += usize::from(t.data != before);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&t.data), bits(want), "seed {seed}");
    }
    println!("80 seeds equal torchvision; {erased} erased");
}

/// `Compose::apply_like_torch` runs the steps unfused, each with torch's draws (the same tensor
/// as the step-by-step pipeline above for the first seeds), and names a step that has no
/// torch-draw path instead of drawing otherwise.
#[test]
fn compose_apply_like_torch_repeats_the_steps_and_names_a_step_without_torch_draws() {
    use torchlight_vision::{
        ColorJitter, Compose, Normalize, RandomChoice, RandomErasing, RandomHorizontalFlip,
        RandomResizedCrop, Sample, ToTensor,
    };
    let fixtures = read_safetensors("pipeline.safetensors");
    let input = &fixtures["input"];
    let image = Image::new(input.shape[1], input.shape[0], input.shape[2], input.u8s.clone());
    let preset = Compose::default()
        .then(RandomResizedCrop::new(10))
        .then(RandomHorizontalFlip::default())
        .then(TrivialAugmentWide::default())
        .then(ToTensor)
        .then(Normalize::imagenet())
        .then(RandomErasing::new(0.25));
    let n = 3 * 10 * 10;
    for (seed, want) in fixtures["out"].f32s.chunks_exact(n).enumerate().take(20) {
        let got =
            preset.apply_like_torch(Sample::Image(image.clone()), &mut TorchGenerator::new(seed as u64));
        assert_eq!(got.unwrap().into_tensor().unwrap().data, want, "seed {seed}");
    }
    // RandomChoice draws from Python's `random`, not torch's generator: it has no such path.
    let choice = Compose::default()
        .then(RandomResizedCrop::new(10))
        .then(RandomChoice::new(vec![Box::new(ColorJitter::new(0.4, 0.4, 0.4, 0.1))]));
    let err =
        choice.apply_like_torch(Sample::Image(image), &mut TorchGenerator::new(0)).unwrap_err().to_string();
    assert!(err.contains("step 2 (RandomChoice)") && err.contains("no torch-draw path"), "{err}");
}
