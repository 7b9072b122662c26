use torchlight_derive::Module;

#[derive(Module)]
struct Net {
    #[module(kind = "Linear")]
    head: u8,
    #[module(frozen)]
    body: u8,
}

#[derive(Module)]
#[module(skip)]
struct Stem {}

fn main() {}
