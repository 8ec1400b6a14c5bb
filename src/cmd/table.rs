//! Plain-text tables for listings: columns as wide as their longest cell, so long names fit.

use comfy_table::{presets, ContentArrangement, Table};

/// A borderless table with these column headers.
pub fn new(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.to_vec());
    t
}

/// Prints `t` on stdout, one row a line, without trailing blanks.
pub fn print(t: &Table) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for line in t.lines() {
        let line = line.trim_end();
        writeln!(out, "{}", line.strip_prefix(' ').unwrap_or(line))?;
    }
    out.flush()?;
    Ok(())
}
