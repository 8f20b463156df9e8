//! Files a run writes: the JSON summary, HdrHistogram percentile-distribution (`.hgrm`) files
//! and SVG or PNG plots. PNG text is drawn with a font embedded in the binary, so no system font
//! or library is needed.
//!
//! ```text
//! Report ─▶ write_json (Summary, schema memspin-loadgen/2)
//!        ─▶ write_hgrm (PREFIX-{corrected|service}-{all|get_hit|...}.hgrm, PREFIX-send_lag.hgrm,
//!                       PREFIX-generator_delay.hgrm)
//!        ─▶ write_hlog (the time series as an HdrHistogram interval log)
//!        ─▶ plot_percentiles (latency by percentile, log scales) ; plot_sweep (latency vs rate)
//! SearchRun ─▶ write_search_json
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Once;

use hdrhistogram::Histogram;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use crate::histogram::{OpKind, Percentiles, hgrm};
use crate::report::{Report, SCHEMA, Summary};
use crate::search::{Outcome, Probe, SearchRun, Slo};

/// Creates the folder `path` goes into, so `--json results/run.json` works in a fresh tree.
fn make_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => fs::create_dir_all(dir),
        _ => Ok(()),
    }
}

/// Version tag of a sweep's JSON file.
pub const SWEEP_SCHEMA: &str = "memspin-loadgen-sweep/1";

/// Writes the summary of `report` as pretty JSON.
///
/// # Errors
/// The file system error.
pub fn write_json(path: &Path, report: &Report) -> io::Result<()> {
    let text = serde_json::to_string_pretty(&report.summary()).map_err(io::Error::other)?;
    make_parent(path)?;
    fs::write(path, text + "\n")
}

/// A sweep's JSON file: one summary per rate, in the order run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepSummary {
    /// Always [`SWEEP_SCHEMA`].
    pub schema: &'static str,
    /// The schema of each point.
    pub point_schema: &'static str,
    /// One summary per rate.
    pub points: Vec<Summary>,
}

/// Writes the summaries of a sweep as pretty JSON.
///
/// # Errors
/// The file system error.
pub fn write_sweep_json(path: &Path, reports: &[Report]) -> io::Result<()> {
    let s = SweepSummary {
        schema: SWEEP_SCHEMA,
        point_schema: SCHEMA,
        points: reports.iter().map(Report::summary).collect(),
    };
    let text = serde_json::to_string_pretty(&s).map_err(io::Error::other)?;
    make_parent(path)?;
    fs::write(path, text + "\n")
}

/// Version tag of a search's JSON file.
pub const SEARCH_SCHEMA: &str = "memspin-loadgen-search/1";

/// A search's JSON file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchSummary {
    /// Always [`SEARCH_SCHEMA`].
    pub schema: &'static str,
    /// The schema of each point and of `capacity`.
    pub point_schema: &'static str,
    /// The objective.
    pub slo: Slo,
    /// The highest rate that met it, or null.
    pub rate: Option<f64>,
    /// What bounded the search.
    pub limited_by: String,
    /// Index in `points` of the probe at `rate`, or null.
    pub best: Option<usize>,
    /// Every probe's verdict, in the order run.
    pub probes: Vec<Probe>,
    /// The closed-loop run that set the upper bound.
    pub capacity: Summary,
    /// One summary per probe, in the order run.
    pub points: Vec<Summary>,
}

/// Writes a search's summary as pretty JSON.
///
/// # Errors
/// The file system error.
pub fn write_search_json(path: &Path, s: &SearchRun) -> io::Result<()> {
    let Outcome {
        rate,
        best,
        probes,
        limited_by,
    } = s.outcome.clone();
    let summary = SearchSummary {
        schema: SEARCH_SCHEMA,
        point_schema: SCHEMA,
        slo: s.slo,
        rate,
        limited_by,
        best,
        probes,
        capacity: s.capacity.summary(),
        points: s.reports.iter().map(Report::summary).collect(),
    };
    let text = serde_json::to_string_pretty(&summary).map_err(io::Error::other)?;
    make_parent(path)?;
    fs::write(path, text + "\n")
}

