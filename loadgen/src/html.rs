//! `memspin-loadgen report RESULT.json... --html OUT.html`: one self-contained HTML page for
//! one run or several side by side (memspin vs memcached): the runs compared in a table, the
//! latency-by-percentile curves overlaid, the time series (throughput and p99 per interval),
//! the sweep and search curves, and for every run its configuration, environment and warnings.
//!
//! ```text
//! RESULT.json (run, sweep or search) ─▶ serde_json::Value ─▶ Run { label, summary(s) }
//!   histograms (base64 HdrHistogram) ─▶ percentile curves ─┐
//!   time_series ─▶ ops/s and p99 per interval ─────────────┼─▶ inline SVG (plotters) ─▶ page
//!   sweep / search points ─▶ latency vs achieved rate ─────┘
//! ```
//!
//! The page loads nothing: styles are inline, plots are inline SVG with their data drawn in,
//! and there is no script. Every plot sits in a `figure.plot` frame of
//! [`PLOT_WIDTH`] × [`PLOT_HEIGHT`] pixels with a [`FRAME_COLOR`] border (the browser test
//! finds the plots by it).

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::Value;

use crate::output::{percentile_curve, percentile_label};
use crate::report::decode_histogram;

/// Width of every plot, CSS pixels.
pub const PLOT_WIDTH: u32 = 960;
/// Height of every plot, CSS pixels.
pub const PLOT_HEIGHT: u32 = 420;
/// Border colour of a plot's frame (`#5b2a86`).
pub const FRAME_COLOR: (u8, u8, u8) = (0x5b, 0x2a, 0x86);
/// Width of a plot's frame border, CSS pixels.
pub const FRAME_BORDER: u32 = 3;

const PALETTE: [RGBColor; 8] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

/// One result file.
struct Run {
    label: String,
    path: PathBuf,
    kind: Kind,
}

enum Kind {
    /// One run's summary.
    Single(Value),
    /// A sweep's or a search's points (and, for a search, the file itself).
    Series {
        points: Vec<Value>,
        search: Option<Value>,
    },
}

