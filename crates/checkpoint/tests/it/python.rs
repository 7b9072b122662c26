use crate::{temp_dir, torch_rng_lock};
use tch::{Kind, Tensor};
use torchlight_checkpoint::*;
use torchlight_nn::{resnet18, ModuleT};

#[test]
fn pytorch_loads_the_weights_into_torchvision_and_gets_the_same_logits() {
    let _lock = torch_rng_lock();
    let dir = temp_dir("python");
    let model = resnet18(10);
    let x = Tensor::randn([3, 3, 64, 64], (Kind::Float, tch::Device::Cpu));
    {
        let _g = torchlight_tensor::no_grad();
        let _ = model.forward_t(&(&x * 2.0), true); // non-trivial BatchNorm running stats
    }
    save(dir.join("best"), &Snapshot::model(&model)).unwrap();
    export_weights(dir.join("best"), dir.join("weights.safetensors")).unwrap();
    let y = {
        let _g = torchlight_tensor::no_grad();
        model.forward_t(&x, false)
    };
    Tensor::write_safetensors(&[("x", &x), ("y", &y)], dir.join("io.safetensors")).unwrap();
    for weights in [dir.join("weights.safetensors"), dir.join("best/model.safetensors")] {
        let out = torchlight_testing::run_reference_script(
            "crates/checkpoint/tests/check_torchvision.py",
            &[weights.to_str().unwrap(), dir.join("io.safetensors").to_str().unwrap(), "10"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let v: Vec<f64> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
        // Same kernels, float32: within 1e-5 of the logits' scale (measured 0 under
        // ATEN_CPU_CAPABILITY default, avx2 and avx512, the Python side inheriting the level).
        assert!(v[0] <= 1e-5 * v[1].max(1.0), "torchvision logits differ by {} (scale {})", v[0], v[1]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