/// Writes the run's time series as an HdrHistogram interval log (`.hlog`, what
/// HdrHistogram's `HistogramLogProcessor` and the Rust crate's `IntervalLogIterator` read):
/// one line per interval with its compressed histogram, values in nanoseconds, interval
/// maxima in milliseconds. Without a tag: the corrected latency in open loop, the service time
/// in closed loop; in open loop also `tag=service` lines. `StartTime` and `BaseTime` are the
/// window's start, so interval time stamps count seconds from it.
///
/// # Errors
/// The file system error.
pub fn write_hlog(path: &Path, report: &Report) -> io::Result<()> {
    use hdrhistogram::serialization::V2DeflateSerializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    let start = report.window_start.unwrap_or(std::time::UNIX_EPOCH);
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let open = report.config.rate.is_some();
    {
        let mut builder = IntervalLogWriterBuilder::new();
        builder
            .add_comment("memspin-loadgen interval log: latency in ns, interval maxima in ms")
            .add_comment(if open {
                "untagged: corrected latency (from the intended send); tag=service: service time"
            } else {
                "untagged: service time (closed loop)"
            })
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(1e6);
        let mut log = builder.begin_log_with(&mut out, &mut serializer)?;
        let service_tag = Tag::new("service").expect("a valid tag");
        for i in &report.intervals {
            let at = std::time::Duration::from_secs_f64(i.start_s.max(0.0));
            let span = std::time::Duration::from_secs_f64((i.end_s - i.start_s).max(0.0));
            let primary = if open {
                &i.stats.corrected
            } else {
                &i.stats.service
            };
            log.write_histogram(primary, at, span, None)
                .map_err(|e| io::Error::other(e.to_string()))?;
            if open {
                log.write_histogram(&i.stats.service, at, span, Some(service_tag))
                    .map_err(|e| io::Error::other(e.to_string()))?;
            }
        }
    }
    make_parent(path)?;
    fs::write(path, out)
}

/// Writes one `.hgrm` file per non-empty histogram of `report`: `PREFIX-corrected-all.hgrm`,
/// `PREFIX-service-get_hit.hgrm`, ..., `PREFIX-send_lag.hgrm`, `PREFIX-generator_delay.hgrm`;
/// values in milliseconds.
/// Returns the paths written.
///
/// # Errors
/// The file system error.
pub fn write_hgrm(prefix: &str, report: &Report) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut put = |name: String, h: &Histogram<u64>| -> io::Result<()> {
        if h.is_empty() {
            return Ok(());
        }
        let path = PathBuf::from(format!("{prefix}-{name}.hgrm"));
        make_parent(&path)?;
        fs::write(&path, hgrm(h))?;
        written.push(path);
        Ok(())
    };
    let mut sets = vec![("service", &report.service)];
    if let Some(c) = &report.corrected {
        sets.insert(0, ("corrected", c));
    }
    for (label, set) in sets {
        put(format!("{label}-all"), &set.all())?;
        for kind in OpKind::ALL {
            put(format!("{label}-{}", kind.name()), set.op(kind))?;
        }
    }
    if report.config.rate.is_some() {
        put("send_lag".to_string(), &report.send_lag)?;
    }
    put("generator_delay".to_string(), &report.generator_delay)?;
    Ok(written)
}

/// Image formats `--plot` writes, chosen by the file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotFormat {
    /// Scalable vector graphics.
    Svg,
    /// Portable network graphics.
    Png,
}

impl PlotFormat {
    /// The format for `path`.
    ///
    /// # Errors
    /// A message naming the supported extensions.
    pub fn of(path: &Path) -> Result<PlotFormat, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(PlotFormat::Svg),
            Some("png") => Ok(PlotFormat::Png),
            _ => Err(format!(
                "--plot {}: the file name must end in .svg or .png",
                path.display()
            )),
        }
    }
}

const SIZE: (u32, u32) = (1000, 620);
const COLORS: [RGBColor; 5] = [
    RGBColor(200, 30, 30),
    RGBColor(30, 90, 200),
    RGBColor(20, 150, 60),
    RGBColor(150, 80, 180),
    RGBColor(120, 120, 120),
];

fn plot_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> io::Error {
    io::Error::other(e.to_string())
}

/// Registers the embedded font as "sans-serif"; every backend lays text out with it.
pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let font = epaint_default_fonts::UBUNTU_LIGHT;
        if plotters::style::register_font("sans-serif", FontStyle::Normal, font).is_err() {
            unreachable!("the embedded font is a valid TrueType font");
        }
    });
}

/// Points of a percentile-distribution curve: x = log10(1 / (1 − q)), y = latency in µs.
pub fn percentile_curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    if h.is_empty() {
        return pts;
    }
    let x_max = (h.len() as f64).log10().max(1.0);
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let x = if q >= 1.0 {
            x_max
        } else {
            (-(1.0 - q).log10()).min(x_max)
        };
        pts.push((x, (v.value_iterated_to().max(1)) as f64 / 1_000.0));
    }
    pts
}

/// Named point series, the data of one plot.
type Series<'a> = Vec<(&'a str, Vec<(f64, f64)>)>;

/// Plots latency against percentile (x: 0 %, 90 %, 99 %, 99.9 %, ...) for each named
/// histogram, log latency axis; SVG or PNG by the extension of `path`.
///
/// # Errors
/// An unsupported extension or a drawing / file error.
pub fn plot_percentiles(
    path: &Path,
    title: &str,
    curves: &[(&str, &Histogram<u64>)],
) -> io::Result<()> {
    let format = PlotFormat::of(path).map_err(io::Error::other)?;
    make_parent(path)?;
    register_font();
    let series: Series<'_> = curves
        .iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(n, h)| (*n, percentile_curve(h)))
        .collect();
    match format {
        PlotFormat::Svg => draw_percentiles(
            SVGBackend::new(path, SIZE).into_drawing_area(),
            title,
            &series,
        ),
        PlotFormat::Png => draw_percentiles(
            BitMapBackend::new(path, SIZE).into_drawing_area(),
            title,
            &series,
        ),
    }
}

