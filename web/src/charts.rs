//! The three charts as SVG strings, drawn with plotters' SVG backend (pure functions, tested
//! natively).
//!
//! Tick labels and annotations are plotters `Text` elements placed at computed positions rather
//! than plotters' mesh: on wasm32 plotters measures every mesh label by inserting a `<span>`
//! into the document and reading its size, a forced layout per label that alone would cost
//! more than a frame. plotters' SVG backend escapes text (`<` becomes `&lt;`), so names that end
//! up in a chart cannot inject markup; the tests check it.
//!
//! Colours: ink and grid lines use two sentinel colours that `static/style.css` re-colours for
//! the dark scheme (CSS rules override SVG presentation attributes).

use crate::model::{format_gib, BatchSeries, Timeline, GIB};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use vramfit_core::plan::{Plan, WindowReport};
use vramfit_core::sim::Category;

pub const WIDTH: u32 = 640;
pub const HEIGHT: u32 = 318;
/// Plot area margins (pixels): room for the y tick labels on the left, x labels below, and
/// above the plot a row for the capacity line's legend (drawn over the bars it would hide
/// them, or be hidden).
pub const MARGIN_LEFT: u32 = 52;
pub const MARGIN_RIGHT: u32 = 14;
pub const MARGIN_TOP: u32 = 32;
pub const MARGIN_BOTTOM: u32 = 34;

/// Text and axes; `#4A5060` in the SVG (style.css maps it to the page's ink colour).
pub const INK: RGBColor = RGBColor(0x4A, 0x50, 0x60);
/// Grid lines; `#D5D9E0` in the SVG (re-coloured in the dark scheme).
pub const GRID: RGBColor = RGBColor(0xD5, 0xD9, 0xE0);
/// The card's capacity line.
pub const CAPACITY: RGBColor = RGBColor(0xD0, 0x2B, 0x2B);
pub const TRAIN: RGBColor = RGBColor(0x2F, 0x6F, 0xDB);
pub const EVAL: RGBColor = RGBColor(0xE0, 0x7B, 0x10);
pub const FITS: RGBColor = RGBColor(0x1A, 0x9A, 0x4A);

/// A stacked segment of the breakdown chart: the nine categories of allocated memory, then
/// what the allocator reserves beyond them, then the CUDA context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    Category(Category),
    Reserve,
    Context,
}

impl Segment {
    pub fn all() -> Vec<Segment> {
        let mut out: Vec<Segment> = Category::ALL.iter().map(|c| Segment::Category(*c)).collect();
        out.extend([Segment::Reserve, Segment::Context]);
        out
    }
    pub fn key(self) -> &'static str {
        match self {
            Segment::Category(c) => c.key(),
            Segment::Reserve => "allocator_reserve",
            Segment::Context => "cuda_context",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Segment::Category(c) => c.label(),
            Segment::Reserve => "Allocator reserve",
            Segment::Context => "CUDA context",
        }
    }
    pub fn explanation(self) -> &'static str {
        match self {
            Segment::Category(c) => c.explanation(),
            Segment::Reserve => "Memory PyTorch's caching allocator holds beyond live tensors (free parts of its segments, cached free blocks); it shrinks only when an allocation would fail (PyTorch then frees unused cached segments and retries) or on empty_cache(), which train.py never calls; nvidia-smi counts it.",
            Segment::Context => "The CUDA context and loaded kernels of the process: outside PyTorch's counters but on the card for the whole run.",
        }
    }
    pub fn color(self) -> RGBColor {
        match self {
            Segment::Category(Category::Parameters) => RGBColor(0x3B, 0x5B, 0xDB),
            Segment::Category(Category::Gradients) => RGBColor(0x6E, 0x8B, 0xF0),
            Segment::Category(Category::OptimizerState) => RGBColor(0x8E, 0x5C, 0xD9),
            Segment::Category(Category::SavedActivations) => RGBColor(0x1F, 0xA5, 0x8C),
            Segment::Category(Category::LogitsAndLoss) => RGBColor(0xE0, 0x8A, 0x1E),
            Segment::Category(Category::CastWeights) => RGBColor(0x9C, 0xB8, 0x3A),
            Segment::Category(Category::Temporaries) => RGBColor(0xD9, 0x5F, 0x8C),
            Segment::Category(Category::Batch) => RGBColor(0x6B, 0x4E, 0x2E),
            Segment::Category(Category::Workspace) => RGBColor(0x2E, 0x8B, 0xC0),
            Segment::Reserve => RGBColor(0xA8, 0xAE, 0xBA),
            Segment::Context => RGBColor(0x5F, 0x66, 0x75),
        }
    }
    /// The segment's bytes in one window; the segments of a window add up to its nvidia-smi bytes.
    pub fn bytes(self, w: &WindowReport, context: u64) -> u64 {
        match self {
            Segment::Category(c) => w.breakdown.get(c),
            Segment::Reserve => w.peak_reserved_bytes.saturating_sub(w.breakdown.total()),
            Segment::Context => context,
        }
    }
}

