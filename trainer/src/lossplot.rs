//! The loss curve: `out_dir/loss.svg`, drawn with plotters from `out_dir/log.jsonl`.
//!
//! Reading the log (rather than keeping the history in memory) means a resumed run draws its
//! whole history. A resumed run repeats the iterations after its checkpoint, so a later record of
//! the same iteration replaces an earlier one.
//!
//! The log is read line by line and thinned as it is read (at most [`MAX_POINTS`] points a
//! series), so a redraw takes the same memory at iteration 600,000 as at 2,000: it used to read
//! the whole log into memory at every save, and a 20,000-iteration run's measured peak of the
//! run was 7.0 MiB against a steady 1.3 (QA).

use crate::progress::LOG_FILE;
use plotters::prelude::*;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::Path;

/// The SVG's file name inside `out_dir`.
pub const SVG_FILE: &str = "loss.svg";

/// The most points a series keeps (its buckets' and its latest): the chart is 800 pixels wide,
/// so more would not show.
pub const MAX_POINTS: usize = 1024;

/// A log line longer than this is no record of ours (ours are under 300 bytes): it is skipped
/// without being held whole (a file that is not a log may have no line breaks at all).
const MAX_LINE: u64 = 64 * 1024;

/// Loss histories read from a log.
#[derive(Debug, Default, PartialEq)]
pub struct Curves {
    /// Iteration → training loss (mean over micro-steps).
    pub train: BTreeMap<u64, f32>,
    /// Iteration → (train, val) loss from `estimate_loss`.
    pub eval: BTreeMap<u64, (f32, f32)>,
}

/// A series thinned to at most [`MAX_POINTS`] as it is read: iterations fall into buckets of
/// `width` (doubled whenever there would be more buckets than points), and each bucket keeps
/// its smallest iteration, with that iteration's latest record. Doubling keeps each merged
/// bucket's smallest iteration, so the result is what that final width would have kept read
/// in one go, whatever order the records came in. The latest iteration is kept besides, so the
/// curve reaches the end of the log.
struct Thinned<T> {
    width: u64,
    buckets: BTreeMap<u64, (u64, T)>,
    last: Option<(u64, T)>,
}

impl<T: Copy> Thinned<T> {
    fn new() -> Self {
        Thinned { width: 1, buckets: BTreeMap::new(), last: None }
    }

    fn insert(&mut self, iter: u64, value: T) {
        if self.last.is_none_or(|(last, _)| iter >= last) {
            self.last = Some((iter, value));
        }
        match self.buckets.entry(iter / self.width) {
            Entry::Vacant(e) => {
                e.insert((iter, value));
            }
            // A later record of the same iteration replaces it (a resumed run repeats it).
            Entry::Occupied(mut e) if iter <= e.get().0 => {
                e.insert((iter, value));
            }
            Entry::Occupied(_) => {}
        }
        // Doubled until the buckets merge: iterations far apart (an eval every 250) stay one a
        // bucket until the width passes their spacing.
        while self.buckets.len() > MAX_POINTS - 1 {
            self.width = self.width.saturating_mul(2);
            let width = self.width;
            // In ascending order, so the first of each new bucket is its smallest iteration.
            for (iter, value) in std::mem::take(&mut self.buckets).into_values() {
                self.buckets.entry(iter / width).or_insert((iter, value));
            }
        }
    }

    fn points(self) -> BTreeMap<u64, T> {
        let mut points: BTreeMap<u64, T> = self.buckets.into_values().collect();
        points.extend(self.last);
        points
    }
}

/// What a log line may hold (other keys are ignored).
#[derive(serde::Deserialize)]
struct Record {
    kind: Option<Kind>,
    iter: Option<u64>,
    loss: Option<f64>,
    train_loss: Option<f64>,
    val_loss: Option<f64>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Iter,
    Eval,
    #[serde(other)]
    Other,
}

/// Reads a log; lines that are not records (a torn last line after a kill, a line that is not
/// UTF-8 or not JSON) are skipped.
pub fn read_log(mut log: impl BufRead) -> std::io::Result<Curves> {
    let (mut train, mut eval) = (Thinned::new(), Thinned::new());
    let mut line = Vec::new();
    loop {
        line.clear();
        if log.by_ref().take(MAX_LINE).read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line.len() as u64 == MAX_LINE && line.last() != Some(&b'\n') {
            // Too long to be a record: skip to its end.
            while {
                line.clear();
                log.by_ref().take(MAX_LINE).read_until(b'\n', &mut line)? == MAX_LINE as usize && line.last() != Some(&b'\n')
            } {}
            continue;
        }
        let Ok(r) = serde_json::from_slice::<Record>(&line) else { continue };
        let Some(iter) = r.iter else { continue };
        match (r.kind, r.loss, r.train_loss, r.val_loss) {
            (Some(Kind::Iter), Some(loss), _, _) => train.insert(iter, loss as f32),
            (Some(Kind::Eval), _, Some(t), Some(v)) => eval.insert(iter, (t as f32, v as f32)),
            _ => {}
        }
    }
    Ok(Curves { train: train.points(), eval: eval.points() })
}

