//! The status page (`?format=html`): one self-contained HTML document that reads the JSON
//! status from the same endpoint every second and shows it (per-limit rates and charts, top
//! keys and clients, bans, concurrency, cluster zones), with buttons for the endpoint's key
//! operations. Its scripts, style and the vendored uPlot are compiled in; it loads nothing
//! else. The replay report (`weir replay --html`) is built by [`document`] from the same
//! style and charts.
//!
//! Every page carries a Content-Security-Policy naming its inline scripts and style by
//! SHA-256 ([`csp`]): no other script runs, it connects only to its own origin, and it cannot
//! be framed when the host sends the policy as a header ([`HEADERS`]).

use std::sync::OnceLock;

use base64::Engine as _;

const UPLOT_JS: &str = include_str!("uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("uplot/uPlot.min.css");
const STYLE: &str = include_str!("style.css");
const CHARTS: &str = include_str!("charts.js");
const LIVE: &str = include_str!("live.js");
const REPORT: &str = include_str!("report.js");

const LIVE_BODY: &str = "<header><h1>weir</h1><span id=\"engine\" class=\"muted\"></span>\
<span id=\"updated\"></span><span id=\"error\" role=\"alert\"></span></header>\n\
<div id=\"action-result\" role=\"status\" aria-live=\"polite\"></div>\n\
<main><section id=\"limits\" class=\"grid\"></section><section id=\"clusters\"></section>\
<section id=\"zones\"></section></main>\n";

/// Response headers every host sends with a page besides `Content-Type` and the
/// Content-Security-Policy ([`csp`]): not framed, not sniffed, not cached, no referrer.
pub const HEADERS: [(&str, &str); 4] = [
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
];

/// A page: its HTML and its Content-Security-Policy.
pub struct Page {
    pub html: String,
    pub csp: String,
}

/// A self-contained document: the shared style and charts, then `script` (its own code),
/// `body` (trusted markup), and `data` as a JSON block (`<script type="application/json"
/// id="data">`, not run; every `<` in it is written `\u003c`, so no text in it can end the
/// block).
pub fn document(title: &str, body: &str, script: &str, data: Option<&str>) -> Page {
    let style = [UPLOT_CSS, STYLE].concat();
    let code = [CHARTS, script].concat();
    let csp = format!(
        "default-src 'none'; script-src {} {}; style-src {}; connect-src 'self'; img-src data:; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        digest(UPLOT_JS),
        digest(&code),
        digest(&style)
    );
    let data = data.map_or(String::new(), |d| {
        format!(
            "<script type=\"application/json\" id=\"data\">{}</script>\n",
            d.replace('<', "\\u003c")
        )
    });
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{csp_meta}\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n<title>{title}</title>\n\
         <style>{style}</style></head>\n<body data-state=\"loading\">\n{body}{data}\
         <script>{UPLOT_JS}</script>\n<script>{code}</script>\n</body></html>\n",
        // frame-ancestors is ignored in a meta element: the header carries it.
        csp_meta = csp.trim_end_matches("; frame-ancestors 'none'"),
        title = escape(title),
    );
    Page { html, csp }
}

/// The live status page (one copy per process).
pub fn live() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| document("weir status", LIVE_BODY, LIVE, None))
}

/// The replay report: the same style and charts as the live page over `data`, a JSON object
/// `{"report": weir replay's --json report, "timeline": {"start_s", "width_s", "buckets"}}`
/// with `buckets[limit][i] = [passed, rejected, dry-run rejected]`.
pub fn report(title: &str, data: &str) -> String {
    let body = format!(
        "<header><h1>{}</h1></header>\n<main><p id=\"summary\"></p></main>\n",
        escape(title)
    );
    document(title, &body, REPORT, Some(data)).html
}

/// `'sha256-…'` of an inline script or style's text.
fn digest(text: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(d.as_ref())
    )
}

/// Text for HTML: `&`, `<`, `>`, `"`, `'` escaped.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_each_inline_block_in_its_policy() {
        let p = live();
        for block in [UPLOT_JS.to_string(), [CHARTS, LIVE].concat()] {
            assert!(p.html.contains(&format!("<script>{block}</script>")));
            assert!(p.csp.contains(&digest(&block)));
        }
        let style = [UPLOT_CSS, STYLE].concat();
        assert!(p.html.contains(&format!("<style>{style}</style>")));
        assert!(p.csp.contains(&format!("style-src {}", digest(&style))));
        assert!(p.csp.ends_with("frame-ancestors 'none'"));
        assert!(p.html.contains("connect-src 'self'"));
        assert!(
            !p.html.contains("frame-ancestors"),
            "ignored in a meta element"
        );
        // Nothing is loaded from elsewhere.
        for outside in ["src=\"http", "href=\"http", "@import", "url(http"] {
            assert!(!p.html.contains(outside), "{outside}");
        }
    }

    #[test]
    fn data_blocks_cannot_close_their_script() {
        let p = document(
            "a<b",
            "",
            "",
            Some(r#"{"key":"</script><script>x()</script>"}"#),
        );
        assert!(p.html.contains("<title>a&lt;b</title>"));
        let block = p.html.split("id=\"data\">").nth(1).unwrap();
        let end = block.find("</script>").unwrap();
        assert!(!block[..end].contains('<'), "{}", &block[..end]);
        let back: serde_json::Value = serde_json::from_str(&block[..end]).unwrap();
        assert_eq!(back["key"], "</script><script>x()</script>");
    }

    #[test]
    fn known_digest() {
        // printf '' | openssl dgst -sha256 -binary | base64
        assert_eq!(
            digest(""),
            "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
        );
    }
}
