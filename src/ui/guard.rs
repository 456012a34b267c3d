//! Who may use the page. The server listens on 127.0.0.1 only, so only processes on this machine
//! reach it; of those, only whoever has the token (printed to the terminal of the user who ran
//! `rewind ui`, never written anywhere else) gets an answer. Browsers are kept from being used
//! against it by other sites: the `Host` must be the address served (a DNS-rebinding name is
//! refused), a foreign `Origin` is refused, the cookie is `SameSite=Strict`, and actions need a
//! POST with the page's CSRF token.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Shared;

pub const COOKIE: &str = "rewind_ui";
pub const CSRF_HEADER: &str = "x-rewind-csrf";
/// The longest URL answered: nothing the page sends comes near it.
const MAX_URI: usize = 8 * 1024;

/// Compare secrets in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{why}\n"),
    )
        .into_response()
}

fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

fn query_token(query: &str) -> Option<&str> {
    query.split('&').find_map(|kv| kv.strip_prefix("token="))
}

/// The query without its token, for the address bar.
fn without_token(query: &str) -> String {
    query
        .split('&')
        .filter(|kv| !kv.starts_with("token=") && !kv.is_empty())
        .collect::<Vec<_>>()
        .join("&")
}

pub async fn check(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let served = state.addr.to_string();
    let headers = req.headers();
    // DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 sends its own
    // name as Host.
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if host != Some(served.as_str()) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            &format!("refused: this server answers only to Host {served}"),
        );
    }
    let origin = format!("http://{served}");
    if let Some(o) = headers.get(header::ORIGIN)
        && o.as_bytes() != origin.as_bytes()
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "refused: a request from another site",
        );
    }
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|s| s.as_bytes() == b"cross-site");
    // The one request from elsewhere let through: opening the page with its token from the
    // file `rewind ui` gives the browser (a `file:` page, which browsers call another site),
    // as a top-level navigation; the token proves it.
    let opening = cross_site
        && req.method() == Method::GET
        && headers
            .get("sec-fetch-mode")
            .is_some_and(|m| m.as_bytes() == b"navigate")
        && query_token(req.uri().query().unwrap_or("")).is_some();
    if cross_site && !opening {
        return refuse(
            StatusCode::FORBIDDEN,
            "refused: a request from another site",
        );
    }
    if req.uri().to_string().len() > MAX_URI {
        return refuse(StatusCode::URI_TOO_LONG, "refused: the address is too long");
    }
    let query = req.uri().query().unwrap_or("");
    if let Some(given) = query_token(query) {
        if !same_secret(given, &state.token) {
            return refuse(StatusCode::UNAUTHORIZED, "refused: wrong token");
        }
        if req.method() != Method::GET {
            return refuse(StatusCode::FORBIDDEN, "refused: the token goes in a GET");
        }
        // Trade the token in the address for a cookie, and take it out of the address bar.
        let rest = without_token(query);
        let location = format!(
            "{}{}{}",
            req.uri().path(),
            if rest.is_empty() { "" } else { "?" },
            rest
        );
        let cookie = format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            state.token
        );
        // Opened from elsewhere, a redirect would go on as part of a navigation from another
        // site, which does not carry a `SameSite=Strict` cookie: a page of this site goes on
        // instead (the address has only the path and the query without the token).
        let mut r = if opening {
            let mut r = Response::new(Body::from(format!(
                "<!DOCTYPE html>\n<meta charset=\"utf-8\">\n\
                 <meta http-equiv=\"refresh\" content=\"0;url={}\">\n<title>rewind</title>\n",
                location.replace('&', "&amp;").replace('"', "&quot;")
            )));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        } else {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::SEE_OTHER;
            if let Ok(l) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, l);
            }
            r
        };
        if let Ok(c) = HeaderValue::from_str(&cookie) {
            r.headers_mut().insert(header::SET_COOKIE, c);
        }
        return r;
    }
    if !cookie_token(headers).is_some_and(|t| same_secret(t, &state.token)) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "refused: open the address `rewind ui` printed (it carries the token)",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        // An action: from this page only (its Origin, checked above, must be there), with the
        // CSRF token the page carries.
        if headers.get(header::ORIGIN).is_none() {
            return refuse(
                StatusCode::FORBIDDEN,
                "refused: an action without an Origin",
            );
        }
        let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        if !csrf.is_some_and(|c| same_secret(c, &state.csrf)) {
            return refuse(
                StatusCode::FORBIDDEN,
                "refused: missing or wrong CSRF token",
            );
        }
    }
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
