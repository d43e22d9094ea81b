//! Fetching the JSON status over plain HTTP (ureq, no TLS stack: status endpoints listen on
//! loopback or an internal network).

use std::time::Duration;

use super::status::{self, Status};

/// The status URL to poll: `http://` added when no scheme is given, and `format=json` added to
/// the query unless it names a format already. Other schemes are an error.
pub fn status_url(url: &str) -> Result<String, String> {
    let url = http_url(url)?;
    let base = url.as_str();
    let has_format = base
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p.split('=').next() == Some("format")));
    Ok(if has_format {
        base.to_string()
    } else if base.contains('?') {
        let sep = if base.ends_with('?') || base.ends_with('&') {
            ""
        } else {
            "&"
        };
        format!("{base}{sep}format=json")
    } else {
        format!("{base}?format=json")
    })
}

/// `url` with `http://` added when no scheme is given, without its fragment (never sent);
/// other schemes are an error.
pub fn http_url(url: &str) -> Result<String, String> {
    let url = if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    };
    if !url.starts_with("http://") {
        return Err(format!(
            "{url}: only http:// URLs are supported (serve the status on loopback or an internal address)"
        ));
    }
    Ok(url.split('#').next().unwrap_or_default().to_string())
}

/// A blocking HTTP agent (kept-alive connection) with a timeout per request, that hands back
/// every status (errors included) as a response.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// A blocking fetcher with one agent (kept-alive connection) and a timeout per request.
pub struct Fetcher {
    agent: ureq::Agent,
    pub url: String,
}

impl Fetcher {
    pub fn new(url: &str, timeout: Duration) -> Result<Fetcher, String> {
        Ok(Fetcher {
            agent: agent(timeout),
            url: status_url(url)?,
        })
    }

    /// One status: unreachable, non-200, non-JSON, another version or too large is a one-line
    /// error (its control characters escaped: it may quote the server).
    pub fn fetch(&self) -> Result<Status, String> {
        self.fetch_raw()
            .map_err(|e| crate::escape::line(&e).into_owned())
    }

    fn fetch_raw(&self) -> Result<Status, String> {
        let u = &self.url;
        let mut resp = self
            .agent
            .get(u)
            .call()
            .map_err(|e| format!("{u}: cannot fetch: {e}"))?;
        let code = resp.status();
        if code != 200 {
            return Err(format!(
                "{u}: HTTP {code} (expected 200 and the JSON status)"
            ));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(status::MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => format!(
                    "{u}: the status is larger than {} MiB",
                    status::MAX_BODY_BYTES >> 20
                ),
                e => format!("{u}: cannot read the response: {e}"),
            })?;
        status::parse(&body).map_err(|e| format!("{u}: {e}"))
    }
}
