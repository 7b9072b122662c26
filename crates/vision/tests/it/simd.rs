//! The SIMD resampling kernels against the scalar reference, byte for byte: random sizes (up
//! and down, both pass orders), source rectangles, output windows, RGB and grayscale, run for
//! every kernel this CPU has; and the resampling fixtures exact with the kernel in use.

use rand::Rng;
use torchlight_base::seed::rng_from_seed;
use torchlight_vision::__resample::{resize_bilinear_with, Kernel, Rect};
use torchlight_vision::Image;

/// A resize to check: `crop` of `src` to `out_w x out_h`, then `window` of that.
struct Case {
    src: Image,
    crop: Rect,
    out_w: usize,
    out_h: usize,
    window: Rect,
}

fn noise(rng: &mut impl Rng, width: usize, height: usize, channels: usize) -> Image {
    // Runs of equal bytes, extremes and noise: saturation (0, 255) and smooth areas both occur.
    let pixels = (0..width * height * channels)
        .map(|_| match rng.random_range(0..4) {
            0 => 0,
            1 => 255,
            _ => rng.random(),
        })
        .collect();
    Image::new(width, height, channels, pixels)
}

/// A random case with the crop up to `max_in` and the output up to `max_out` on each side.
fn random_case(rng: &mut impl Rng, max_in: usize, max_out: usize) -> Case {
    let (cw, ch) = (rng.random_range(1..=max_in), rng.random_range(1..=max_in));
    let (out_w, out_h) = (rng.random_range(1..=max_out), rng.random_range(1..=max_out));
    // Margins of 0 put the crop against the buffer's end, where the vector loads must stop.
    let (left, top) = (rng.random_range(0..=3) * rng.random_range(0..=5), rng.random_range(0..=6));
    let (right, bottom) = (rng.random_range(0..=2) * rng.random_range(0..=7), rng.random_range(0..=2));
    let channels = if rng.random_range(0..5) == 0 { 1 } else { 3 };
    let src = noise(rng, left + cw + right, top + ch + bottom, channels);
    let window = if rng.random_range(0..2) == 0 {
        Rect::new(0, 0, out_w, out_h)
    } else {
        let (ww, wh) = (rng.random_range(1..=out_w), rng.random_range(1..=out_h));
        Rect::new(rng.random_range(0..=out_w - ww), rng.random_range(0..=out_h - wh), ww, wh)
    };
    Case { src, crop: Rect::new(left, top, cw, ch), out_w, out_h, window }
}

/// Pillow 13's pass order (the vertical pass first when the height shrinks by more than twice
/// as many pixels as the width does).
fn vertical_first(c: &Case) -> bool {
    c.crop.height > c.out_h && (c.crop.height - c.out_h) as i64 > 2 * (c.crop.width as i64 - c.out_w as i64)
}

/// Every kernel's output equals the scalar kernel's.
fn check(case: &Case) {
    let run = |k: Kernel| resize_bilinear_with(k, &case.src, case.crop, case.out_w, case.out_h, case.window);
    let reference = run(Kernel::scalar());
    for kernel in Kernel::available().into_iter().skip(1) {
        let got = run(kernel);
        if got != reference {
            let at = got.pixels().iter().zip(reference.pixels()).position(|(a, b)| a != b);
            panic!(
                "{} differs from scalar at byte {at:?}: {}x{}x{} image, crop {:?} to {}x{}, window {:?}",
                kernel.name(),
                case.src.width(),
                case.src.height(),
                case.src.channels(),
                case.crop,
                case.out_w,
                case.out_h,
                case.window
            );
        }
    }
}

#[test]
fn the_simd_kernels_are_there_where_the_cpu_has_them() {
    let names: Vec<&str> = Kernel::available().iter().map(|k| k.name()).collect();
    assert_eq!(names[0], "scalar");
    assert!(Kernel::available().contains(&Kernel::best()));
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(names.contains(&"sse4.1"), std::arch::is_x86_feature_detected!("sse4.1"), "{names:?}");
        assert_eq!(names.contains(&"avx2"), std::arch::is_x86_feature_detected!("avx2"), "{names:?}");
    }
}