/// [`read_log`] of log text.
pub fn parse_log(text: &str) -> Curves {
    read_log(text.as_bytes()).expect("reading from memory cannot fail")
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
        let file = std::fs::File::open(&log).map_err(|e| e.to_string())?;
        let svg = render(&read_log(std::io::BufReader::new(file)).map_err(|e| e.to_string())?)?;
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

    /// A long run's log is thinned to at most MAX_POINTS a series as it is read, keeping the
    /// first iteration, reaching the end, and keeping a resumed run's later records.
    #[test]
    fn a_long_log_is_thinned_and_keeps_the_latest_records() {
        let last = 200_000u64;
        let mut log = String::new();
        for i in 0..=last {
            log.push_str(&format!("{{\"kind\":\"iter\",\"iter\":{i},\"loss\":{}}}\n", 1.0 + (i % 7) as f64));
            if i % 1000 == 0 {
                log.push_str(&format!("{{\"kind\":\"eval\",\"iter\":{i},\"train_loss\":2.0,\"val_loss\":3.0}}\n"));
            }
        }
        // A resumed run repeats the second half with other losses.
        for i in last / 2..=last {
            log.push_str(&format!("{{\"kind\":\"iter\",\"iter\":{i},\"loss\":0.5}}\n"));
        }
        let c = parse_log(&log);
        assert!(c.train.len() <= MAX_POINTS && c.train.len() > MAX_POINTS / 2, "{}", c.train.len());
        let width = last / MAX_POINTS as u64;
        assert_eq!(c.train.keys().next(), Some(&0));
        assert!(*c.train.keys().last().unwrap() + 2 * width >= last, "{:?}", c.train.keys().last());
        // Evenly spread: no gap over twice the final bucket width (a power of two below
        // twice last / MAX_POINTS).
        assert!(c.train.keys().zip(c.train.keys().skip(1)).all(|(a, b)| b - a <= 4 * width));
        for (&i, &loss) in &c.train {
            let want = if i >= last / 2 { 0.5 } else { 1.0 + (i % 7) as f32 };
            assert_eq!(loss, want, "iteration {i}");
        }
        // 201 evals fit whole.
        assert_eq!(c.eval.len(), 201);
        // The latest iteration is drawn, with its latest record.
        assert_eq!(c.train.last_key_value(), Some((&last, &0.5)));
        // Iterations far apart (an eval every 250, 1,030 of them) are thinned too (the width was
        // doubled once per record, so buckets of sparse iterations did not merge in time).
        let sparse: String =
            (0..1030u64).map(|k| format!("{{\"kind\":\"eval\",\"iter\":{},\"train_loss\":2.0,\"val_loss\":3.0}}\n", k * 250)).collect();
        let e = parse_log(&sparse).eval;
        assert!(e.len() <= MAX_POINTS && e.len() > MAX_POINTS / 2, "{}", e.len());
        assert_eq!(e.keys().last(), Some(&(1029 * 250)));
    }

    /// What is not a record is skipped without stopping the read: a line too long to be one
    /// (held only up to MAX_LINE), bytes that are not UTF-8, a record of another kind.
    #[test]
    fn lines_that_are_not_records_are_skipped() {
        let mut log = vec![b'x'; 3 * MAX_LINE as usize + 5];
        log.extend_from_slice(b"\n\xff\xfe{\"kind\":\"iter\",\"iter\":1,\"loss\":9.0}\n");
        log.extend_from_slice(b"{\"kind\":\"checkpoint\",\"iter\":2,\"loss\":9.0}\n");
        log.extend_from_slice(b"{\"kind\":\"iter\",\"iter\":3,\"loss\":1.5}\n");
        let c = read_log(&log[..]).unwrap();
        assert_eq!(c.train.into_iter().collect::<Vec<_>>(), vec![(3, 1.5)]);
        // A line exactly as long as the limit, broken there, is not mistaken for the next one.
        let mut log = vec![b' '; MAX_LINE as usize - 1];
        log.extend_from_slice(b"\n{\"kind\":\"iter\",\"iter\":4,\"loss\":2.5}\n");
        assert_eq!(read_log(&log[..]).unwrap().train.into_iter().collect::<Vec<_>>(), vec![(4, 2.5)]);
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
