use torchlight_derive::Module;

struct Tensor;

#[derive(Module)]
struct Layer {
    #[param]
    #[buffer]
    weight: Tensor,
    #[param(trainable)]
    bias: Tensor,
    #[param]
    #[module(skip)]
    scale: Tensor,
}

fn main() {}