/// Reads `results` and writes the page to `out`.
///
/// # Errors
/// A file that cannot be read, is not JSON, or is not a memspin-loadgen result; or the page
/// cannot be written.
pub fn write_report(results: &[PathBuf], out: &Path) -> io::Result<()> {
    let mut runs = Vec::new();
    for path in results {
        let text = fs::read_to_string(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        runs.push(Run::of(path, v)?);
    }
    let page = render(&runs).map_err(io::Error::other)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    fs::write(out, page)
}

impl Run {
    fn of(path: &Path, v: Value) -> io::Result<Run> {
        let schema = v["schema"].as_str().unwrap_or_default().to_string();
        let stem = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into(),
        );
        let kind = if schema.starts_with("memspin-loadgen-sweep/") {
            Kind::Series {
                points: v["points"].as_array().cloned().unwrap_or_default(),
                search: None,
            }
        } else if schema.starts_with("memspin-loadgen-search/") {
            Kind::Series {
                points: v["points"].as_array().cloned().unwrap_or_default(),
                search: Some(v.clone()),
            }
        } else if schema.starts_with("memspin-loadgen/") {
            Kind::Single(v.clone())
        } else {
            return Err(io::Error::other(format!(
                "{}: not a memspin-loadgen result (schema {schema:?})",
                path.display()
            )));
        };
        let first = match &kind {
            Kind::Single(s) => s.clone(),
            Kind::Series { points, .. } => points.first().cloned().unwrap_or(Value::Null),
        };
        let label = first["label"].as_str().map_or(stem, str::to_string);
        Ok(Run {
            label,
            path: path.to_path_buf(),
            kind,
        })
    }

    /// The summaries in the file.
    fn summaries(&self) -> Vec<&Value> {
        match &self.kind {
            Kind::Single(s) => vec![s],
            Kind::Series { points, .. } => points.iter().collect(),
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// The latency the run is judged by: corrected in open loop, service in closed loop.
fn primary(s: &Value) -> (&Value, &'static str) {
    if s["latency_us"]["corrected"].is_object() {
        (&s["latency_us"]["corrected"]["all"], "corrected")
    } else {
        (&s["latency_us"]["service"]["all"], "service")
    }
}

fn render(runs: &[Run]) -> Result<String, String> {
    crate::output::register_font();
    let mut html = String::new();
    let title = if runs.len() == 1 {
        format!("memspin-loadgen: {}", runs[0].label)
    } else {
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        format!("memspin-loadgen: {}", labels.join(" vs "))
    };
    let (r, g, b) = FRAME_COLOR;
    let _ = write!(
        html,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; background: #f3f4f6; color: #111; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 18px; margin-top: 28px; }} h3 {{ font-size: 15px; }}
table {{ border-collapse: collapse; background: #fff; margin: 8px 0; font-size: 13px; }}
td, th {{ border: 1px solid #cfd4dc; padding: 3px 8px; text-align: right; }}
td.l, th.l {{ text-align: left; }}
figure.plot {{ box-sizing: border-box; width: {w}px; height: {h}px; margin: 12px 0;
  border: {fb}px solid rgb({r},{g},{b}); background: #fff; overflow: hidden; padding: 0; }}
figure.plot svg {{ display: block; }}
.warn {{ color: #a40000; }} .muted {{ color: #666; }}
details {{ background: #fff; padding: 6px 10px; margin: 8px 0; border: 1px solid #cfd4dc; }}
code {{ font-size: 12px; }}
</style></head><body>
<h1>{title}</h1>
<p class="muted">{n} result file(s). Latencies in microseconds; the latency a run is judged by is the corrected latency (from the intended send time) in open loop and the service time in closed loop.</p>
"#,
        title = esc(&title),
        w = PLOT_WIDTH,
        h = PLOT_HEIGHT,
        fb = FRAME_BORDER,
        n = runs.len(),
    );
    comparison_table(&mut html, runs);
    let singles: Vec<(&Run, &Value)> = runs
        .iter()
        .filter_map(|r| match &r.kind {
            Kind::Single(s) => Some((r, s)),
            Kind::Series { .. } => None,
        })
        .collect();
    if !singles.is_empty() {
        html.push_str("<h2>Latency by percentile</h2>\n");
        html.push_str(&percentile_plot(&singles)?);
        if singles
            .iter()
            .any(|(_, s)| s["time_series"].as_array().is_some_and(|a| !a.is_empty()))
        {
            html.push_str("<h2>Time series</h2>\n");
            html.push_str(&time_plot(&singles, false)?);
            html.push_str(&time_plot(&singles, true)?);
        }
    }
    let series: Vec<&Run> = runs
        .iter()
        .filter(|r| matches!(r.kind, Kind::Series { .. }))
        .collect();
    if !series.is_empty() {
        html.push_str("<h2>Latency vs throughput (sweeps and searches)</h2>\n");
        html.push_str(&sweep_plot(&series)?);
        for run in &series {
            series_table(&mut html, run);
        }
    }
    html.push_str("<h2>Runs in detail</h2>\n");
    for run in runs {
        details(&mut html, run);
    }
    html.push_str("</body></html>\n");
    Ok(html)
}

fn comparison_table(html: &mut String, runs: &[Run]) {
    html.push_str("<h2>Comparison</h2>\n<table><tr><th class=\"l\">run</th><th class=\"l\">mode</th><th class=\"l\">protocol</th><th class=\"l\">server</th><th>ops/s</th><th>vs first</th><th>hit ratio</th><th class=\"l\">latency</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>p99 vs first</th><th>errors</th><th>warnings</th></tr>\n");
    let mut first: Option<(f64, f64)> = None;
    for run in runs {
        for s in run.summaries() {
            let (lat, which) = primary(s);
            let ops = num(&s["ops_per_sec"]);
            let p99 = num(&lat["p99"]);
            let (ops0, p990) = *first.get_or_insert((ops, p99));
            let ratio = |a: f64, b: f64| {
                if b > 0.0 {
                    format!("{:+.1} %", 100.0 * (a / b - 1.0))
                } else {
                    "–".to_string()
                }
            };
            let mode = match s["config"]["rate"].as_f64() {
                Some(r) => format!("open {r:.0}/s"),
                None => "closed".to_string(),
            };
            let server = s["environment"]["servers"][0]["version"]
                .as_str()
                .unwrap_or("?");
            let warnings = s["warnings"].as_array().map_or(0, Vec::len);
            let _ = writeln!(
                html,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{:.0}</td><td>{}</td><td>{:.3}</td><td class=\"l\">{which}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td{}>{}</td></tr>",
                esc(&run.label),
                mode,
                esc(s["protocol"].as_str().unwrap_or("?")),
                esc(server),
                ops,
                ratio(ops, ops0),
                num(&s["hit_ratio"]),
                num(&lat["p50"]),
                num(&lat["p90"]),
                p99,
                num(&lat["p99_9"]),
                num(&lat["max"]),
                ratio(p99, p990),
                s["errors"]["total"].as_u64().unwrap_or(0),
                if warnings > 0 { " class=\"warn\"" } else { "" },
                warnings
            );
        }
    }
    html.push_str("</table>\n");
}

fn series_table(html: &mut String, run: &Run) {
    let Kind::Series { points, search } = &run.kind else {
        return;
    };
    let _ = writeln!(html, "<h3>{}</h3>", esc(&run.label));
    if let Some(s) = search {
        let _ = writeln!(
            html,
            "<p>Search: highest rate with corrected p{} under {} µs: <b>{}</b> (bounded by: {}).</p>",
            num(&s["slo"]["percentile"]),
            num(&s["slo"]["limit_us"]),
            s["rate"]
                .as_f64()
                .map_or_else(|| "none".to_string(), |r| format!("{r:.0}/s")),
            esc(s["limited_by"].as_str().unwrap_or("?"))
        );
    }
    html.push_str("<table><tr><th>target/s</th><th>achieved/s</th><th>p50</th><th>p99</th><th>p99.9</th><th>service p99</th><th>errors</th><th class=\"l\">verdict</th></tr>\n");
    for (i, p) in points.iter().enumerate() {
        let (lat, _) = primary(p);
        let verdict = search
            .as_ref()
            .map(|s| &s["probes"][i])
            .map_or(String::new(), |pr| {
                pr["reason"].as_str().unwrap_or("ok").to_string()
            });
        let _ = writeln!(
            html,
            "<tr><td>{:.0}</td><td>{:.0}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            num(&p["config"]["rate"]),
            num(&p["open_loop"]["achieved_rate"]),
            num(&lat["p50"]),
            num(&lat["p99"]),
            num(&lat["p99_9"]),
            num(&p["latency_us"]["service"]["all"]["p99"]),
            p["errors"]["total"].as_u64().unwrap_or(0),
            esc(&verdict)
        );
    }
    html.push_str("</table>\n");
}

fn kv_rows(html: &mut String, prefix: &str, v: &Value) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                kv_rows(html, &p, v);
            }
        }
        other => {
            let text = match other {
                Value::String(s) => s.clone(),
                Value::Array(a) => a
                    .iter()
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(" "),
                x => x.to_string(),
            };
            let _ = writeln!(
                html,
                "<tr><td class=\"l\">{}</td><td class=\"l\"><code>{}</code></td></tr>",
                esc(prefix),
                esc(&text)
            );
        }
    }
}

fn details(html: &mut String, run: &Run) {
    let s = match &run.kind {
        Kind::Single(s) => s,
        Kind::Series { points, .. } => match points.first() {
            Some(p) => p,
            None => return,
        },
    };
    let _ = writeln!(
        html,
        "<details open><summary><b>{}</b> <span class=\"muted\">{}</span></summary>",
        esc(&run.label),
        esc(&run.path.display().to_string())
    );
    let warnings: Vec<&str> = run
        .summaries()
        .iter()
        .flat_map(|s| s["warnings"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    if warnings.is_empty() {
        html.push_str("<p>No warnings.</p>\n");
    } else {
        html.push_str("<h3 class=\"warn\">Warnings</h3><ul>\n");
        for w in warnings {
            let _ = writeln!(html, "<li class=\"warn\">{}</li>", esc(w));
        }
        html.push_str("</ul>\n");
    }
    html.push_str("<h3>Configuration</h3><table>\n");
    kv_rows(html, "", &s["config"]);
    html.push_str("</table>\n");
    let env = &s["environment"];
    if env.is_object() {
        html.push_str("<h3>Environment</h3><table>\n");
        kv_rows(html, "loadgen", &env["loadgen"]);
        kv_rows(html, "host", &env["host"]);
        html.push_str("</table>\n");
        for server in env["servers"].as_array().into_iter().flatten() {
            let _ = writeln!(
                html,
                "<details><summary>server {} — version {}{}</summary><table>",
                esc(server["server"].as_str().unwrap_or("?")),
                esc(server["version"].as_str().unwrap_or("?")),
                server["error"].as_str().map_or(String::new(), |e| format!(
                    " (<span class=\"warn\">{}</span>)",
                    esc(e)
                ))
            );
            kv_rows(html, "", &server["settings"]);
            html.push_str("</table></details>\n");
        }
    }
    html.push_str("</details>\n");
}

type Series = Vec<(String, Vec<(f64, f64)>, bool)>;

fn plot_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
    e.to_string()
}

fn frame(svg: &str) -> String {
    format!("<figure class=\"plot\">{svg}</figure>\n")
}

fn y_log_range(series: &Series) -> (f64, f64) {
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        (1.0, 10.0)
    } else {
        ((lo * 0.8).max(0.01), (hi * 4.0).max(lo * 10.0))
    }
}

/// The plot area inside the frame's border.
fn inner() -> (u32, u32) {
    (
        PLOT_WIDTH - 2 * FRAME_BORDER,
        PLOT_HEIGHT - 2 * FRAME_BORDER,
    )
}

fn draw_lines<'a, DB: DrawingBackend + 'a, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &Series,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (name, pts, dashed)) in series.iter().enumerate() {
        let color = PALETTE[(i / 2 + i % 2 * 4) % PALETTE.len()];
        let color = if series.iter().all(|s| !s.2) {
            PALETTE[i % PALETTE.len()]
        } else {
            color
        };
        let style = color.stroke_width(if *dashed { 1 } else { 2 });
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), style))
            .map_err(plot_err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        chart
            .draw_series(
                pts.iter()
                    .map(|&p| Circle::new(p, if *dashed { 1 } else { 2 }, color.filled())),
            )
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(plot_err)
}

fn percentile_plot(runs: &[(&Run, &Value)]) -> Result<String, String> {
    let mut series: Series = Vec::new();
    for (run, s) in runs {
        let h = &s["histograms"];
        if let Some(text) = h["corrected"].as_str() {
            let hist = decode_histogram(text).map_err(|e| format!("{}: {e}", run.label))?;
            series.push((
                format!("{} corrected", run.label),
                percentile_curve(&hist),
                false,
            ));
        }
        if let Some(text) = h["service"].as_str() {
            let hist = decode_histogram(text).map_err(|e| format!("{}: {e}", run.label))?;
            let open = h["corrected"].is_string();
            series.push((
                format!("{} service", run.label),
                percentile_curve(&hist),
                open,
            ));
        }
    }
    let x_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max)
        .ceil();
    let (y_lo, y_hi) = y_log_range(&series);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, inner()).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("latency by percentile (all runs)", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, (y_lo..y_hi).log_scale())
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
        draw_lines(&mut chart, &series)?;
        root.present().map_err(plot_err)?;
    }
    Ok(frame(&svg))
}

/// Throughput (`latency` false) or p99 latency per interval, one line per run.
fn time_plot(runs: &[(&Run, &Value)], latency: bool) -> Result<String, String> {
    let mut series: Series = Vec::new();
    for (run, s) in runs {
        let Some(points) = s["time_series"].as_array() else {
            continue;
        };
        let pts: Vec<(f64, f64)> = points
            .iter()
            .map(|p| {
                let x = num(&p["end_s"]);
                let y = if latency {
                    let l = if p["corrected"].is_object() {
                        &p["corrected"]
                    } else {
                        &p["service"]
                    };
                    num(&l["p99"])
                } else {
                    num(&p["ops_per_sec"])
                };
                (x, y)
            })
            .collect();
        series.push((run.label.clone(), pts, false));
    }
    let x_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, inner()).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(72);
        if latency {
            let (y_lo, y_hi) = y_log_range(&series);
            builder.caption(
                "p99 latency per interval (corrected in open loop, service in closed loop)",
                ("sans-serif", 18),
            );
            let mut chart = builder
                .build_cartesian_2d(0.0..x_max * 1.02, (y_lo..y_hi).log_scale())
                .map_err(plot_err)?;
            chart
                .configure_mesh()
                .x_desc("seconds into the window")
                .y_desc("p99 (µs)")
                .y_label_formatter(&|y| format!("{y}"))
                .draw()
                .map_err(plot_err)?;
            draw_lines(&mut chart, &series)?;
        } else {
            let y_hi = series
                .iter()
                .flat_map(|s| s.1.iter().map(|p| p.1))
                .fold(1.0, f64::max)
                * 1.35;
            builder.caption("throughput per interval", ("sans-serif", 18));
            let mut chart = builder
                .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_hi)
                .map_err(plot_err)?;
            chart
                .configure_mesh()
                .x_desc("seconds into the window")
                .y_desc("replies/s")
                .y_label_formatter(&|y| format!("{y:.0}"))
                .draw()
                .map_err(plot_err)?;
            draw_lines(&mut chart, &series)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(frame(&svg))
}

fn sweep_plot(runs: &[&Run]) -> Result<String, String> {
    let mut series: Series = Vec::new();
    for run in runs {
        let Kind::Series { points, .. } = &run.kind else {
            continue;
        };
        let mut rows: Vec<(f64, f64, f64)> = points
            .iter()
            .map(|p| {
                let (lat, _) = primary(p);
                (
                    num(&p["open_loop"]["achieved_rate"]),
                    num(&lat["p50"]),
                    num(&lat["p99"]),
                )
            })
            .collect();
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push((
            format!("{} p99", run.label),
            rows.iter().map(|r| (r.0, r.2)).collect(),
            false,
        ));
        series.push((
            format!("{} p50", run.label),
            rows.iter().map(|r| (r.0, r.1)).collect(),
            true,
        ));
    }
    let x_max = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max)
        * 1.05;
    let (y_lo, y_hi) = y_log_range(&series);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, inner()).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "latency vs throughput (corrected latency)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, (y_lo..y_hi).log_scale())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("achieved rate (requests/s)")
            .y_desc("latency (µs)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y}"))
            .draw()
            .map_err(plot_err)?;
        let clamped: Series = series
            .into_iter()
            .map(|(n, p, d)| (n, p.into_iter().map(|(x, y)| (x, y.max(y_lo))).collect(), d))
            .collect();
        draw_lines(&mut chart, &clamped)?;
        root.present().map_err(plot_err)?;
    }
    Ok(frame(&svg))
}
