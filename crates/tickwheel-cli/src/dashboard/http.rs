//! Just enough HTTP/1.1 for the dashboard: one request a connection (`Connection: close`),
//! headers and bodies of at most [`MAX_HEAD`] and [`MAX_BODY`] bytes, no chunked bodies.

use std::io::{Read, Write};

/// The most bytes of a request line and headers.
const MAX_HEAD: usize = 16 * 1024;

/// The most bytes of a request body (the forms are a few hundred).
const MAX_BODY: usize = 16 * 1024;

/// A request that cannot be read: why, for a 400 page.
#[derive(Debug)]
pub struct BadRequest(pub String);

/// The text of a [`BadRequest`] for a client that did not send its request in time.
pub const TOO_SLOW: &str = "The request was not sent in time.";

/// A request as the pages see it.
#[derive(Debug)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, percent-decoded.
    pub path: String,
    /// The query's fields, decoded.
    pub query: Vec<(String, String)>,
    /// Headers, names in lowercase.
    headers: Vec<(String, String)>,
    /// The body's fields, decoded (empty but for a `POST`: no other body is read).
    form: Vec<(String, String)>,
}

impl Request {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first query field called `name`.
    pub fn query(&self, name: &str) -> Option<&str> {
        field(&self.query, name)
    }

    /// The body's fields, for a form post.
    pub fn form(&self) -> Vec<(String, String)> {
        self.form.clone()
    }
}

/// The first field called `name` of a decoded query or form.
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The fields of `application/x-www-form-urlencoded` text (a query or a form body), as
/// `form_urlencoded::parse` splits and decodes them but strict: a name or value whose
/// percent-decoded bytes are not UTF-8 refuses the request, where `parse` would make it
/// U+FFFD and so name another task (`id=%FF` is not the task `"\u{fffd}"`). `what` says
/// where the fields are ("query", "form") in the refusal.
fn decode_fields(text: &[u8], what: &str) -> Result<Vec<(String, String)>, BadRequest> {
    let decode = |part: &[u8]| {
        let plus_as_space: Vec<u8> = part
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        String::from_utf8(percent_encoding::percent_decode(&plus_as_space).collect())
    };
    let mut fields = Vec::new();
    for pair in text.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        let name = decode(name).map_err(|_| {
            BadRequest(format!(
                "A {what} field's name is not UTF-8 once percent-decoded."
            ))
        })?;
        let value = decode(value).map_err(|_| {
            // Debug-quoted: control characters escaped (and the page escapes the HTML).
            BadRequest(format!(
                "The {what} field {name:?} is not UTF-8 once percent-decoded."
            ))
        })?;
        fields.push((name, value));
    }
    Ok(fields)
}

