//! The HTML report in a real browser: runs against memcached (closed loop, open loop and a
//! sweep) become JSON files, `report` renders them as one page, and headless Chromium
//! (Debian's `chromium`, or `$CHROMIUM`) takes a screenshot. The test finds every plot by its
//! frame ([`html::FRAME_COLOR`], [`html::PLOT_WIDTH`] × [`html::PLOT_HEIGHT`]), checks that
//! each holds a drawn chart (not a blank or an empty frame: axes, text and coloured curves),
//! and that the page logged nothing to the console. A page that does log (`console.error`)
//! is caught the same way, so the console check can fail. The page is also checked to refer
//! to nothing outside itself.
//!
//! The screenshot of the last run is kept in the temporary directory
//! (`memspin-loadgen-report/report.png`), for a person to look at.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use loadgen::config::Idle;
use loadgen::html::{FRAME_BORDER, FRAME_COLOR, PLOT_HEIGHT, PLOT_WIDTH};
use loadgen::{Config, output, run};

/// Size of the browser window, CSS pixels (device scale 1): tall enough for every plot.
const WINDOW: (u32, u32) = (1280, 3000);

mod support;

use support::Memcached;

/// A screenshot and the console lines of one page load.
struct Rendered {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
    console: Vec<String>,
}

impl Rendered {
    fn pixel(&self, x: u32, y: u32) -> (u8, u8, u8) {
        let i = ((y * self.width + x) * 3) as usize;
        (self.rgb[i], self.rgb[i + 1], self.rgb[i + 2])
    }
}

/// Loads `page` in headless Chromium with a fresh profile and no network services, and takes
/// a screenshot of the window.
fn render(page: &Path, dir: &Path, name: &str) -> Rendered {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let profile = dir.join(format!("profile-{name}"));
    let _ = std::fs::remove_dir_all(&profile);
    let shot = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&shot);
    let out = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{chromium}: {e} (apt-get install chromium)"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && shot.exists(),
        "{chromium} failed: {:?}\n{stderr}",
        out.status
    );
    let _ = std::fs::remove_dir_all(&profile);
    // Console messages of the page: `[...:INFO:CONSOLE:LINE] "message", source: URL (LINE)`.
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .map(str::to_string)
        .collect();
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(
        info.bit_depth == png::BitDepth::Eight && channels >= 3,
        "{info:?}"
    );
    let rgb = buf[..info.buffer_size()]
        .chunks(channels)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    Rendered {
        width: info.width,
        height: info.height,
        rgb,
        console,
    }
}

/// The plots on the screenshot: outer top-left corners of frames of the expected size.
fn frames(r: &Rendered) -> Vec<(u32, u32)> {
    let is_frame = |x: u32, y: u32| r.pixel(x, y) == FRAME_COLOR;
    let mut found = Vec::new();
    for y in 1..r.height.saturating_sub(PLOT_HEIGHT) {
        for x in 1..r.width.saturating_sub(PLOT_WIDTH) {
            if !is_frame(x, y) || is_frame(x - 1, y) || is_frame(x, y - 1) {
                continue;
            }
            // The four sides, full length.
            let top = (x..x + PLOT_WIDTH).all(|i| is_frame(i, y));
            let bottom = (x..x + PLOT_WIDTH).all(|i| is_frame(i, y + PLOT_HEIGHT - 1));
            let left = (y..y + PLOT_HEIGHT).all(|j| is_frame(x, j));
            let right = (y..y + PLOT_HEIGHT).all(|j| is_frame(x + PLOT_WIDTH - 1, j));
            if top && bottom && left && right {
                found.push((x, y));
            }
        }
    }
    found
}

/// Inside a frame: the share of pixels that are not white (axes, labels, curves), and how
/// many are strongly coloured (the curves: red, blue, green, ... of the palette).
fn contents(r: &Rendered, (x, y): (u32, u32)) -> (f64, u32) {
    let (mut ink, mut colour, mut total) = (0u32, 0u32, 0u32);
    for j in y + FRAME_BORDER..y + PLOT_HEIGHT - FRAME_BORDER {
        for i in x + FRAME_BORDER..x + PLOT_WIDTH - FRAME_BORDER {
            let (a, b, c) = r.pixel(i, j);
            total += 1;
            if (a, b, c) != (255, 255, 255) {
                ink += 1;
            }
            let (hi, lo) = (a.max(b).max(c), a.min(b).min(c));
            if hi - lo > 80 {
                colour += 1;
            }
        }
    }
    (f64::from(ink) / f64::from(total), colour)
}

