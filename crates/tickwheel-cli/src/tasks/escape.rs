//! Ids and payloads are user data: shown escaped, so that no id or payload can move the
//! cursor, recolour or clear the terminal, or reorder text (bidirectional controls).

use std::fmt::Write as _;

/// `bytes` as printable text: UTF-8 as is but for `\`, control and invisible formatting
/// characters (`\n`, `\t`, `\u{1b}`, `\u{202e}`, ...), and bytes that are not UTF-8 as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c);
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A string, escaped as [`escape_bytes`] does.
pub fn escape(s: &str) -> String {
    escape_bytes(s.as_bytes())
}

fn push_char(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Whether `c` is shown escaped (as `\u{..}` here, `\uXXXX` in JSON): a control character
/// (C0, DEL, C1) or an invisible formatting one.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || invisible(c)
}

/// Formatting characters that change how the text around them shows: bidirectional
/// overrides and isolates, zero-width characters, separators, the byte-order mark.
fn invisible(c: char) -> bool {
    matches!(c as u32,
        0x00ad | 0x061c | 0x180e | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x2069
        | 0xfeff | 0xfff9..=0xfffb)
}

/// The text that [`escape`] printed as `text`, for an id typed back on the command line
/// (`tickwheel tasks --escaped show 'tab\there'`): `\\`, `\n`, `\r`, `\t` and `\u{HEX}`
/// stand for what they print; `\xNN` (a byte that is not UTF-8, which no id holds) and
/// any other escape are refused, as is a lone `\` at the end.
pub fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('u') => {
                let rest = chars.as_str();
                let code = rest
                    .strip_prefix('{')
                    .and_then(|r| r.split_once('}'))
                    .map(|(hex, _)| hex)
                    .filter(|hex| (1..=6).contains(&hex.len()))
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .and_then(char::from_u32)
                    .ok_or("`\\u` must be followed by {HEX}, a Unicode scalar value: `\\u{1b}`")?;
                out.push(code);
                let used = rest.find('}').map_or(0, |i| i + 1);
                chars = rest[used..].chars();
            }
            Some('x') => {
                return Err(
                    "`\\x..` stands for a byte that is not UTF-8, and task ids are UTF-8".into(),
                )
            }
            Some(other) => {
                return Err(format!(
                    "unknown escape `\\{}` (known: \\\\ \\n \\r \\t \\u{{HEX}})",
                    escape(&other.to_string())
                ))
            }
            None => return Err("a lone `\\` at the end (a backslash is `\\\\`)".into()),
        }
    }
    Ok(out)
}

/// Whether every byte shows as itself (nothing was escaped).
pub fn is_plain(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok_and(|s| escape(s) == s)
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bidi_and_invalid_bytes_are_escaped_the_rest_is_kept() {
        assert_eq!(
            escape("<script>alert(1)</script>"),
            "<script>alert(1)</script>"
        );
        assert_eq!(escape("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape("x\r\ny\t\\"), "x\\r\\ny\\t\\\\");
        assert_eq!(escape("abc\u{202e}cba"), "abc\\u{202e}cba");
        assert_eq!(escape("\u{7f}\u{9b}"), "\\u{7f}\\u{9b}");
        assert_eq!(escape("héllo wörld 日本"), "héllo wörld 日本");
        assert_eq!(escape_bytes(b"ok\xff\xfe\x00"), "ok\\xff\\xfe\\u{0}");
        assert_eq!(hex(b"\x00\xab"), "00ab");
        assert!(is_plain(b"plain text") && !is_plain(b"a\nb") && !is_plain(b"\xff"));
        // What the tables print reads back as the id it stands for.
        for id in [
            "tab\there",
            "new\nline\r\n",
            "q\"uo'te\\back",
            "red\u{1b}[31mX",
            "bidi\u{202e}cba\u{2066}",
            "bell\u{7}del\u{7f}csi\u{9b}",
            "zero\u{200b}width",
            "plain",
            "\\u{41}",
            "日本\u{feff}",
        ] {
            assert_eq!(unescape(&escape(id)).as_deref(), Ok(id), "{id:?}");
        }
        assert_eq!(unescape("a\\u{41}b").as_deref(), Ok("aAb"));
        for bad in [
            "a\\",
            "\\q",
            "\\xff",
            "\\u41",
            "\\u{}",
            "\\u{110000}",
            "\\u{d800}",
            "\\u{41",
        ] {
            assert!(unescape(bad).is_err(), "{bad:?}");
        }
        for s in [
            escape_bytes(&(0..=255u8).collect::<Vec<_>>()),
            escape("\u{1b}\u{7}"),
        ] {
            assert!(!s.chars().any(|c| c.is_control() || invisible(c)), "{s:?}");
        }
    }
}
