//! A real, headless browser for the tests: Debian's chromium driven through its
//! ChromeDriver with the W3C WebDriver protocol (JSON over HTTP on loopback), and a
//! check of the screenshots it takes as images (size, and that they are not blank).
//!
//! Only what the web view's tests use: open a page, find elements by CSS selector,
//! click, read text, run a script, take a screenshot.

// Synchronous calls to a local ChromeDriver: a sleep between polls blocks nothing else.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::{CHROMEDRIVER, Tool, require};

/// The key WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Why a WebDriver call failed.
#[derive(Debug)]
pub struct WebDriverError(pub String);

impl std::fmt::Display for WebDriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WebDriverError {}

/// A browser session, ended (and ChromeDriver stopped) when dropped.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
}

/// One element of the page.
#[derive(Debug, Clone)]
pub struct Element(String);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(9515)
}

/// One HTTP/1.1 exchange with ChromeDriver (it answers with a Content-Length).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, WebDriverError> {
    let err = |e: std::io::Error| WebDriverError(format!("chromedriver {method} {path}: {e}"));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(err)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(err)?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(err)?;
    // Read the head, then as many bytes as its Content-Length says (ChromeDriver may
    // keep the connection open whatever the request asked).
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let (head_len, body_len) = loop {
        let n = s.read(&mut buf).map_err(err)?;
        if n == 0 {
            return Err(WebDriverError(format!(
                "chromedriver {method} {path}: closed early"
            )));
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, len);
        }
    };
    while raw.len() < head_len + body_len {
        let n = s.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let payload = String::from_utf8_lossy(&raw[head_len..]);
    let payload = payload.as_ref();
    let v: Value = serde_json::from_str(payload)
        .map_err(|e| WebDriverError(format!("chromedriver {method} {path}: {e}: {payload}")))?;
    if let Some(e) = v["value"]["error"].as_str() {
        return Err(WebDriverError(format!(
            "{method} {path}: {e}: {}",
            v["value"]["message"].as_str().unwrap_or_default()
        )));
    }
    Ok(v["value"].clone())
}

