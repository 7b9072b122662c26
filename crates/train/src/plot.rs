//! PNG plots of a run: `curves.png` (loss and a metric per epoch, train vs val), the
//! confusion matrix as a labelled heat map, reliability diagrams (`reliability.png`), the lr
//! range test's curve (`lr_finder.png`) and a grid of captioned images (`errors.png`).
//!
//! Text is drawn with DejaVu Sans compiled into the crate (`assets/DejaVuSans.ttf`, Bitstream
//! Vera licence in `assets/LICENSE-DejaVu.txt`), so plots look the same on any machine and need
//! no system fonts.

use crate::error::{Result, TrainError};
use crate::metrics::{ConfusionMatrix, ReliabilityBin};
use crate::record::EpochRecord;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// Width and height of `lr_finder.png`.
pub const LR_FINDER_SIZE: (u32, u32) = (900, 600);

/// Width and height of `curves.png`.
pub const CURVES_SIZE: (u32, u32) = (1200, 500);

const TRAIN_COLOR: RGBColor = RGBColor(31, 119, 180);
const VAL_COLOR: RGBColor = RGBColor(255, 127, 14);

fn register_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        if plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_err() {
            panic!("the DejaVu Sans font compiled into torchlight-train is a valid TrueType font");
        }
    });
}

fn plot_error(path: &Path, e: impl std::fmt::Display) -> TrainError {
    TrainError::Plot { path: path.to_path_buf(), reason: e.to_string() }
}

/// Writes an RGB buffer as PNG through a temporary file and a rename, so a viewer open on
/// the file (redrawn every epoch) never sees half of it.
fn save_png(path: &Path, buffer: Vec<u8>, (width, height): (u32, u32)) -> Result<()> {
    let image =
        image::RgbImage::from_raw(width, height, buffer).expect("the buffer is width * height * 3 bytes");
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    image.save_with_format(&tmp, image::ImageFormat::Png).map_err(|e| plot_error(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))
}

/// Whether values of `metric` are fractions best shown in percent (accuracy, top-k, F1, mAP).
fn is_fraction(metric: &str) -> bool {
    metric == "acc" || metric.starts_with("top") || metric == "f1" || metric == "map"
}

/// The panel title of `metric`.
fn metric_title(metric: &str) -> String {
    match metric {
        "acc" => "Accuracy".into(),
        "f1" => "F1".into(),
        "map" => "mAP".into(),
        "mae" => "MAE".into(),
        "rmse" => "RMSE".into(),
        top if top.starts_with("top") => format!("Top-{} accuracy", &top[3..]),
        other => other.to_string(),
    }
}

/// Draws `curves.png`: two panels, the loss (left) and `metric` (right: `acc` for
/// classification, `map`, `mae`, ...; fractions in percent), train and val per epoch with
/// markers, axes, labels and a legend, like the matplotlib figure a PyTorch user draws from
/// their history lists. Missing and non-finite values are left out.
pub fn plot_curves(records: &[EpochRecord], metric: &str, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    register_font();
    let (w, h) = CURVES_SIZE;
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
        let (left, right) = root.split_horizontally(w / 2);
        let epochs = records.iter().map(|r| r.epoch).max().unwrap_or(1).max(1);
        let series = |name: &str, scale: f64| -> Vec<(f64, f64)> {
            records
                .iter()
                .filter_map(|r| r.get(name).map(|v| (r.epoch as f64, v * scale)))
                .filter(|(_, v)| v.is_finite())
                .collect()
        };
        let loss = [series("train_loss", 1.0), series("val_loss", 1.0)];
        let fraction = is_fraction(metric);
        let scale = if fraction { 100.0 } else { 1.0 };
        let values = [series(&format!("train_{metric}"), scale), series(&format!("val_{metric}"), scale)];
        let top = |lines: &[Vec<(f64, f64)>; 2]| {
            let max = lines.iter().flatten().map(|p| p.1).fold(0.0f64, f64::max);
            if max > 0.0 {
                max * 1.1
            } else {
                1.0
            }
        };
        // Loss falls and accuracy rises, so each legend goes where its curves are not.
        let loss_panel = Panel {
            title: "Loss".into(),
            y_desc: "loss".into(),
            decimals: 2,
            legend: SeriesLabelPosition::UpperRight,
        };
        panel(&left, &loss_panel, epochs, 0.0..top(&loss), &loss).map_err(|e| plot_error(path, e))?;
        let title = metric_title(metric);
        let metric_panel = if fraction {
            Panel {
                y_desc: format!("{} (%)", title.to_lowercase()),
                title,
                decimals: 0,
                legend: SeriesLabelPosition::LowerRight,
            }
        } else {
            Panel { y_desc: metric.to_string(), title, decimals: 2, legend: SeriesLabelPosition::UpperRight }
        };
        let range = if fraction { 0.0..100.0 } else { 0.0..top(&values) };
        panel(&right, &metric_panel, epochs, range, &values).map_err(|e| plot_error(path, e))?;
        root.present().map_err(|e| plot_error(path, e))?;
    }
    save_png(path, buffer, (w, h))
}

type DrawResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Panel {
    title: String,
    y_desc: String,
    decimals: usize,
    legend: SeriesLabelPosition,
}

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    spec: &Panel,
    epochs: usize,
    y_range: std::ops::Range<f64>,
    lines: &[Vec<(f64, f64)>; 2],
) -> DrawResult<()> {
    let x_range = 0.5..(epochs as f64 + 0.5);
    let mut chart = ChartBuilder::on(area)
        .caption(&spec.title, (FAMILY, 26))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, y_range)?;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc(&spec.y_desc)
        .x_labels(epochs.min(12) + 1)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 && *x >= 1.0 {
                format!("{}", x.round() as i64)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.*}", spec.decimals))
        .axis_desc_style((FAMILY, 18))
        .label_style((FAMILY, 15))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for (points, (name, color)) in lines.iter().zip([("train", TRAIN_COLOR), ("val", VAL_COLOR)]) {
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(spec.legend.clone())
        .label_font((FAMILY, 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Layout of a confusion-matrix image for `n` classes: (cell side, left margin, top margin,
/// bottom margin, right margin).
fn confusion_layout(n: usize, names: &[String]) -> (u32, u32, u32, u32, u32) {
    let cell = (640 / n.max(1) as u32).clamp(28, 90);
    let longest = names.iter().map(|s| s.chars().count()).max().unwrap_or(1) as u32;
    let label_room = (longest * 8 + 16).clamp(50, 220);
    (cell, label_room + 40, 60, label_room + 45, 30)
}

/// Image size of [`plot_confusion_matrix`] for these class names.
pub fn confusion_matrix_size(class_names: &[String]) -> (u32, u32) {
    let n = class_names.len() as u32;
    let (cell, left, top, bottom, right) = confusion_layout(class_names.len(), class_names);
    (left + n * cell + right, top + n * cell + bottom)
}

/// Draws the confusion matrix as a heat map: rows = true class, columns = predicted class
/// (scikit-learn's `ConfusionMatrixDisplay` layout), each cell holding its count and shaded by
/// the row's share (per-class recall), class names on both axes.
///
/// # Panics
/// When `class_names` does not hold one name per class of `matrix`.
pub fn plot_confusion_matrix(
    matrix: &ConfusionMatrix,
    class_names: &[String],
    path: impl AsRef<Path>,
) -> Result<()> {
    let path = path.as_ref();
    assert_eq!(class_names.len(), matrix.num_classes(), "one class name per class");
    register_font();
    let (w, h) = confusion_matrix_size(class_names);
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    draw_confusion(matrix, class_names, &mut buffer, (w, h)).map_err(|e| plot_error(path, e))?;
    save_png(path, buffer, (w, h))
}

fn draw_confusion(
    matrix: &ConfusionMatrix,
    names: &[String],
    buffer: &mut [u8],
    (w, h): (u32, u32),
) -> DrawResult<()> {
    let n = names.len();
    let (cell, left, top, bottom, _) = confusion_layout(n, names);
    let (cell, left, top) = (cell as i32, left as i32, top as i32);
    let root = BitMapBackend::with_buffer(buffer, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let text = |size: u32| TextStyle::from((FAMILY, size).into_font()).color(&BLACK);
    let centered = |size: u32| text(size).pos(Pos::new(HPos::Center, VPos::Center));
    let grid = n as i32 * cell;
    root.draw(&Text::new("Confusion matrix", (left + grid / 2, 25), centered(22)))?;
    let support = matrix.support();
    let count_size = (cell as u32 / 3).clamp(10, 20);
    for (t, &row_total) in support.iter().enumerate() {
        for p in 0..n {
            let count = matrix.get(t, p);
            let share = if row_total > 0 { count as f64 / row_total as f64 } else { 0.0 };
            let (x0, y0) = (left + p as i32 * cell, top + t as i32 * cell);
            root.draw(&Rectangle::new([(x0, y0), (x0 + cell, y0 + cell)], blues(share).filled()))?;
            let color = if share > 0.5 { WHITE } else { BLACK };
            root.draw(&Text::new(
                count.to_string(),
                (x0 + cell / 2, y0 + cell / 2),
                centered(count_size).color(&color),
            ))?;
        }
    }
    root.draw(&Rectangle::new([(left, top), (left + grid, top + grid)], BLACK.stroke_width(1)))?;
    let name_size = (cell as u32 / 2).clamp(11, 16);
    for (i, name) in names.iter().enumerate() {
        let mid = i as i32 * cell + cell / 2;
        root.draw(&Text::new(
            name.clone(),
            (left - 8, top + mid),
            text(name_size).pos(Pos::new(HPos::Right, VPos::Center)),
        ))?;
        root.draw(&Text::new(
            name.clone(),
            (left + mid, top + grid + 8),
            text(name_size).pos(Pos::new(HPos::Left, VPos::Center)).transform(FontTransform::Rotate90),
        ))?;
    }
    root.draw(&Text::new(
        "predicted class",
        (left + grid / 2, top + grid + bottom as i32 - 22),
        centered(17),
    ))?;
    root.draw(&Text::new(
        "true class",
        (16, top + grid / 2),
        centered(17).transform(FontTransform::Rotate270),
    ))?;
    root.present()?;
    Ok(())
}

/// One image of [`plot_errors`]: its RGB pixels and the caption lines under it.
#[derive(Debug, Clone)]
pub struct ErrorTile {
    /// Row-major RGB pixels, `width * height * 3` bytes.
    pub rgb: Vec<u8>,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The caption, a line each (at most four are drawn): for `eval --report`, the true
    /// class, the predicted class, the confidence and the file name. The second line is drawn
    /// in red, the fourth smaller in grey.
    pub lines: Vec<String>,
}

/// The side of the square each image of [`plot_errors`] is fitted into (aspect kept).
pub const ERROR_TILE: u32 = 200;
const ERROR_COLUMNS: usize = 4;
const ERROR_PAD: u32 = 16;
const ERROR_TITLE: u32 = 44;
const ERROR_LINE: u32 = 19;
const ERROR_CAPTION: u32 = 4 * ERROR_LINE + 6;

/// Image size of [`plot_errors`] with `n` tiles: four a row, one row at least.
pub fn errors_grid_size(n: usize) -> (u32, u32) {
    let cols = n.clamp(1, ERROR_COLUMNS) as u32;
    let rows = n.div_ceil(ERROR_COLUMNS).max(1) as u32;
    (
        ERROR_PAD + cols * (ERROR_TILE + ERROR_PAD),
        ERROR_TITLE + rows * (ERROR_TILE + ERROR_CAPTION + ERROR_PAD),
    )
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn fit_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('\u{2026}');
    out
}

/// Draws `tiles` in a grid, four a row, under `title`: each image scaled to fit a
/// [`ERROR_TILE`]-pixel square (aspect kept, centred, framed) with its caption lines below.
/// No tiles draws the title and "no misclassified images".
///
/// # Panics
/// When a tile's `rgb` is not `width * height * 3` bytes.
pub fn plot_errors(title: &str, tiles: &[ErrorTile], path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    register_font();
    let (w, h) = errors_grid_size(tiles.len());
    let mut buffer = vec![255u8; (w * h * 3) as usize];
    let origin = |i: usize| {
        let (col, row) = ((i % ERROR_COLUMNS) as u32, (i / ERROR_COLUMNS) as u32);
        (
            ERROR_PAD + col * (ERROR_TILE + ERROR_PAD),
            ERROR_TITLE + row * (ERROR_TILE + ERROR_CAPTION + ERROR_PAD),
        )
    };
    // The images, copied in first: the text and frames are drawn over the buffer after.
    let mut frames = Vec::new();
    for (i, tile) in tiles.iter().enumerate() {
        let image = image::RgbImage::from_raw(tile.width, tile.height, tile.rgb.clone())
            .expect("a tile's rgb is width * height * 3 bytes");
        let scale = f64::from(ERROR_TILE) / f64::from(tile.width.max(tile.height).max(1));
        let (tw, th) = (
            ((f64::from(tile.width) * scale).round() as u32).clamp(1, ERROR_TILE),
            ((f64::from(tile.height) * scale).round() as u32).clamp(1, ERROR_TILE),
        );
        let scaled = image::imageops::resize(&image, tw, th, image::imageops::FilterType::Triangle);
        let (x0, y0) = origin(i);
        let (x0, y0) = (x0 + (ERROR_TILE - tw) / 2, y0 + (ERROR_TILE - th) / 2);
        for (x, y, pixel) in scaled.enumerate_pixels() {
            let at = (((y0 + y) * w + x0 + x) * 3) as usize;
            buffer[at..at + 3].copy_from_slice(&pixel.0);
        }
        frames.push((x0, y0, tw, th));
    }
    {
        let root = BitMapBackend::with_buffer(&mut buffer, (w, h)).into_drawing_area();
        let draw = || -> DrawResult<()> {
            let text = |size: u32| TextStyle::from((FAMILY, size).into_font()).color(&BLACK);
            root.draw(&Text::new(
                fit_chars(title, (w / 11) as usize),
                (w as i32 / 2, ERROR_TITLE as i32 / 2),
                text(20).pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
            if tiles.is_empty() {
                root.draw(&Text::new(
                    "no misclassified images",
                    (w as i32 / 2, (ERROR_TITLE + ERROR_TILE / 2) as i32),
                    text(16).pos(Pos::new(HPos::Center, VPos::Center)),
                ))?;
            }
            for (i, (tile, &(fx, fy, fw, fh))) in tiles.iter().zip(&frames).enumerate() {
                let (fx, fy) = (fx as i32, fy as i32);
                root.draw(&Rectangle::new(
                    [(fx - 1, fy - 1), (fx + fw as i32, fy + fh as i32)],
                    RGBColor(160, 160, 160).stroke_width(1),
                ))?;
                let (x0, y0) = origin(i);
                for (j, line) in tile.lines.iter().take(4).enumerate() {
                    let (size, color, per_char) = match j {
                        1 => (15, GAP_COLOR, 8),
                        3 => (13, RGBColor(100, 100, 100), 7),
                        _ => (15, BLACK, 8),
                    };
                    root.draw(&Text::new(
                        fit_chars(line, (ERROR_TILE / per_char) as usize),
                        (x0 as i32, (y0 + ERROR_TILE + 6 + j as u32 * ERROR_LINE) as i32),
                        text(size).color(&color).pos(Pos::new(HPos::Left, VPos::Top)),
                    ))?;
                }
            }
            root.present()?;
            Ok(())
        };
        draw().map_err(|e| plot_error(path, e))?;
    }
    save_png(path, buffer, (w, h))
}

/// One panel of [`plot_reliability`]: a title (e.g. `test, T = 1.00: ECE 0.081`) and the bins
/// of [`reliability_bins`](crate::reliability_bins).
#[derive(Debug, Clone)]
pub struct ReliabilityPanel {
    /// The panel's title.
    pub title: String,
    /// The confidence bins, in order.
    pub bins: Vec<ReliabilityBin>,
}

/// Width and height of one panel of [`plot_reliability`].
pub const RELIABILITY_PANEL_SIZE: (u32, u32) = (560, 620);

const GAP_COLOR: RGBColor = RGBColor(214, 39, 40);

/// Draws reliability diagrams, two panels a row (before and after temperature scaling, as
/// `eval --calibrate` passes them): in each, the accuracy of every confidence bin as a bar
/// against the diagonal of perfect calibration, the gap to the bin's mean confidence shaded
/// red (Guo et al. 2017, figure 1), and below it the histogram of confidences (share of
/// samples per bin). Empty bins draw nothing.
pub fn plot_reliability(panels: &[ReliabilityPanel], path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    register_font();
    let (pw, ph) = RELIABILITY_PANEL_SIZE;
    let cols = panels.len().clamp(1, 2) as u32;
    let rows = panels.len().div_ceil(2).max(1) as u32;
    let (w, h) = (pw * cols, ph * rows);
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
        let areas = root.split_evenly((rows as usize, cols as usize));
        for (area, spec) in areas.iter().zip(panels) {
            reliability_panel(area, spec).map_err(|e| plot_error(path, e))?;
        }
        root.present().map_err(|e| plot_error(path, e))?;
    }
    save_png(path, buffer, (w, h))
}

fn reliability_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    spec: &ReliabilityPanel,
) -> DrawResult<()> {
    let (_, height) = area.dim_in_pixel();
    let (top, bottom) = area.split_vertically(height * 7 / 10);
    let mut chart = ChartBuilder::on(&top)
        .caption(&spec.title, (FAMILY, 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..1.0, 0.0..1.0)?;
    chart
        .configure_mesh()
        .y_desc("accuracy")
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|x| format!("{x:.1}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .axis_desc_style((FAMILY, 16))
        .label_style((FAMILY, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    let filled: Vec<&ReliabilityBin> = spec.bins.iter().filter(|b| b.count > 0).collect();
    chart
        .draw_series(
            filled
                .iter()
                .map(|b| Rectangle::new([(b.lower, 0.0), (b.upper, b.accuracy)], TRAIN_COLOR.filled())),
        )?
        .label("accuracy")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], TRAIN_COLOR.filled()));
    chart.draw_series(
        filled.iter().map(|b| Rectangle::new([(b.lower, 0.0), (b.upper, b.accuracy)], BLACK.stroke_width(1))),
    )?;
    chart
        .draw_series(filled.iter().map(|b| {
            Rectangle::new([(b.lower, b.accuracy), (b.upper, b.confidence)], GAP_COLOR.mix(0.45).filled())
        }))?
        .label("gap to confidence")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], GAP_COLOR.mix(0.45).filled()));
    chart
        .draw_series(LineSeries::new([(0.0, 0.0), (1.0, 1.0)], BLACK.stroke_width(2)))?
        .label("perfect calibration")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;

    let total: usize = spec.bins.iter().map(|b| b.count).sum();
    let share = |b: &ReliabilityBin| if total > 0 { b.count as f64 / total as f64 } else { 0.0 };
    let most = spec.bins.iter().map(share).fold(0.0f64, f64::max);
    let y_top = if most > 0.0 { (most * 1.15).min(1.0) } else { 1.0 };
    let mut hist = ChartBuilder::on(&bottom)
        .margin(12)
        .margin_top(0)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..1.0, 0.0..y_top)?;
    hist.configure_mesh()
        .x_desc("confidence (largest softmax probability)")
        .y_desc("share")
        .x_labels(6)
        .y_labels(4)
        .x_label_formatter(&|x| format!("{x:.1}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .axis_desc_style((FAMILY, 16))
        .label_style((FAMILY, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    hist.draw_series(
        spec.bins
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| Rectangle::new([(b.lower, 0.0), (b.upper, share(b))], VAL_COLOR.filled())),
    )?;
    Ok(())
}

/// matplotlib's `Blues` colour map, from near-white at 0 to dark blue at 1.
fn blues(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let (lo, hi) = ((247.0, 251.0, 255.0), (8.0, 48.0, 107.0));
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(mix(lo.0, hi.0), mix(lo.1, hi.1), mix(lo.2, hi.2))
}

/// Draws `lr_finder.png`: the range test's smoothed loss against the lr (a log axis in
/// exponential mode, as Lightning's `LRFinder.plot` sets it), the suggested lr marked with a
/// red point and a dashed line, named in the legend. Non-finite losses are left out. `lrs` and
/// `losses` are the sweep's points, `suggestion` the index of the suggested one, `(min_lr,
/// max_lr)` the x range when the sweep is empty.
pub(crate) fn plot_lr_finder(
    lrs: &[f64],
    losses: &[f64],
    suggestion: Option<usize>,
    (min_lr, max_lr): (f64, f64),
    log_x: bool,
    path: &Path,
) -> Result<()> {
    register_font();
    let (w, h) = LR_FINDER_SIZE;
    let mut buffer = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
        let points: Vec<(f64, f64)> = lrs
            .iter()
            .zip(losses)
            .filter(|(lr, l)| l.is_finite() && **lr > 0.0)
            .map(|(lr, l)| (*lr, *l))
            .collect();
        let lo = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if lo.is_finite() { (lo, hi.max(lo + 1e-6)) } else { (0.0, 1.0) };
        let pad = (hi - lo) * 0.05;
        let y = (lo - pad)..(hi + pad);
        let x = lrs.first().copied().unwrap_or(min_lr)
            ..lrs.last().copied().unwrap_or(max_lr).max(min_lr * 1.0001);
        let suggestion = suggestion.map(|i| (lrs[i], losses[i]));
        let title = match suggestion {
            Some((lr, _)) => format!("LR range test: suggested lr {lr:.2e}"),
            None => "LR range test: no suggestion (too few points)".into(),
        };
        let drawn = if log_x {
            let chart = ChartBuilder::on(&root)
                .caption(&title, (FAMILY, 24))
                .margin(20)
                .x_label_area_size(50)
                .y_label_area_size(70)
                .build_cartesian_2d(x.log_scale(), y.clone());
            chart
                .map_err(|e| e.to_string())
                .and_then(|mut c| lr_chart(&mut c, &points, suggestion, y, true).map_err(|e| e.to_string()))
        } else {
            let chart = ChartBuilder::on(&root)
                .caption(&title, (FAMILY, 24))
                .margin(20)
                .x_label_area_size(50)
                .y_label_area_size(70)
                .build_cartesian_2d(x, y.clone());
            chart
                .map_err(|e| e.to_string())
                .and_then(|mut c| lr_chart(&mut c, &points, suggestion, y, false).map_err(|e| e.to_string()))
        };
        drawn.map_err(|e| plot_error(path, e))?;
        root.present().map_err(|e| plot_error(path, e))?;
    }
    save_png(path, buffer, (w, h))
}

/// The loss line, the suggestion's point and dashed line, the axes and the legend of
/// `lr_finder.png`, on either x axis.
fn lr_chart<'a, X>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    points: &[(f64, f64)],
    suggestion: Option<(f64, f64)>,
    y: std::ops::Range<f64>,
    log_x: bool,
) -> DrawResult<()>
where
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(if log_x { "learning rate (log scale)" } else { "learning rate" })
        .y_desc("loss (smoothed)")
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .y_label_formatter(&|y| format!("{y:.3}"))
        .axis_desc_style((FAMILY, 18))
        .label_style((FAMILY, 15))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    chart
        .draw_series(LineSeries::new(points.iter().copied(), TRAIN_COLOR.stroke_width(2)))?
        .label("smoothed loss")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], TRAIN_COLOR.stroke_width(2)));
    if let Some((lr, loss)) = suggestion {
        let red = RGBColor(214, 39, 40);
        chart.draw_series(DashedLineSeries::new(
            vec![(lr, y.start), (lr, y.end)],
            6,
            4,
            red.stroke_width(1),
        ))?;
        chart
            .draw_series(std::iter::once(Circle::new((lr, loss), 7, red.filled())))?
            .label(format!("suggestion {lr:.2e}"))
            .legend(move |(x, y)| Circle::new((x + 12, y), 6, red.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FAMILY, 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blues_runs_from_light_to_dark() {
        assert_eq!(blues(0.0), RGBColor(247, 251, 255));
        assert_eq!(blues(1.0), RGBColor(8, 48, 107));
        assert_eq!(blues(7.0), blues(1.0));
    }

    #[test]
    fn confusion_image_grows_with_classes() {
        let names = |n: usize| (0..n).map(|i| format!("class_{i}")).collect::<Vec<_>>();
        let (w3, h3) = confusion_matrix_size(&names(3));
        let (w30, h30) = confusion_matrix_size(&names(30));
        assert!(w30 > w3 && h30 > h3);
    }
}