/// `#RRGGBB` as the SVG carries it (and as the page's legend swatches use it).
pub fn css_color(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// A step for about `target` ticks between 0 and `max`: 1, 2, 2.5 or 5 times a power of ten.
pub fn nice_step(max: f64, target: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let raw = max / target.max(1.0);
    let pow = 10f64.powf(raw.log10().floor());
    let m = raw / pow;
    let nice = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 2.5 {
        2.5
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * pow
}

/// A tick value without trailing zeros ("0.5", "2", "12.5").
fn tick_label(v: f64) -> String {
    // Seven characters fit left of the axis: from a million GiB on, in millions ("1.5M"; QA saw
    // "1,000,000" cut to ",000,000").
    if v >= 1e6 {
        let m = format!("{:.2}", v / 1e6);
        return format!("{}M", m.trim_end_matches('0').trim_end_matches('.'));
    }
    if v >= 1000.0 && v.fract() == 0.0 {
        // Grouped as the page's text groups GiB figures ("800,000").
        return vramfit_core::params::thousands(v as u64);
    }
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn font(size: f64) -> TextStyle<'static> {
    TextStyle::from(FontDesc::new(FontFamily::SansSerif, size, FontStyle::Normal)).color(&INK)
}

type Err = String;

fn err<E: std::fmt::Display>(e: E) -> Err {
    format!("chart: {e}")
}

type Chart<'a, 'b, X> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>;
type Root<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;

/// Horizontal grid lines and GiB labels on the left.
fn y_axis<X>(root: &Root, chart: &mut Chart<X>, x0: X::ValueType, x1: X::ValueType, ymax: f64) -> Result<(), Err>
where
    X: Ranged,
    X::ValueType: Clone,
{
    let step = nice_step(ymax, 5.0);
    let mut v = 0.0;
    while v <= ymax + 1e-9 {
        chart.draw_series(std::iter::once(PathElement::new(vec![(x0.clone(), v), (x1.clone(), v)], GRID.stroke_width(1)))).map_err(err)?;
        let (_, y) = chart.backend_coord(&(x0.clone(), v));
        root.draw(&Text::new(tick_label(v), (MARGIN_LEFT as i32 - 6, y), font(13.0).pos(Pos::new(HPos::Right, VPos::Center))))
            .map_err(err)?;
        v += step;
    }
    root.draw(&Text::new("GiB", (4, MARGIN_TOP as i32 - 4), font(12.0).pos(Pos::new(HPos::Left, VPos::Bottom)))).map_err(err)?;
    Ok(())
}

/// A horizontal capacity line across the plot, named in the legend row above the plot.
fn capacity_line<X>(root: &Root, chart: &mut Chart<X>, x0: X::ValueType, x1: X::ValueType, gib: f64, label: &str) -> Result<(), Err>
where
    X: Ranged,
    X::ValueType: Clone,
{
    chart.draw_series(std::iter::once(PathElement::new(vec![(x0, gib), (x1, gib)], CAPACITY.stroke_width(2)))).map_err(err)?;
    // The swatch is a thin rectangle, so the capacity stays the one line in its colour.
    let (x, y) = (MARGIN_LEFT as i32 + 10, 11);
    root.draw(&Rectangle::new([(x, y - 1), (x + 18, y + 1)], CAPACITY.filled())).map_err(err)?;
    root.draw(&Text::new(label.to_string(), (x + 24, y), font(12.0).color(&CAPACITY).pos(Pos::new(HPos::Left, VPos::Center))))
        .map_err(err)?;
    Ok(())
}

/// Label rows are 12-pixel text: a label whose row comes this close to the capacity line is
/// moved off it (the line struck through "11.49" on the default page).
const LABEL_ROW: i32 = 14;

/// The top of a label row of [`LABEL_ROW`] pixels wanted at `top`, moved off a horizontal line at
/// `line` (2 pixels wide) if it would touch it: to just above the line when `above`, else below.
fn off_line(top: i32, line: i32, above: bool) -> i32 {
    let touches = top - 2 <= line && line <= top + LABEL_ROW + 2;
    match (touches, above) {
        (false, _) => top,
        (true, true) => line - 3 - LABEL_ROW,
        (true, false) => line + 4,
    }
}

/// The y range: the highest value or the capacity, whichever is larger, plus room for labels.
fn y_top(max_value: u64, capacity: u64) -> f64 {
    (max_value.max(capacity) as f64 / GIB * 1.15).max(0.01)
}

/// Chart 1: the four windows' peaks stacked by segment, with the card's capacity line.
/// Each bar's segments add up to the window's nvidia-smi bytes.
pub fn breakdown_svg(plan: &Plan, available: u64, context: u64, card_name: &str) -> Result<String, Err> {
    let windows: [(&str, &WindowReport); 4] =
        [("train", &plan.train), ("eval", &plan.eval), ("first step", &plan.first_iter), ("eval at start", &plan.eval_at_start)];
    // An eval-only run goes through the eval at start alone: the other slots say so, barless.
    let runs = |name: &str| !plan.config.eval_only || name == "eval at start";
    let tallest = windows.iter().filter(|(name, _)| runs(name)).map(|(_, w)| w.nvidia_smi_bytes).max().unwrap_or(0);
    let ymax = y_top(tallest, available);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        let mut chart = ChartBuilder::on(&root)
            .margin_left(MARGIN_LEFT)
            .margin_right(MARGIN_RIGHT)
            .margin_top(MARGIN_TOP)
            .margin_bottom(MARGIN_BOTTOM)
            .build_cartesian_2d(-0.5f64..3.5f64, 0f64..ymax)
            .map_err(err)?;
        y_axis(&root, &mut chart, -0.5, 3.5, ymax)?;
        for (i, (name, w)) in windows.iter().enumerate() {
            let x = i as f64;
            if !runs(name) {
                let (px, bottom) = chart.backend_coord(&(x, 0.0));
                root.draw(&Text::new(format!("{name}: not run"), (px, bottom + 6), font(13.0).pos(Pos::new(HPos::Center, VPos::Top))))
                    .map_err(err)?;
                continue;
            }
            let mut base = 0u64;
            let mut rects = Vec::new();
            for s in Segment::all() {
                let b = s.bytes(w, context);
                if b == 0 {
                    continue;
                }
                let (y0, y1) = (base as f64 / GIB, (base + b) as f64 / GIB);
                rects.push(Rectangle::new([(x - 0.3, y0), (x + 0.3, y1)], s.color().filled()));
                base += b;
            }
            chart.draw_series(rects).map_err(err)?;
            let (px, top) = chart.backend_coord(&(x, base as f64 / GIB));
            // Above the bar, and above the capacity line where that runs through the label.
            let (_, cap_y) = chart.backend_coord(&(x, available as f64 / GIB));
            let label_top = off_line(top - 3 - LABEL_ROW, cap_y, true);
            root.draw(&Text::new(format_gib(base), (px, label_top), font(12.0).pos(Pos::new(HPos::Center, VPos::Top)))).map_err(err)?;
            let (_, bottom) = chart.backend_coord(&(x, 0.0));
            root.draw(&Text::new(name.to_string(), (px, bottom + 6), font(13.0).pos(Pos::new(HPos::Center, VPos::Top)))).map_err(err)?;
        }
        let cap = available as f64 / GIB;
        capacity_line(&root, &mut chart, -0.5, 3.5, cap, &format!("{card_name}: {cap:.2} GiB available"))?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// Chart 2: the process's need against the micro-batch size for training and eval, the
/// capacity line, the current point and the largest batch that fits.
pub fn batch_svg(series: &BatchSeries, available: u64) -> Result<String, Err> {
    let max_b = series.points.last().map(|p| p.0).unwrap_or(1).max(series.current.0) as f64;
    let tallest = series.points.iter().map(|p| p.1.max(p.2)).max().unwrap_or(0).max(series.current.1);
    // More room on top than the other charts: the curves' two-row legend sits there, and a
    // flat curve near the top ran through it.
    let ymax = y_top(tallest, available) * 1.08;
    let (x0, x1) = (0.0, max_b + 0.5);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        let mut chart = ChartBuilder::on(&root)
            .margin_left(MARGIN_LEFT)
            .margin_right(MARGIN_RIGHT)
            .margin_top(MARGIN_TOP)
            .margin_bottom(MARGIN_BOTTOM)
            .build_cartesian_2d(x0..x1, 0f64..ymax)
            .map_err(err)?;
        // Drawn beyond ymax the lines would leave the plot: clamp them at its top.
        let clamp = |b: u64| (b as f64 / GIB).min(ymax);
        y_axis(&root, &mut chart, x0, x1, ymax)?;
        let step = nice_step(max_b, 8.0).max(1.0);
        let mut b = step;
        while b <= max_b + 1e-9 {
            let (px, py) = chart.backend_coord(&(b, 0.0));
            root.draw(&Text::new(tick_label(b), (px, py + 6), font(13.0).pos(Pos::new(HPos::Center, VPos::Top)))).map_err(err)?;
            b += step;
        }
        let (_, bottom) = chart.backend_coord(&(x1, 0.0));
        root.draw(&Text::new(
            "batch_size",
            (WIDTH as i32 - MARGIN_RIGHT as i32, bottom + 20),
            font(12.0).pos(Pos::new(HPos::Right, VPos::Top)),
        ))
        .map_err(err)?;
        // The largest batch that fits, and (thin: the allocator model's estimate) the one below
        // it that keeps fitting after a few steps; labels below the plot's top.
        let fit_label = series.largest_fit.map(|lf| {
            // The verdict says the card has no hardware for the dtype; the marker must not read as a go.
            let label = if series.dtype_unsupported {
                format!("largest that fits memory: {lf} (no bf16 here)")
            } else {
                format!("largest that fits: {lf}")
            };
            (lf, 2, label, 40, 0.6)
        });
        // The batch that keeps fitting lies below the largest, left of its line.
        let keeps = if series.lasting_frees_cached_blocks { "keeps running" } else { "keeps fitting" };
        let lasting_label = series.lasting.map(|k| (k, 1, format!("{keeps} later: {k} (estimate)"), 56, 0.45));
        let (_, cap_y) = chart.backend_coord(&(x0, available as f64 / GIB));
        let fit_px = series.largest_fit.map(|lf| chart.backend_coord(&(lf as f64, ymax)).0);
        // Each label below the one before it if moving it off the line brought them together.
        let mut above: Option<i32> = None;
        for (b, width, label, dy, leftwards_from) in fit_label.into_iter().chain(lasting_label) {
            let x = b as f64;
            chart.draw_series(std::iter::once(PathElement::new(vec![(x, 0.0), (x, ymax)], FITS.stroke_width(width)))).map_err(err)?;
            let (px, top) = chart.backend_coord(&(x, ymax));
            // Rightwards the label of the one that keeps fitting ran through the largest's line
            // (batch 29's through 33's): it runs leftwards where the y axis leaves room (7 pixels
            // a character is the font's widest), else it starts past that line, under the
            // largest's own label (its number says which line is its).
            let label_width = 7 * label.chars().count() as i32;
            let (anchor, dx) = if width == 1 {
                let right_start = fit_px.filter(|f| (px..px + 4 + label_width).contains(f)).map_or(px + 4, |f| f + 4);
                let (room_left, room_right) = (px - 4 - MARGIN_LEFT as i32, (WIDTH - MARGIN_RIGHT) as i32 - right_start);
                if room_left >= label_width || (room_right < label_width && room_left > room_right) {
                    (HPos::Right, -4)
                } else {
                    (HPos::Left, right_start - px)
                }
            } else if x > max_b * leftwards_from {
                (HPos::Right, -4)
            } else {
                (HPos::Left, 4)
            };
            let mut label_top = off_line(top + dy, cap_y, false);
            if let Some(prev) = above.filter(|prev| label_top < prev + LABEL_ROW + 2) {
                label_top = off_line(prev + LABEL_ROW + 2, cap_y, false);
            }
            above = Some(label_top);
            root.draw(&Text::new(label, (px + dx, label_top), font(12.0).color(&FITS).pos(Pos::new(anchor, VPos::Top)))).map_err(err)?;
        }
        // An eval-only run trains nothing: its one curve is the eval's.
        if !series.eval_only {
            chart
                .draw_series(LineSeries::new(series.points.iter().map(|p| (p.0 as f64, clamp(p.1))), TRAIN.stroke_width(2)))
                .map_err(err)?;
        }
        chart.draw_series(LineSeries::new(series.points.iter().map(|p| (p.0 as f64, clamp(p.2))), EVAL.stroke_width(2))).map_err(err)?;
        let capacity_label = format!("available {} GiB", format_gib(available));
        capacity_line(&root, &mut chart, x0, x1, available as f64 / GIB, &capacity_label)?;
        let (cb, cn) = series.current;
        chart.draw_series(std::iter::once(Circle::new((cb as f64, clamp(cn)), 5, INK.filled()))).map_err(err)?;
        let (px, py) = chart.backend_coord(&(cb as f64, clamp(cn)));
        // Up and to the left of the point: the need is the higher curve there, and the curves
        // rise with the batch, so that corner is clear of both (below right, they ran through
        // it); off the capacity line.
        let label_top = off_line(py - 6 - LABEL_ROW, cap_y, true);
        let now = format!("now: {cb}");
        // Rightwards where leftwards would reach the y axis's labels (a point near batch 1);
        // 7 pixels a character is the label font's widest.
        // Leftwards it also ran through the largest's line where the batch sits just past it
        // (batch 13 or 14, largest 12): rightwards then, clear of it.
        let now_width = 7 * now.len() as i32;
        let crosses_largest = fit_px.is_some_and(|f| (px - 8 - now_width..=px).contains(&f));
        let leftwards = px - 8 - now_width >= MARGIN_LEFT as i32 && !crosses_largest;
        let (anchor, x) = if leftwards { (HPos::Right, px - 8) } else { (HPos::Left, px + 8) };
        root.draw(&Text::new(now, (x, label_top), font(12.0).pos(Pos::new(anchor, VPos::Top)))).map_err(err)?;
        // Legend for the two curves, in the row above the plot right after the capacity's (at
        // 7 pixels a character, the font's widest): inside the plot the largest batch's line ran
        // through it, and at the row's right end a phone showed it only once scrolled to.
        let start = MARGIN_LEFT as i32 + 10 + 24 + 7 * capacity_label.chars().count() as i32 + 24;
        let curves: &[(&str, RGBColor, i32)] =
            if series.eval_only { &[("eval", EVAL, start)] } else { &[("training", TRAIN, start), ("eval", EVAL, start + 90)] };
        for &(name, color, x) in curves {
            let y = 11;
            root.draw(&PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))).map_err(err)?;
            root.draw(&Text::new(name, (x + 24, y), font(12.0).pos(Pos::new(HPos::Left, VPos::Center)))).map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// Chart 3: live tensor memory over one training iteration and an `estimate_loss` (its first two
/// eval batches; the later ones repeat the second), with the room
/// the card leaves for tensors (see `Computed::tensor_room`) and the peak marked.
pub fn timeline_svg(t: &Timeline, room: u64) -> Result<String, Err> {
    let n = t.events.max(1) as f64;
    let ymax = y_top(t.peak.1, room);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        let mut chart = ChartBuilder::on(&root)
            .margin_left(MARGIN_LEFT)
            .margin_right(MARGIN_RIGHT)
            .margin_top(MARGIN_TOP)
            .margin_bottom(MARGIN_BOTTOM)
            .build_cartesian_2d(0f64..n, 0f64..ymax)
            .map_err(err)?;
        y_axis(&root, &mut chart, 0.0, n, ymax)?;
        let gib = |b: u64| b as f64 / GIB;
        let es = t.eval_start as f64;
        if t.eval_start < t.events {
            chart.draw_series(std::iter::once(PathElement::new(vec![(es, 0.0), (es, ymax)], GRID.stroke_width(2)))).map_err(err)?;
        }
        let (_, bottom) = chart.backend_coord(&(0.0, 0.0));
        let (train_mid, _) = chart.backend_coord(&(es / 2.0, 0.0));
        let (eval_mid, _) = chart.backend_coord(&((es + n) / 2.0, 0.0));
        // An eval-only run's curve is its one eval (no training iteration to name).
        if !t.train.is_empty() {
            root.draw(&Text::new(
                "one training iteration",
                (train_mid, bottom + 6),
                font(13.0).color(&TRAIN).pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(err)?;
        }
        if t.eval_start < t.events {
            root.draw(&Text::new("eval batch", (eval_mid, bottom + 6), font(13.0).color(&EVAL).pos(Pos::new(HPos::Center, VPos::Top))))
                .map_err(err)?;
        }
        chart.draw_series(LineSeries::new(t.train.iter().map(|(i, b)| (*i as f64, gib(*b))), TRAIN.stroke_width(2))).map_err(err)?;
        chart.draw_series(LineSeries::new(t.eval.iter().map(|(i, b)| (*i as f64, gib(*b))), EVAL.stroke_width(2))).map_err(err)?;
        capacity_line(
            &root,
            &mut chart,
            0.0,
            n,
            gib(room),
            &match room {
                // "room for tensors 0.00 GiB" read as a rounding; say what took it.
                0 => "no room for tensors: the CUDA context and allocator reserve take all the card offers".to_string(),
                _ => format!("room for tensors {} GiB: available less context and allocator reserve", format_gib(room)),
            },
        )?;
        let (pi, pb, phase, _) = &t.peak;
        chart.draw_series(std::iter::once(Circle::new((*pi as f64, gib(*pb)), 5, INK.filled()))).map_err(err)?;
        let (px, py) = chart.backend_coord(&(*pi as f64, gib(*pb)));
        let (anchor, dx) = if (*pi as f64) > n * 0.6 { (HPos::Right, -8) } else { (HPos::Left, 8) };
        root.draw(&Text::new(
            format!("peak {} GiB ({})", format_gib(*pb), phase.label()),
            (px + dx, py + 2),
            font(12.0).pos(Pos::new(anchor, VPos::Top)),
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{compute, GIB};
    use vramfit_core::link::LinkState;
    use vramfit_core::Config;

    /// Every `<tag .../>` or `<tag ...>` of a kind, with its attributes.
    fn elements<'a>(svg: &'a str, tag: &str) -> Vec<&'a str> {
        let open = format!("<{tag} ");
        svg.match_indices(&open).map(|(i, _)| &svg[i..i + svg[i..].find('>').unwrap()]).collect()
    }

    fn attr(el: &str, name: &str) -> f64 {
        let key = format!(" {name}=\"");
        let start = el.find(&key).unwrap_or_else(|| panic!("{name} in {el}")) + key.len();
        el[start..start + el[start..].find('"').unwrap()].parse().unwrap()
    }

    fn str_attr<'a>(el: &'a str, name: &str) -> &'a str {
        let key = format!(" {name}=\"");
        let start = el.find(&key).unwrap() + key.len();
        &el[start..start + el[start..].find('"').unwrap()]
    }

    /// The plot's pixel y of a GiB value, from the layout constants (independent of plotters).
    fn y_of(gib: f64, ymax: f64) -> f64 {
        let top = MARGIN_TOP as f64;
        let h = (HEIGHT - MARGIN_TOP - MARGIN_BOTTOM) as f64;
        top + h * (1.0 - gib / ymax)
    }

    /// Points of the polylines drawn in a colour.
    fn polylines_in(svg: &str, color: RGBColor) -> Vec<Vec<(f64, f64)>> {
        elements(svg, "polyline")
            .into_iter()
            .filter(|e| str_attr(e, "stroke") == css_color(color))
            .map(|e| {
                str_attr(e, "points")
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    /// The top of each `<text>` holding `needle`, as plotters writes it (y is its baseline with
    /// a top-anchored label: the top plus about the font's ascent).
    fn text_ys(svg: &str, needle: &str) -> Vec<f64> {
        svg.match_indices("<text ")
            .map(|(i, _)| &svg[i..i + svg[i..].find("</text>").unwrap()])
            .filter(|t| t.contains(needle))
            .map(|t| attr(t, "y"))
            .collect()
    }

    #[test]
    fn labels_step_off_the_capacity_line() {
        // Clear of it: where it was asked for.
        assert_eq!(off_line(100, 50, true), 100);
        assert_eq!(off_line(100, 200, false), 100);
        // Touching it: above or below, never on it.
        for line in 98..=116 {
            let above = off_line(100, line, true);
            assert!(above + LABEL_ROW < line, "{line}: {above}");
            let below = off_line(100, line, false);
            assert!(below > line, "{line}: {below}");
        }
        // The default page: the training bar's total (11.49 GiB) sits just under the 11.69 GiB
        // line; its label is drawn above the line, the other bars' totals above their bars.
        let c = compute(&LinkState::default()).unwrap();
        let avail = c.available();
        let svg = breakdown_svg(&c.plan, avail, c.gpu.context_bytes, &c.gpu.name).unwrap();
        let cap_y = polylines_in(&svg, CAPACITY)[0][0].1;
        let train_total = format_gib(c.plan.train.nvidia_smi_bytes);
        let ys = text_ys(&svg, &format!("\n{train_total}\n"));
        assert_eq!(ys.len(), 1, "{svg}");
        assert!(ys[0] < cap_y - 2.0, "label baseline {} vs line {cap_y}", ys[0]);
        // The batch chart's "now" label is above the current point, off the line.
        let svg = batch_svg(&c.series, avail).unwrap();
        let cap_y = polylines_in(&svg, CAPACITY)[0][0].1;
        let now_y = text_ys(&svg, "now: 12")[0];
        assert!(now_y < cap_y - 2.0 || now_y - 12.0 > cap_y + 2.0, "now at {now_y}, line at {cap_y}");
        // The two batch markers' labels never share a row, wherever the capacity line runs: a
        // series that fits throughout puts it just below where they sit.
        let mut series = c.series.clone();
        series.lasting = Some(series.largest_fit.unwrap() - 1);
        for gib in [4.0, 20.0, 21.0, 22.0, 23.0, 24.0, 26.0, 30.0, 40.0] {
            let svg = batch_svg(&series, (gib * GIB) as u64).unwrap();
            let fit = text_ys(&svg, "largest that fits")[0];
            let lasting = text_ys(&svg, "keeps fitting later")[0];
            assert!((fit - lasting).abs() >= LABEL_ROW as f64, "{gib} GiB: {fit} and {lasting}");
        }
        // Its label never runs through the largest's line (QA: rightwards from batch 29 it ran
        // through batch 33's): leftwards where there is room, else past that line.
        let largest = series.largest_fit.unwrap();
        for below in [1, 2, 4, 8] {
            series.lasting = Some(largest.saturating_sub(below).max(1));
            for (series, max) in [(series.clone(), None), (series.clone(), Some(largest * 3))] {
                let mut series = series;
                if let Some(max) = max {
                    series.points.push((max, series.points.last().unwrap().1, series.points.last().unwrap().2));
                }
                let svg = batch_svg(&series, c.available()).unwrap();
                let fit_x = polylines_in(&svg, FITS).into_iter().find(|l| l.len() == 2).map(|l| l[0].0).unwrap();
                let text = svg
                    .match_indices("<text ")
                    .map(|(i, _)| &svg[i..i + svg[i..].find("</text>").unwrap()])
                    .find(|t| t.contains("keeps fitting later"))
                    .unwrap();
                let (x, width) = (attr(text, "x"), 7.0 * "keeps fitting later: 00 (estimate)".len() as f64);
                let span = if text.contains("text-anchor=\"end\"") { (x - width, x) } else { (x, x + width) };
                assert!(!(span.0..span.1).contains(&fit_x), "{below} below, max {max:?}: {span:?} across {fit_x}");
                assert!(span.0 >= 0.0 && span.1 <= WIDTH as f64, "{below} below, max {max:?}: {span:?} off the chart");
            }
        }
        // Just past the largest that fits, "now" runs rightwards, clear of the largest's line
        // (QA: at batch 13 and 14, the README's dip, the line struck through it).
        for b in [13, 14] {
            let c = compute(&state_at_batch(b)).unwrap();
            assert!(c.series.largest_fit.is_some_and(|lf| lf < b && b - lf <= 2), "the case: {:?}", c.series.largest_fit);
            let svg = batch_svg(&c.series, c.available()).unwrap();
            let fit_x = polylines_in(&svg, FITS).into_iter().find(|l| l.len() == 2).map(|l| l[0].0).unwrap();
            let now = format!("now: {b}\n");
            let text = svg
                .match_indices("<text ")
                .map(|(i, _)| &svg[i..i + svg[i..].find("</text>").unwrap()])
                .find(|t| t.contains(&now))
                .unwrap();
            assert!(text.contains("text-anchor=\"start\"") && attr(text, "x") > fit_x, "{text} / line at {fit_x}");
        }
        // At batch 1 the "now" label runs rightwards, clear of the y axis's labels.
        let one = compute(&state_at_batch(1)).unwrap();
        let svg = batch_svg(&one.series, one.available()).unwrap();
        let x = svg.match_indices("<text ").map(|(i, _)| &svg[i..i + svg[i..].find("</text>").unwrap()]).find(|t| t.contains("now: 1\n"));
        assert!(x.is_some_and(|t| attr(t, "x") > MARGIN_LEFT as f64 && t.contains("text-anchor=\"start\"")), "{x:?}");
    }

    fn state_at_batch(batch_size: u32) -> LinkState {
        LinkState { config: vramfit_core::Config { batch_size, ..Default::default() }, ..LinkState::default() }
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(12.0, 5.0), 2.5);
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(0.9, 5.0), 0.2);
        assert_eq!(nice_step(64.0, 8.0), 10.0);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
    }

    #[test]
    fn breakdown_bars_add_up_to_the_need_and_the_capacity_line_sits_at_the_available_memory() {
        let c = compute(&LinkState::default()).unwrap();
        let avail = c.available();
        let svg = breakdown_svg(&c.plan, avail, c.gpu.context_bytes, &c.gpu.name).unwrap();
        let windows = [&c.plan.train, &c.plan.eval, &c.plan.first_iter, &c.plan.eval_at_start];
        let tallest = windows.iter().map(|w| w.nvidia_smi_bytes).max().unwrap();
        let ymax = tallest.max(avail) as f64 / GIB * 1.15;
        // Segment values add up to nvidia-smi bytes exactly.
        for w in windows {
            let sum: u64 = Segment::all().iter().map(|s| s.bytes(w, c.gpu.context_bytes)).sum();
            assert_eq!(sum, w.nvidia_smi_bytes);
        }
        // The first bar's rectangles (x around the first quarter) stack from the axis to the top.
        let seg_colors: Vec<String> = Segment::all().iter().map(|s| css_color(s.color())).collect();
        let rects: Vec<&str> =
            elements(&svg, "rect").into_iter().filter(|e| seg_colors.contains(&str_attr(e, "fill").to_string())).collect();
        let first_bar: Vec<&&str> = rects.iter().filter(|e| attr(e, "x") < (WIDTH as f64 / 4.0)).collect();
        assert!(first_bar.len() >= 6, "{}", first_bar.len());
        let top = first_bar.iter().map(|e| attr(e, "y")).fold(f64::MAX, f64::min);
        let bottom = first_bar.iter().map(|e| attr(e, "y") + attr(e, "height")).fold(0.0, f64::max);
        let want_top = y_of(c.plan.train.nvidia_smi_bytes as f64 / GIB, ymax);
        assert!((top - want_top).abs() <= 2.0, "top {top} want {want_top}");
        assert!((bottom - y_of(0.0, ymax)).abs() <= 2.0, "bottom {bottom}");
        let heights: f64 = first_bar.iter().map(|e| attr(e, "height")).sum();
        assert!((heights - (bottom - top)).abs() <= first_bar.len() as f64, "segments overlap or leave gaps");
        // The capacity line.
        let cap = polylines_in(&svg, CAPACITY);
        assert_eq!(cap.len(), 1);
        let want = y_of(avail as f64 / GIB, ymax);
        assert!(cap[0].iter().all(|(_, y)| (y - want).abs() <= 1.0), "{:?} vs {want}", cap[0]);
        assert!(svg.contains(&format!("{:.2} GiB available", avail as f64 / GIB)));
    }

    #[test]
    fn batch_chart_marks_the_current_point_and_the_largest_batch_that_fits() {
        let c = compute(&LinkState::default()).unwrap();
        let svg = batch_svg(&c.series, c.available()).unwrap();
        let lf = c.series.largest_fit.unwrap();
        assert!(svg.contains(&format!("largest that fits: {lf}")));
        assert!(svg.contains("now: 12"));
        // On a card without bf16 the marker says it is memory only, as the verdict refuses the run.
        let t4 = compute(&LinkState { gpu: "t4".into(), ..LinkState::default() }).unwrap();
        assert!(t4.series.dtype_unsupported);
        let t4_svg = batch_svg(&t4.series, t4.available()).unwrap();
        assert!(t4_svg.contains(&format!("largest that fits memory: {} (no bf16 here)", t4.series.largest_fit.unwrap())), "{t4_svg}");
        // Curves have many points; the legend's swatches are two-point lines.
        let curves = |c| polylines_in(&svg, c).into_iter().filter(|l| l.len() > 2).collect::<Vec<_>>();
        let (train, eval) = (curves(TRAIN), curves(EVAL));
        assert_eq!(train.len(), 1);
        assert_eq!(eval.len(), 1);
        assert_eq!(train[0].len(), c.series.points.len());
        // Higher batch, higher line (smaller pixel y).
        assert!(train[0].first().unwrap().1 > train[0].last().unwrap().1);
        assert_eq!(polylines_in(&svg, CAPACITY).len(), 1);
        // The "fits" marker is a vertical line.
        let fit = polylines_in(&svg, FITS);
        assert!(fit.len() == 1 && fit[0][0].0 == fit[0][1].0);
    }

    /// The curves' legend sits in the row above the plot, which no curve or marker line
    /// reaches, however flat and high they run: inside the plot a huge model's eval curve, and
    /// the largest batch's line at a small batch (QA), ran through it.
    #[test]
    fn batch_curves_stay_clear_of_the_legend() {
        let huge = Config { n_layer: 96, n_embd: 12288, n_head: 96, block_size: 2048, batch_size: 1, ..Config::default() };
        let small_largest = Config { batch_size: 64, gradient_accumulation_steps: 8, ..Config::default() };
        let states = [
            LinkState::default(),
            LinkState { config: huge, ..LinkState::default() },
            LinkState { config: small_largest, other_usage_mib: 300, ..LinkState::default() },
        ];
        for state in states {
            let c = compute(&state).unwrap();
            let svg = batch_svg(&c.series, c.available()).unwrap();
            for colour in [TRAIN, EVAL] {
                let lines = polylines_in(&svg, colour);
                let swatch: Vec<&Vec<(f64, f64)>> = lines.iter().filter(|l| l.len() == 2).collect();
                assert!(swatch.len() == 1 && swatch[0].iter().all(|(_, y)| *y < MARGIN_TOP as f64), "{swatch:?}");
                let curve: Vec<(f64, f64)> = lines.iter().filter(|l| l.len() > 2).flatten().copied().collect();
                assert!(!curve.is_empty(), "no {colour:?} curve drawn");
                assert!(curve.iter().all(|(_, y)| *y >= MARGIN_TOP as f64), "{:?}", curve.iter().map(|p| p.1).fold(f64::MAX, f64::min));
            }
            let markers = polylines_in(&svg, FITS);
            assert!(markers.iter().flatten().all(|(_, y)| *y >= MARGIN_TOP as f64), "{markers:?}");
        }
        assert_eq!(tick_label(800_000.0), "800,000");
        assert_eq!(
            (tick_label(1_000_000.0), tick_label(2_500_000.0), tick_label(12_340_000.0)),
            ("1M".into(), "2.5M".into(), "12.34M".into())
        );
        assert_eq!(tick_label(2.5), "2.5");
    }

    #[test]
    fn timeline_chart_draws_both_parts_and_the_room_line() {
        let c = compute(&LinkState::default()).unwrap();
        let room = c.tensor_room();
        let svg = timeline_svg(&c.timeline, room).unwrap();
        let ymax = c.timeline.peak.1.max(room) as f64 / GIB * 1.15;
        let cap = polylines_in(&svg, CAPACITY);
        let want = y_of(room as f64 / GIB, ymax);
        assert!(cap[0].iter().all(|(_, y)| (y - want).abs() <= 1.0));
        let train = polylines_in(&svg, TRAIN);
        assert_eq!(train[0].len(), c.timeline.train.len());
        // The highest drawn point is the peak.
        let min_y = train[0].iter().chain(&polylines_in(&svg, EVAL)[0]).map(|p| p.1).fold(f64::MAX, f64::min);
        assert!((min_y - y_of(c.timeline.peak.1 as f64 / GIB, ymax)).abs() <= 1.0);
        assert!(svg.contains(&format!("peak {:.2} GiB", c.timeline.peak.1 as f64 / GIB)));
        assert!(svg.contains(&format!("room for tensors {:.2} GiB", room as f64 / GIB)) && room > 0);
    }

    /// A card the CUDA context alone fills (a custom 0.5 GiB one) leaves no room: the caption
    /// says so instead of "room for tensors 0.00 GiB".
    #[test]
    fn timeline_chart_says_when_the_card_leaves_no_room() {
        let state = vramfit_core::link::decode_strict("v=1&gpu=custom-0.5").unwrap();
        let c = compute(&state).unwrap();
        assert_eq!(c.tensor_room(), 0);
        let svg = timeline_svg(&c.timeline, c.tensor_room()).unwrap();
        assert!(svg.contains("no room for tensors") && !svg.contains("room for tensors 0.00"), "{svg}");
    }

    #[test]
    fn text_in_charts_is_escaped() {
        let c = compute(&LinkState::default()).unwrap();
        let payload = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&";
        let svg = breakdown_svg(&c.plan, c.available(), 0, payload).unwrap();
        assert!(!svg.contains("<script") && !svg.contains("<img"), "{svg}");
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(svg.contains("&amp;"));
    }
}
