//! curves.png and the confusion-matrix image: they decode, have the documented size and
//! hold the drawn series and cells (not blank images).

use std::collections::HashSet;
use torchlight_train::{
    confusion_matrix_size, plot_confusion_matrix, plot_curves, ConfusionMatrix, EpochRecord, CURVES_SIZE,
};

fn records(n: usize) -> Vec<EpochRecord> {
    (1..=n)
        .map(|e| {
            let x = e as f64;
            EpochRecord {
                epoch: e,
                lr: 1e-3,
                train: vec![("loss".into(), 1.6 / x), ("acc".into(), 1.0 - 0.6 / x)],
                val: vec![("loss".into(), 1.8 / x + 0.05), ("acc".into(), 1.0 - 0.7 / x)],
                ema_val: vec![],
                seconds: 3.0,
                samples_per_s: 100.0,
                data_stall_pct: 1.0,
            }
        })
        .collect()
}

fn count_near(img: &image::RgbImage, color: [u8; 3], tolerance: i32) -> usize {
    img.pixels()
        .filter(|p| p.0.iter().zip(color).all(|(&a, b)| (i32::from(a) - i32::from(b)).abs() <= tolerance))
        .count()
}

#[test]
fn curves_png_has_both_panels_and_series() {
    let tmp = crate::temp_dir();
    let path = tmp.path().join("curves.png");
    plot_curves(&records(8), "acc", &path).unwrap();
    let img = image::open(&path).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), CURVES_SIZE);
    // Train (blue) and val (orange) lines are drawn in each panel.
    let (w, _) = img.dimensions();
    let left = image::imageops::crop_imm(&img, 0, 0, w / 2, img.height()).to_image();
    let right = image::imageops::crop_imm(&img, w / 2, 0, w / 2, img.height()).to_image();
    for (name, panel) in [("loss", &left), ("accuracy", &right)] {
        assert!(count_near(panel, [31, 119, 180], 10) > 300, "{name} panel has the train line");
        assert!(count_near(panel, [255, 127, 14], 10) > 300, "{name} panel has the val line");
        // Axis text and frame: dark pixels.
        assert!(count_near(panel, [0, 0, 0], 60) > 500, "{name} panel has axes and labels");
    }
    assert!(!tmp.path().join("curves.png.tmp").exists());

    // Redrawn each epoch, from one epoch on, including epochs with a NaN loss.
    let mut few = records(1);
    plot_curves(&few, "acc", &path).unwrap();
    few.extend(records(2).into_iter().skip(1).map(|mut r| {
        r.val[0].1 = f64::NAN;
        r
    }));
    plot_curves(&few, "acc", &path).unwrap();
    assert_eq!(image::open(&path).unwrap().to_rgb8().dimensions(), CURVES_SIZE);
    plot_curves(&[], "acc", &path).unwrap();
    // Other tasks plot their own metric; a metric not logged leaves its panel empty.
    let regression: Vec<EpochRecord> = (1..=4)
        .map(|e| EpochRecord {
            epoch: e,
            train: vec![("loss".into(), 1.0 / e as f64), ("mae".into(), 2.0 / e as f64)],
            val: vec![("loss".into(), 1.2 / e as f64), ("mae".into(), 2.5 / e as f64)],
            ema_val: vec![],
            ..EpochRecord::default()
        })
        .collect();
    plot_curves(&regression, "mae", &path).unwrap();
    let img = image::open(&path).unwrap().to_rgb8();
    let right = image::imageops::crop_imm(&img, w / 2, 0, w / 2, img.height()).to_image();
    assert!(count_near(&right, [255, 127, 14], 10) > 300, "the mae panel has the val line");
    plot_curves(&regression, "acc", &path).unwrap();
}

#[test]
fn confusion_matrix_png_shades_cells_by_row_share() {
    let tmp = crate::temp_dir();
    let path = tmp.path().join("confusion_matrix.png");
    let names: Vec<String> = ["cat", "dog", "horse (long name)"].iter().map(|s| s.to_string()).collect();
    let cm = ConfusionMatrix::from_counts(3, vec![50, 0, 0, 5, 40, 5, 0, 25, 25]);
    plot_confusion_matrix(&cm, &names, &path).unwrap();
    let img = image::open(&path).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), confusion_matrix_size(&names));
    // A full row (50/50) gets the darkest blue; an empty cell the lightest.
    assert!(count_near(&img, [8, 48, 107], 2) > 500, "darkest cell present");
    assert!(count_near(&img, [247, 251, 255], 2) > 500, "empty cells present");
    let distinct: HashSet<[u8; 3]> = img.pixels().map(|p| p.0).collect();
    assert!(distinct.len() > 20, "text is anti-aliased, cells are shaded: {} colours", distinct.len());
}
