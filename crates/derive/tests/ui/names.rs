use torchlight_derive::Module;

struct Tensor;

#[derive(Module)]
struct Block {
    #[param]
    #[module(name = "conv.weight")]
    weight: Tensor,
    #[param]
    #[module(name = "")]
    bias: Tensor,
    #[param]
    #[module(name = "gain")]
    scale: Tensor,
    #[buffer]
    gain: Tensor,
    #[module(skip, name = "width")]
    width: i64,
}

fn main() {}
