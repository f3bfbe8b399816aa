//! The loss curve: `out_dir/loss.svg`, drawn with plotters from `out_dir/log.jsonl`.
//!
//! Reading the log (rather than keeping the history in memory) means a resumed run draws its
//! whole history. A resumed run repeats the iterations after its checkpoint, so a later record of
//! the same iteration replaces an earlier one.

use crate::progress::LOG_FILE;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The SVG's file name inside `out_dir`.
pub const SVG_FILE: &str = "loss.svg";

/// Loss histories read from a log.
#[derive(Debug, Default, PartialEq)]
pub struct Curves {
    /// Iteration → training loss (mean over micro-steps).
    pub train: BTreeMap<u64, f32>,
    /// Iteration → (train, val) loss from `estimate_loss`.
    pub eval: BTreeMap<u64, (f32, f32)>,
}

/// Parses `log.jsonl` text; lines that are not records (a torn last line after a kill) are skipped.
pub fn parse_log(text: &str) -> Curves {
    let mut curves = Curves::default();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let Some(iter) = v["iter"].as_u64() else { continue };
        match v["kind"].as_str() {
            Some("iter") => {
                if let Some(loss) = v["loss"].as_f64() {
                    curves.train.insert(iter, loss as f32);
                }
            }
            Some("eval") => {
                if let (Some(t), Some(val)) = (v["train_loss"].as_f64(), v["val_loss"].as_f64()) {
                    curves.eval.insert(iter, (t as f32, val as f32));
                }
            }
            _ => {}
        }
    }
    curves
}

/// Draws `curves` as SVG text.
pub fn render(curves: &Curves) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let all = curves.train.values().copied().chain(curves.eval.values().flat_map(|&(t, v)| [t, v])).filter(|x| x.is_finite());
        let (lo, hi) = all.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let (lo, hi) = if lo.is_finite() { (lo as f64, hi as f64) } else { (0.0, 1.0) };
        let pad = ((hi - lo) * 0.05).max(1e-3);
        let last = curves.train.keys().chain(curves.eval.keys()).copied().max().unwrap_or(1).max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption("vramfit train: loss", ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0u64..last, (lo - pad)..(hi + pad))
            .map_err(|e| e.to_string())?;
        chart.configure_mesh().x_desc("iteration").y_desc("loss (nats)").draw().map_err(|e| e.to_string())?;
        let series = [
            ("train (per iteration)", curves.train.iter().map(|(&i, &l)| (i, l as f64)).collect::<Vec<_>>(), RGBColor(150, 150, 150)),
            ("train (estimate_loss)", curves.eval.iter().map(|(&i, &(t, _))| (i, t as f64)).collect(), BLUE),
            ("val (estimate_loss)", curves.eval.iter().map(|(&i, &(_, v))| (i, v as f64)).collect(), RED),
        ];
        for (label, points, color) in series {
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Redraws `out_dir/loss.svg` from `out_dir/log.jsonl`; whether it did. A plot is a
/// convenience: failures are reported as a note and training goes on.
pub fn write_for(out_dir: &Path) -> bool {
    let log = out_dir.join(LOG_FILE);
    if !log.exists() {
        // Nothing recorded (a library caller with a silent progress): nothing to draw.
        return false;
    }
    let result = (|| -> Result<(), String> {
        let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
        let svg = render(&parse_log(&text))?;
        let temp = out_dir.join(format!(".{SVG_FILE}.tmp-{}", std::process::id()));
        let written = std::fs::write(&temp, svg).and_then(|()| std::fs::rename(&temp, out_dir.join(SVG_FILE)));
        if written.is_err() {
            // Leave no temporary file behind (loss.svg may be a directory, the disk full).
            let _ = std::fs::remove_file(&temp);
        }
        written.map_err(|e| e.to_string())
    })();
    if let Err(e) = &result {
        use std::io::Write;
        let message = format!("cannot draw {}: {e}", out_dir.join(SVG_FILE).display());
        let _ = writeln!(std::io::stderr(), "note: {}", vramfit_core::shown_input(&message, usize::MAX));
    }
    result.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_records_replace_earlier_and_torn_lines_are_skipped() {
        let log = concat!(
            "{\"kind\":\"iter\",\"iter\":0,\"loss\":3.0}\n",
            "{\"kind\":\"eval\",\"iter\":0,\"train_loss\":3.1,\"val_loss\":3.2}\n",
            "{\"kind\":\"iter\",\"iter\":1,\"loss\":2.5}\n",
            "{\"kind\":\"iter\",\"iter\":1,\"loss\":2.4}\n",
            "{\"kind\":\"checkpoint\",\"iter\":1}\n",
            "{\"kind\":\"iter\",\"it"
        );
        let c = parse_log(log);
        assert_eq!(c.train.into_iter().collect::<Vec<_>>(), vec![(0, 3.0), (1, 2.4)]);
        assert_eq!(c.eval.into_iter().collect::<Vec<_>>(), vec![(0, (3.1, 3.2))]);
    }

    #[test]
    fn svg_has_the_three_series() {
        let c = parse_log("{\"kind\":\"iter\",\"iter\":0,\"loss\":3.0}\n{\"kind\":\"iter\",\"iter\":5,\"loss\":2.0}\n{\"kind\":\"eval\",\"iter\":5,\"train_loss\":2.1,\"val_loss\":2.2}\n");
        let svg = render(&c).unwrap();
        assert!(svg.starts_with("<svg"));
        for label in ["train (per iteration)", "val (estimate_loss)", "iteration"] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(svg.matches("<polyline").count() >= 3, "{svg}");
        // An empty log still draws an (empty) chart rather than failing.
        assert!(render(&Curves::default()).is_ok());
    }
}