#[test]
fn simd_kernels_equal_scalar_on_random_sizes() {
    let mut rng = rng_from_seed(18);
    // (up, down) per axis and per pass order: each must occur, so no branch goes untested.
    let (mut up, mut down, mut orders) = ([0; 2], [0; 2], [0; 2]);
    // Full-range sizes (crop 1..=600, output 1..=300) and many small ones (odd widths, tails).
    let cases = (0..45).map(|_| (600, 300)).chain((0..250).map(|_| (40, 40)));
    for (max_in, max_out) in cases {
        let case = random_case(&mut rng, max_in, max_out);
        for (axis, (i, o)) in
            [(case.crop.width, case.out_w), (case.crop.height, case.out_h)].into_iter().enumerate()
        {
            up[axis] += (o > i) as usize;
            down[axis] += (o < i) as usize;
        }
        orders[vertical_first(&case) as usize] += 1;
        check(&case);
    }
    assert!(
        up.iter().chain(&down).chain(&orders).all(|&n| n >= 10),
        "up {up:?} down {down:?} orders {orders:?}"
    );
}

#[test]
fn simd_kernels_equal_scalar_on_pipeline_sizes() {
    // RandomResizedCrop(224) boxes of a 500x375 photo, Resize(256) + CenterCrop(224) windows,
    // extreme ratios, and crops against every edge of the buffer.
    let mut rng = rng_from_seed(7);
    let photo = noise(&mut rng, 500, 375, 3);
    let whole = |w, h| Rect::new(0, 0, w, h);
    let cases = [
        (photo.clone(), Rect::new(37, 20, 301, 288), 224, 224, whole(224, 224)),
        (photo.clone(), Rect::new(199, 87, 301, 288), 224, 224, whole(224, 224)),
        (photo.clone(), Rect::new(0, 0, 97, 375), 224, 224, whole(224, 224)),
        (photo.clone(), whole(500, 375), 341, 256, Rect::new(58, 16, 224, 224)),
        (photo.clone(), whole(500, 375), 1, 1, whole(1, 1)),
        (photo.clone(), whole(500, 375), 500, 1, whole(500, 1)),
        (photo, Rect::new(499, 0, 1, 375), 300, 7, Rect::new(299, 6, 1, 1)),
        (noise(&mut rng, 3, 2, 1), whole(3, 2), 289, 300, Rect::new(5, 0, 283, 299)),
    ];
    for (src, crop, out_w, out_h, window) in cases {
        check(&Case { src, crop, out_w, out_h, window });
    }
}

#[test]
fn resampling_fixtures_are_exact_with_the_kernel_the_transforms_use() {
    // The parity test bounds every non-JPEG case at 2/255; the resampling cases are held to 0,
    // so an off-by-one in a kernel cannot hide there. (`TORCHLIGHT_RESAMPLE_KERNEL` picks the
    // kernel of a whole test run; the tests above tie every kernel to the scalar one.)
    let cases = std::fs::read_to_string(crate::fixture("cases.txt")).unwrap();
    let mut count = 0;
    for line in cases.lines().filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        let (input, op, args, expected) =
            (fields[0], fields[1], &fields[2..fields.len() - 1], fields[fields.len() - 1]);
        if input.ends_with(".jpg")
            || !["resize", "resize_exact", "resize_center_crop", "resized_crop"].contains(&op)
        {
            continue;
        }
        let image = torchlight_vision::decode_file(crate::fixture("inputs").join(input)).unwrap();
        let want = torchlight_vision::decode_file(crate::fixture("expected").join(expected)).unwrap();
        let got = crate::parity::run(op, args, image);
        assert_eq!(crate::diff(&got, &want), (0.0, 0.0), "{line} with {}", Kernel::best().name());
        count += 1;
    }
    assert!(count >= 40, "only {count} resampling cases");
}