fn draw_percentiles<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    series: &Series<'_>,
) -> io::Result<()> {
    let x_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.0))
        .fold(1.0, f64::max)
        .ceil();
    let (y_min, y_max) = y_range(series.iter().flat_map(|(_, p)| p.iter().map(|p| p.1)));
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (µs)")
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(plot_err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// Plots p50, p99 and p99.9 (corrected when open loop) against the achieved rate of each
/// sweep point, plus the service-time p99; SVG or PNG by the extension of `path`.
///
/// # Errors
/// An unsupported extension or a drawing / file error.
pub fn plot_sweep(path: &Path, reports: &[Report]) -> io::Result<()> {
    let format = PlotFormat::of(path).map_err(io::Error::other)?;
    make_parent(path)?;
    register_font();
    let rows: Vec<(f64, Percentiles, Percentiles)> = reports
        .iter()
        .map(|r| {
            let primary = r.corrected.as_ref().unwrap_or(&r.service);
            (
                r.achieved_rate(),
                Percentiles::of(&primary.all()),
                Percentiles::of(&r.service.all()),
            )
        })
        .collect();
    let mut series: Series<'_> = Vec::new();
    type Pick = fn(&Percentiles, &Percentiles) -> f64;
    let lines: [(&str, Pick); 4] = [
        ("p50", |p, _| p.p50),
        ("p99", |p, _| p.p99),
        ("p99.9", |p, _| p.p99_9),
        ("service p99", |_, s| s.p99),
    ];
    for (name, f) in lines {
        series.push((name, rows.iter().map(|(x, p, s)| (*x, f(p, s))).collect()));
    }
    match format {
        PlotFormat::Svg => draw_sweep(SVGBackend::new(path, SIZE).into_drawing_area(), &series),
        PlotFormat::Png => draw_sweep(BitMapBackend::new(path, SIZE).into_drawing_area(), &series),
    }
}

fn draw_sweep<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    series: &Series<'_>,
) -> io::Result<()> {
    let x_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.0))
        .fold(1.0, f64::max)
        * 1.05;
    let (y_min, y_max) = y_range(
        series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|p| p.1))
            .filter(|v| *v > 0.0),
    );
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("latency vs throughput", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..x_max, (y_min..y_max).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("achieved rate (requests/s)")
        .y_desc("latency (µs)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(plot_err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = pts.iter().map(|&(x, y)| (x, y.max(y_min))).collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        return (1.0, 10.0);
    }
    // Headroom above the data (a factor of 5 on the log axis) keeps the legend, drawn in the
    // upper left, clear of the curves.
    ((lo * 0.8).max(0.01), (hi * 5.0).max(lo * 10.0))
}

/// `0` → "0%", `1` → "90%", `2` → "99%", `3` → "99.9%".
pub fn percentile_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    let digits = (x.round() as i64 - 2).max(0) as usize;
    format!("{p:.digits$}%")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::new_histogram;

    #[test]
    fn percentile_labels_read_like_the_hdr_plotter() {
        assert_eq!(percentile_label(0.0), "0%");
        assert_eq!(percentile_label(1.0), "90%");
        assert_eq!(percentile_label(2.0), "99%");
        assert_eq!(percentile_label(3.0), "99.9%");
        assert_eq!(percentile_label(5.0), "99.999%");
    }

    #[test]
    fn curve_is_monotone_and_ends_at_the_max() {
        let mut h = new_histogram();
        for i in 1..=10_000u64 {
            h.record(i * 1_000).unwrap();
        }
        let c = percentile_curve(&h);
        assert!(c.windows(2).all(|w| w[1].0 >= w[0].0 && w[1].1 >= w[0].1));
        let last = c.last().unwrap();
        assert_eq!(last.0, 4.0);
        assert!((last.1 - 10_000.0).abs() < 10.0, "{last:?}");
    }

    #[test]
    fn svg_and_png_plots_are_written_and_other_extensions_are_refused() {
        let dir = std::env::temp_dir().join(format!("loadgen-plot-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut h = new_histogram();
        for i in 1..=1_000u64 {
            h.record(i * 1_000).unwrap();
        }
        let svg = dir.join("new-folder").join("p.svg");
        plot_percentiles(&svg, "test", &[("service", &h)]).unwrap();
        let text = fs::read_to_string(&svg).unwrap();
        assert!(
            text.starts_with("<svg") && text.contains("latency (µs)") && text.contains("99.9%")
        );
        let png = dir.join("p.png");
        plot_percentiles(&png, "test", &[("service", &h)]).unwrap();
        let bytes = fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(
            bytes.len() > 10_000,
            "a real picture, text included: {} bytes",
            bytes.len()
        );
        assert!(plot_percentiles(&dir.join("p.jpg"), "test", &[("service", &h)]).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
