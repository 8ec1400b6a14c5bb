//! The `--plot` figure: allocated GPU share against arrivals, one line per policy, written
//! as plain SVG text (no font or C libraries; deterministic output).

use std::fmt::Write;

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];
/// Points per line at most (longer curves are sampled evenly).
const MAX_POINTS: usize = 600;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An SVG of `lines` (name, allocated share after each arrival) under `title`.
pub fn svg(title: &str, lines: &[(String, Vec<f64>)]) -> String {
    let n = lines.iter().map(|l| l.1.len()).max().unwrap_or(0).max(1);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |i: usize| LEFT + pw * (i as f64 + 1.0) / n as f64;
    let y = |v: f64| TOP + ph * (1.0 - v.clamp(0.0, 1.0));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="14">{}</text>"#,
        LEFT + pw / 2.0,
        esc(title)
    );
    for k in 0..=10 {
        let v = k as f64 / 10.0;
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4:.0}%</text>"##,
            y(v),
            LEFT + pw,
            LEFT - 6.0,
            y(v) + 4.0,
            v * 100.0
        );
    }
    for k in 0..=5 {
        let i = (n * k / 5).max(1) - 1;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x(i),
            TOP + ph + 18.0,
            i + 1
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">arrivals</text>"#,
        LEFT + pw / 2.0,
        H - 10.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">allocated GPU share</text>"#,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    for (k, (name, v)) in lines.iter().enumerate() {
        curve(&mut s, k, name, v, &x, &y);
    }
    s.push_str("</svg>\n");
    s
}

/// One line of the plot and its legend entry (the `k`-th).
fn curve(
    s: &mut String,
    k: usize,
    name: &str,
    v: &[f64],
    x: &dyn Fn(usize) -> f64,
    y: &dyn Fn(f64) -> f64,
) {
    let pw = W - LEFT - RIGHT;
    let color = COLORS[k % COLORS.len()];
    let step = v.len().div_ceil(MAX_POINTS).max(1);
    let mut pts = String::new();
    for (i, val) in v.iter().enumerate() {
        if i % step == 0 || i + 1 == v.len() {
            let _ = write!(pts, "{:.1},{:.1} ", x(i), y(*val));
        }
    }
    let _ = writeln!(
        s,
        r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
        pts.trim_end()
    );
    let ly = TOP + 14.0 + 18.0 * k as f64;
    let _ = writeln!(
        s,
        r#"<line x1="{0:.1}" y1="{ly:.1}" x2="{1:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"/><text x="{2:.1}" y="{3:.1}">{4}</text>"#,
        LEFT + pw + 10.0,
        LEFT + pw + 30.0,
        LEFT + pw + 36.0,
        ly + 4.0,
        esc(name)
    );
}