/// Whether every `%` in `text` starts a `%XX` escape (two hex digits): `%zz` or a `%` at the
/// end is a malformed request, not a literal `%` (which a client sends as `%25`).
fn well_escaped(text: &[u8]) -> bool {
    text.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || (text.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && text.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// A reader that gives up at `until`: each read waits at most the time left, so a client
/// sending a byte now and then cannot hold a connection past the deadline.
pub struct Deadline<'a> {
    /// The connection.
    pub stream: &'a std::net::TcpStream,
    /// When reading stops.
    pub until: std::time::Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self
            .until
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

/// Whether a read failed for want of time (the client too slow: a 408, not a 400).
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}

/// Reads one request from `stream`.
pub fn read_request(stream: &mut impl Read) -> Result<Request, BadRequest> {
    let bad = |why: &str| BadRequest(why.to_string());
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(bad("The request's headers are too long."));
        }
        let n = stream.read(&mut chunk).map_err(|e| match is_timeout(&e) {
            true => bad(TOO_SLOW),
            false => BadRequest(format!("The request could not be read: {e}.")),
        })?;
        if n == 0 {
            return Err(bad("The request ended before its headers did."));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| bad("The request's headers are not UTF-8."))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("Malformed request line."));
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') || method.is_empty() {
        return Err(bad("Malformed request line."));
    }
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("Malformed header line."))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        return Err(bad("Chunked request bodies are not accepted."));
    }
    let len = match headers.iter().find(|(n, _)| n == "content-length") {
        Some((_, v)) => v
            .parse::<usize>()
            .map_err(|_| bad("Malformed Content-Length."))?,
        None => 0,
    };
    if len > MAX_BODY {
        return Err(bad("The request's body is too long."));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).map_err(|e| match is_timeout(&e) {
            true => bad(TOO_SLOW),
            false => BadRequest(format!("The request's body could not be read: {e}.")),
        })?;
        if n == 0 {
            return Err(bad("The request ended before its body did."));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if !well_escaped(path.as_bytes()) || !well_escaped(query.as_bytes()) {
        return Err(bad(
            "Malformed percent-escape in the address (a % must start %XX, two hex digits).",
        ));
    }
    let path = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| bad("The path is not UTF-8."))?
        .into_owned();
    let query = decode_fields(query.as_bytes(), "query")?;
    // Only a `POST` body is a form (the writes); another method's is never read.
    let form = if method == "POST" {
        if !well_escaped(&body) {
            return Err(bad(
                "Malformed percent-escape in the form (a % must start %XX, two hex digits).",
            ));
        }
        decode_fields(&body, "form")?
    } else {
        Vec::new()
    };
    Ok(Request {
        method: method.to_string(),
        path,
        query,
        headers,
        form,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A response: always HTML, never cached, never framed by another site.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The HTML.
    pub body: String,
}

impl Response {
    /// Writes the response, without its body for a `HEAD` request (the headers, the length
    /// included, are those of the `GET`).
    pub fn write_for(&self, method: &str, out: &mut impl Write) -> std::io::Result<()> {
        self.write_parts(out, method != "HEAD")
    }

    /// Writes the response.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        self.write_parts(out, true)
    }

    fn write_parts(&self, out: &mut impl Write, with_body: bool) -> std::io::Result<()> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            409 => "Conflict",
            503 => "Service Unavailable",
            _ => "Error",
        };
        let head = format!(
            "HTTP/1.1 {} {reason}\r\n\
             Content-Type: text/html; charset=utf-8\r\n\
             Content-Length: {}\r\n\
             Cache-Control: no-store\r\n\
             Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'\r\n\
             X-Content-Type-Options: nosniff\r\n\
             Referrer-Policy: same-origin\r\n\
             Connection: close\r\n\r\n",
            self.status,
            self.body.len()
        );
        out.write_all(head.as_bytes())?;
        if with_body {
            out.write_all(self.body.as_bytes())?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_are_refused() {
        let raw = b"POST /cancel?x=%3Cb%3E HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Length: 9\r\n\r\nid=a%2Bb&";
        let req = read_request(&mut &raw[..]).unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/cancel");
        assert_eq!(req.query("x"), Some("<b>"));
        assert_eq!(req.header("host"), Some("127.0.0.1:1"));
        assert_eq!(field(&req.form(), "id"), Some("a+b"));
        let raw = b"GET /task?id=%C3%A9+x&&flag&a=b=c HTTP/1.1\r\n\r\n";
        let req = read_request(&mut &raw[..]).unwrap();
        assert_eq!(
            req.query,
            [("id", "\u{e9} x"), ("flag", ""), ("a", "b=c")]
                .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        // Not UTF-8 once decoded: refused, not made U+FFFD (the id of another task).
        for raw in [
            &b"GET /task?id=%FF HTTP/1.1\r\n\r\n"[..],
            b"GET /task?%FF=x HTTP/1.1\r\n\r\n",
            b"GET /task?id=%C3 HTTP/1.1\r\n\r\n",
            b"POST /cancel HTTP/1.1\r\nContent-Length: 6\r\n\r\nid=%FF",
            b"POST /cancel HTTP/1.1\r\nContent-Length: 4\r\n\r\nid=\xff",
        ] {
            let Err(BadRequest(why)) = read_request(&mut &raw[..]) else {
                panic!("{raw:?} was accepted");
            };
            assert!(why.contains("not UTF-8"), "{why}");
        }
        for raw in [
            &b"GET /\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nbad\r\n\r\n",
            b"GET x HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab",
            b"GET / HTTP/1.1\r\n",
            b"GET /task?id=%zz HTTP/1.1\r\n\r\n",
            b"GET /task?id=a% HTTP/1.1\r\n\r\n",
            b"GET /task?id=%4 HTTP/1.1\r\n\r\n",
            b"GET /%zz HTTP/1.1\r\n\r\n",
            b"POST /cancel HTTP/1.1\r\nContent-Length: 6\r\n\r\nid=%g1",
        ] {
            assert!(read_request(&mut &raw[..]).is_err(), "{raw:?}");
        }
    }
}