impl Browser {
    /// Starts ChromeDriver and a headless chromium with a `width`×`height` window that
    /// accepts the test hierarchy's certificates (its CA is not the system's).
    ///
    /// # Panics
    ///
    /// When chromium or ChromeDriver cannot be installed (see [`require`]).
    pub fn start(width: u32, height: u32) -> Result<Browser, WebDriverError> {
        let chromium = require(Tool::Chromium);
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| WebDriverError(format!("{CHROMEDRIVER}: {e}")))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
        };
        let mut ready = false;
        for _ in 0..100 {
            if http(addr, "GET", "/status", None).is_ok_and(|v| v["ready"] == true) {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !ready {
            return Err(WebDriverError(
                "chromedriver did not become ready in 10 s".into(),
            ));
        }
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--ignore-certificate-errors",
                         format!("--window-size={width},{height}")],
            },
        }}});
        let v = http(addr, "POST", "/session", Some(&caps))?;
        browser.session = v["sessionId"]
            .as_str()
            .ok_or_else(|| WebDriverError(format!("no session id in {v}")))?
            .to_owned();
        Ok(browser)
    }

    fn call(&self, method: &str, rest: &str, body: Option<Value>) -> Result<Value, WebDriverError> {
        http(
            self.addr,
            method,
            &format!("/session/{}{rest}", self.session),
            body.as_ref(),
        )
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) -> Result<(), WebDriverError> {
        self.call("POST", "/url", Some(json!({ "url": url })))
            .map(drop)
    }

    /// Every element `css` selects, in document order.
    pub fn all(&self, css: &str) -> Result<Vec<Element>, WebDriverError> {
        let v = self.call(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        )?;
        Ok(v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_owned())))
            .collect())
    }

    /// The first element `css` selects, if any.
    pub fn find(&self, css: &str) -> Result<Option<Element>, WebDriverError> {
        Ok(self.all(css)?.into_iter().next())
    }

    /// Clicks `element`.
    pub fn click(&self, element: &Element) -> Result<(), WebDriverError> {
        self.call(
            "POST",
            &format!("/element/{}/click", element.0),
            Some(json!({})),
        )
        .map(drop)
    }

    /// The text `element` shows.
    pub fn text(&self, element: &Element) -> Result<String, WebDriverError> {
        let v = self.call("GET", &format!("/element/{}/text", element.0), None)?;
        Ok(v.as_str().unwrap_or_default().to_owned())
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page and returns
    /// what it returns.
    pub fn script(&self, script: &str, args: Value) -> Result<Value, WebDriverError> {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Runs `script` until it returns something truthy, every 200 ms, at most
    /// `tries` times; returns its last value.
    pub fn wait_for(&self, script: &str, tries: u32) -> Result<Value, WebDriverError> {
        let mut last = Value::Null;
        for _ in 0..tries {
            last = self.script(script, json!([]))?;
            let truthy = match &last {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return Ok(last);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(WebDriverError(format!(
            "still false after {tries} tries: {script} (last: {last})"
        )))
    }

    /// A screenshot of the window, as PNG bytes.
    pub fn screenshot(&self) -> Result<Vec<u8>, WebDriverError> {
        let v = self.call("GET", "/screenshot", None)?;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .map_err(|e| WebDriverError(format!("screenshot: {e}")))
    }

    /// Saves a screenshot to `path` and returns what it shows ([`inspect_png`]).
    pub fn save_screenshot(&self, path: &Path) -> Result<PngFacts, WebDriverError> {
        let png = self.screenshot()?;
        std::fs::write(path, &png)
            .map_err(|e| WebDriverError(format!("{}: {e}", path.display())))?;
        inspect_png(&png)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(
                self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// What a PNG shows, read from its pixels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PngFacts {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// How many distinct colours its pixels have (counted up to 10,000).
    pub colours: usize,
    /// How many pixels differ from the most common colour (the background).
    pub not_background: u64,
}

/// Decodes an 8-bit RGB or RGBA PNG (what chromium's screenshots are) and counts its
/// colours, so that a test can tell a drawn page from a blank one.
pub fn inspect_png(png: &[u8]) -> Result<PngFacts, WebDriverError> {
    let bad = |why: &str| WebDriverError(format!("not a PNG this check reads: {why}"));
    if png.get(..8) != Some(b"\x89PNG\r\n\x1a\n".as_slice()) {
        return Err(bad("no PNG signature"));
    }
    let (mut width, mut height, mut channels) = (0u32, 0u32, 0usize);
    let mut idat = Vec::new();
    let mut at = 8;
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]) as usize;
        let kind = &png[at + 4..at + 8];
        let data = png
            .get(at + 8..at + 8 + len)
            .ok_or_else(|| bad("truncated chunk"))?;
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                height = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
                if data[8] != 8 || data[12] != 0 {
                    return Err(bad("not 8-bit or interlaced"));
                }
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    _ => return Err(bad("not RGB or RGBA")),
                };
            }
            b"IDAT" => idat.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .map_err(|e| bad(&format!("inflate: {e}")))?;
    let stride = width as usize * channels;
    if raw.len() < height as usize * (stride + 1) {
        return Err(bad("fewer pixels than the header says"));
    }
    let mut prev = vec![0u8; stride];
    let mut counts: std::collections::BTreeMap<[u8; 3], u64> = std::collections::BTreeMap::new();
    for y in 0..height as usize {
        let line = &raw[y * (stride + 1)..(y + 1) * (stride + 1)];
        let filter = line[0];
        let mut cur = line[1..].to_vec();
        for i in 0..stride {
            let a = if i >= channels { cur[i - channels] } else { 0 };
            let b = prev[i];
            let c = if i >= channels { prev[i - channels] } else { 0 };
            let add = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => paeth(a, b, c),
                _ => return Err(bad("unknown filter")),
            };
            cur[i] = cur[i].wrapping_add(add);
        }
        for px in cur.chunks(channels) {
            if counts.len() < 10_000 || counts.contains_key(&[px[0], px[1], px[2]]) {
                *counts.entry([px[0], px[1], px[2]]).or_default() += 1;
            }
        }
        prev = cur;
    }
    let background = counts.values().copied().max().unwrap_or(0);
    Ok(PngFacts {
        width,
        height,
        colours: counts.len(),
        not_background: u64::from(width) * u64::from(height) - background,
    })
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = i16::from(a) + i16::from(b) - i16::from(c);
    let (pa, pb, pc) = (
        (p - i16::from(a)).abs(),
        (p - i16::from(b)).abs(),
        (p - i16::from(c)).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG of `w`×`h` RGB pixels given by `px`, unfiltered (filter 0 per line).
    fn png(w: u32, h: u32, px: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
        let mut raw = Vec::new();
        for y in 0..h {
            raw.push(0);
            for x in 0..w {
                raw.extend_from_slice(&px(x, y));
            }
        }
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&raw).unwrap();
        let idat = z.finish().unwrap();
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut chunk = |kind: &[u8], data: &[u8]| {
            out.extend_from_slice(&(data.len() as u32).to_be_bytes());
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            out.extend_from_slice(&[0, 0, 0, 0]); // the CRC is not checked
        };
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&w.to_be_bytes());
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        chunk(b"IHDR", &ihdr);
        chunk(b"IDAT", &idat);
        chunk(b"IEND", &[]);
        out
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn blank_and_drawn_images_are_told_apart() {
        let blank = inspect_png(&png(40, 30, |_, _| [255, 255, 255])).unwrap();
        assert_eq!(
            (
                blank.width,
                blank.height,
                blank.colours,
                blank.not_background
            ),
            (40, 30, 1, 0)
        );
        let drawn = inspect_png(&png(40, 30, |x, y| {
            if x < 10 && y < 5 {
                [200, 0, 0]
            } else {
                [255, 255, 255]
            }
        }))
        .unwrap();
        assert_eq!((drawn.colours, drawn.not_background), (2, 50));
        assert!(inspect_png(b"GIF89a").is_err());
    }
}
