use torchlight_derive::Module;

#[derive(Module)]
enum Head {
    Linear,
    Identity,
}

#[derive(Module)]
struct Pair(u8, u8);

fn main() {}