#[test]
fn the_report_renders_its_plots_in_chromium_without_console_errors() {
    let mc = Memcached::start();
    let dir = std::env::temp_dir().join("memspin-loadgen-report");
    std::fs::create_dir_all(&dir).unwrap();
    let base = Config {
        servers: vec![mc.addr],
        connections: 4,
        keys: 2_000,
        key_size: 12,
        prefill: true,
        duration: Duration::from_millis(1_500),
        warmup: Duration::from_millis(200),
        interval: Duration::from_millis(250),
        idle: Idle::Sleep,
        progress: false,
        ..Config::default()
    };
    let closed = run(&Config {
        label: Some("closed loop".into()),
        ..base.clone()
    })
    .unwrap();
    let open = run(&Config {
        label: Some("open loop".into()),
        rate: Some(4_000.0),
        prefill: false,
        ..base.clone()
    })
    .unwrap();
    let points = loadgen::sweep::sweep(
        &Config {
            label: Some("sweep".into()),
            duration: Duration::from_millis(500),
            prefill: false,
            ..base.clone()
        },
        &[1_000.0, 3_000.0],
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    let files = [
        dir.join("closed.json"),
        dir.join("open.json"),
        dir.join("sweep.json"),
    ];
    output::write_json(&files[0], &closed).unwrap();
    output::write_json(&files[1], &open).unwrap();
    output::write_sweep_json(&files[2], &points).unwrap();
    let page = dir.join("report.html");
    loadgen::html::write_report(&files, &page).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing to load, no script.
    for outside in ["src=", "href=", "url(", "@import", "<script", "<link"] {
        assert!(!html.contains(outside), "the page refers out: {outside}");
    }
    for text in [
        "closed loop",
        "open loop",
        "sweep",
        "1.6.18",
        "Warnings",
        "Configuration",
    ] {
        assert!(html.contains(text), "{text} missing from the page");
    }

    let shot = render(&page, &dir, "report");
    assert_eq!((shot.width, shot.height), WINDOW);
    assert!(
        shot.console.is_empty(),
        "console messages: {:?}",
        shot.console
    );
    // Percentiles, throughput and p99 per interval, latency vs throughput.
    let plots = frames(&shot);
    assert_eq!(plots.len(), 4, "plots found at {plots:?}");
    for &at in &plots {
        let (ink, colour) = contents(&shot, at);
        assert!(
            (0.01..0.6).contains(&ink),
            "plot at {at:?}: {:.1} % of it drawn",
            ink * 100.0
        );
        assert!(colour > 300, "plot at {at:?}: only {colour} curve pixels");
    }

    // The checks can fail: a page that logs to the console, and a frame left empty.
    let bad = dir.join("bad.html");
    let empty_frame = format!(
        "<figure style=\"box-sizing:border-box;width:{PLOT_WIDTH}px;height:{PLOT_HEIGHT}px;margin:12px;border:{FRAME_BORDER}px solid rgb({},{},{})\"></figure>",
        FRAME_COLOR.0, FRAME_COLOR.1, FRAME_COLOR.2
    );
    std::fs::write(
        &bad,
        format!(
            "<!DOCTYPE html><html><body>{empty_frame}<script>console.error(\"plot data missing\")</script></body></html>"
        ),
    )
    .unwrap();
    let shot_bad = render(&bad, &dir, "bad");
    assert!(
        shot_bad
            .console
            .iter()
            .any(|l| l.contains("plot data missing")),
        "console not seen: {:?}",
        shot_bad.console
    );
    let plots = frames(&shot_bad);
    assert_eq!(plots.len(), 1);
    let (ink, colour) = contents(&shot_bad, plots[0]);
    assert!(ink < 0.01 && colour == 0, "{ink} {colour}");
}
