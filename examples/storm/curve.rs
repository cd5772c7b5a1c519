//! Arrival curves: attempts per 50 ms over time, admitted against refused, and their SVG
//! (plotters, SVG backend only), naive client above, SDK client below.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::storm::{Outcome, Report};

/// The width of one bin.
pub const BIN: Duration = Duration::from_millis(50);

/// Attempts per [`BIN`], by how they ended; bin `i` covers `[i * BIN, (i + 1) * BIN)` after the
/// synchronised start (by the time each attempt was sent).
#[derive(Clone, Debug, Default)]
pub struct Curve {
    /// 2xx.
    pub admitted: Vec<u32>,
    /// 429 and 503.
    pub refused: Vec<u32>,
    /// No response (reset, silent) and other statuses.
    pub other: Vec<u32>,
}

impl Curve {
    /// The curve of `report`, over `bins` bins (later attempts are left out).
    pub fn of(report: &Report, bins: usize) -> Curve {
        let mut c = Curve {
            admitted: vec![0; bins],
            refused: vec![0; bins],
            other: vec![0; bins],
        };
        for e in &report.events {
            let i = (e.at.as_nanos() / BIN.as_nanos()) as usize;
            if i >= bins {
                continue;
            }
            match e.outcome {
                Outcome::Admitted => c.admitted[i] += 1,
                o if o.is_refusal() => c.refused[i] += 1,
                _ => c.other[i] += 1,
            }
        }
        c
    }

    /// Bins needed to show `report` whole.
    pub fn bins_for(report: &Report) -> usize {
        report
            .events
            .iter()
            .map(|e| (e.at.as_nanos() / BIN.as_nanos()) as usize + 1)
            .max()
            .unwrap_or(1)
    }

    /// All attempts of bin `i`.
    pub fn attempts(&self, i: usize) -> u32 {
        self.admitted[i] + self.refused[i] + self.other[i]
    }

    fn bin_range(&self, r: &Range<Duration>) -> Range<usize> {
        let n = self.admitted.len();
        let a = ((r.start.as_nanos() / BIN.as_nanos()) as usize).min(n);
        let b = ((r.end.as_nanos() / BIN.as_nanos()) as usize).min(n);
        a..b
    }

    /// Most attempts (whatever their outcome) in one bin over `r`.
    pub fn peak_attempts(&self, r: Range<Duration>) -> u32 {
        self.bin_range(&r)
            .map(|i| self.attempts(i))
            .max()
            .unwrap_or(0)
    }
}

/// The recovery spike: the most attempts in one 50 ms bin during the second after capacity
/// returns at `recovery`, divided by the most attempts in one bin over `steady` (normal
/// operation before the fault; its own busiest 50 ms, so that the ordinary unevenness of
/// traffic is not counted as a spike). Where normal traffic is all admitted (the recovery
/// scenario) that is the busiest 50 ms of the admitted rate. About 1 means the returning clients
/// add no more than normal traffic's highs; clients that all come back at the same instant show
/// as several times it.
pub fn spike_ratio(curve: &Curve, steady: Range<Duration>, recovery: Duration) -> f64 {
    let after = curve.peak_attempts(recovery..recovery + Duration::from_secs(1));
    f64::from(after) / f64::from(curve.peak_attempts(steady).max(1))
}

/// Writes `path`: one panel per client run, top to bottom, on one time axis, each on its own
/// vertical scale (its peak is in its caption); `marks` are vertical lines (outage, recovery).
pub fn write_svg(
    path: &Path,
    title: &str,
    runs: &[(&str, &Report)],
    marks: &[(Duration, &str)],
) -> Result<(), Box<dyn std::error::Error>> {
    let bins = runs
        .iter()
        .map(|(_, r)| Curve::bins_for(r))
        .max()
        .unwrap_or(1);
    let x_max = bins as f64 * BIN.as_secs_f64();
    let height = 40 + 300 * runs.len() as u32;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let panels = root.split_evenly((runs.len(), 1));
    for (area, (name, report)) in panels.iter().zip(runs) {
        let c = Curve::of(report, bins);
        let peak = (0..bins).map(|i| c.attempts(i)).max().unwrap_or(0).max(1);
        let caption = format!(
            "{name}: {} attempts for {} logical requests (peak {peak} per 50 ms)",
            report.attempts(),
            report.logical.len()
        );
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..x_max, 0f64..f64::from(peak) * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the synchronised start")
            .y_desc("attempts per 50 ms")
            .light_line_style(WHITE)
            .draw()?;
        for (t, label) in marks {
            let x = t.as_secs_f64();
            chart
                .draw_series(LineSeries::new(
                    [(x, 0.0), (x, f64::from(peak) * 1.1)],
                    BLACK.mix(0.4).stroke_width(1),
                ))?
                .label(format!("{label} ({x:.1} s)"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.mix(0.4)));
        }
        let series: [(&str, &Vec<u32>, RGBColor); 3] = [
            ("admitted (2xx)", &c.admitted, RGBColor(0x1b, 0x9e, 0x4b)),
            ("refused (429, 503)", &c.refused, RGBColor(0xd6, 0x27, 0x28)),
            ("lost or other", &c.other, RGBColor(0x7f, 0x7f, 0x7f)),
        ];
        for (label, data, color) in series {
            if data.iter().all(|&v| v == 0) {
                continue;
            }
            let points = data
                .iter()
                .enumerate()
                .map(|(i, &v)| ((i as f64 + 0.5) * BIN.as_secs_f64(), f64::from(v)));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK.mix(0.3))
            .background_style(WHITE.mix(0.9))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
