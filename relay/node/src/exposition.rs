//! The Prometheus text exposition format (0.0.4), written by hand: most of a node's
//! metrics are read from its core's state at scrape time (log head, children, link
//! bytes), which a registry of pre-registered metric objects would only copy. What is
//! observed as it happens (API request latency, propagation lag per hop, the agent's
//! requests to its API server) is kept in a [`HistogramVec`] here.
//!
//! Conventions followed (<https://prometheus.io/docs/practices/naming/>): every family
//! has one `# HELP` and one `# TYPE` line before its samples; counters end in `_total`;
//! units are in the name (`_bytes`, `_seconds`); label values are escaped.

use std::collections::BTreeMap;
use std::fmt::Write;

/// A metric family's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Label pairs of one sample, in order.
pub type Labels = Vec<(&'static str, String)>;

/// A text exposition being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Writes one family: its HELP and TYPE lines, then one sample per entry.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str, samples: &[(Labels, f64)]) {
        self.header(name, kind, help);
        for (labels, value) in samples {
            self.sample(name, labels, *value);
        }
    }

    /// Writes a histogram family from its series.
    pub fn histogram(&mut self, name: &str, help: &str, series: &HistogramVec) {
        self.header(name, Kind::Histogram, help);
        for (labels, h) in &series.series {
            let labels: Labels = series
                .label_names
                .iter()
                .copied()
                .zip(labels.iter().cloned())
                .collect();
            let mut cumulative = 0;
            for (bound, count) in series.bounds.iter().zip(&h.buckets) {
                cumulative += count;
                let mut l = labels.clone();
                l.push(("le", format_value(*bound)));
                self.sample(&format!("{name}_bucket"), &l, cumulative as f64);
            }
            let mut l = labels.clone();
            l.push(("le", "+Inf".to_owned()));
            self.sample(&format!("{name}_bucket"), &l, h.count as f64);
            self.sample(&format!("{name}_sum"), &labels, h.sum);
            self.sample(&format!("{name}_count"), &labels, h.count as f64);
        }
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }

    fn header(&mut self, name: &str, kind: Kind, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
    }

    fn sample(&mut self, name: &str, labels: &[(&'static str, String)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
    }
}

fn format_value(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

/// One histogram series' counts.
#[derive(Debug, Clone, Default)]
struct Series {
    /// Observations per bucket (not cumulative), one per bound.
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Histograms by label values, all with the same bucket bounds.
#[derive(Debug, Clone)]
pub struct HistogramVec {
    label_names: Vec<&'static str>,
    bounds: Vec<f64>,
    series: BTreeMap<Vec<String>, Series>,
}

/// Latency buckets in seconds, from 1 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl HistogramVec {
    /// Histograms labelled by `label_names`, with these upper bounds (ascending).
    pub fn new(label_names: &[&'static str], bounds: &[f64]) -> HistogramVec {
        HistogramVec {
            label_names: label_names.to_vec(),
            bounds: bounds.to_vec(),
            series: BTreeMap::new(),
        }
    }

    /// Records one observation in the series of these label values.
    pub fn observe(&mut self, label_values: Vec<String>, value: f64) {
        let n = self.bounds.len();
        let series = self.series.entry(label_values).or_insert_with(|| Series {
            buckets: vec![0; n],
            ..Series::default()
        });
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            series.buckets[i] += 1;
        }
        series.sum += value;
        series.count += 1;
    }

    /// Every series' label values and observation count.
    pub fn series(&self) -> impl Iterator<Item = (&[String], u64)> {
        self.series.iter().map(|(k, s)| (k.as_slice(), s.count))
    }

    /// A copy whose every series carries `values` of the labels `names` before its
    /// own (a node's name added where the histogram is rendered).
    pub fn labelled_first(&self, names: &[&'static str], values: &[String]) -> HistogramVec {
        HistogramVec {
            label_names: names.iter().chain(&self.label_names).copied().collect(),
            bounds: self.bounds.clone(),
            series: self
                .series
                .iter()
                .map(|(k, s)| (values.iter().chain(k).cloned().collect(), s.clone()))
                .collect(),
        }
    }

    /// Observations so far in the series of these label values.
    pub fn count(&self, label_values: &[String]) -> u64 {
        self.series.get(label_values).map_or(0, |s| s.count)
    }
}

/// Checks that `text` is well-formed Prometheus text exposition as this crate writes
/// it: every sample belongs to a family announced by one `# HELP` and one `# TYPE`
/// line, names and labels are well-formed, values parse, counters end in `_total`, and
/// a histogram's buckets are cumulative and end at `+Inf` equal to `_count`. For tests
/// of every node's `/metrics`.
pub fn check(text: &str) -> Result<(), String> {
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: BTreeMap<String, ()> = BTreeMap::new();
    let mut last_bucket: BTreeMap<String, f64> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            check_name(name).map_err(at)?;
            if helps.insert(name.to_owned(), ()).is_some() {
                return Err(at("a second HELP".into()));
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            if !["counter", "gauge", "histogram"].contains(&kind) || parts.next().is_some() {
                return Err(at(format!("unknown type {kind:?}")));
            }
            if !helps.contains_key(name) {
                return Err(at("TYPE before HELP".into()));
            }
            if kind == "counter" && !name.ends_with("_total") {
                return Err(at("a counter's name must end in _total".into()));
            }
            if kinds.insert(name.to_owned(), kind.to_owned()).is_some() {
                return Err(at("a second TYPE".into()));
            }
        } else if line.starts_with('#') || line.is_empty() {
            return Err(at("unexpected comment or blank line".into()));
        } else {
            let (series, value) = line.rsplit_once(' ').ok_or_else(|| at("no value".into()))?;
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().map_err(|_| at(format!("value {v:?}")))?,
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let labels = rest
                        .strip_suffix('}')
                        .ok_or_else(|| at("unclosed labels".into()))?;
                    (name, parse_labels(labels).map_err(at)?)
                }
                None => (series, Vec::new()),
            };
            check_name(name).map_err(at)?;
            let family = [
                ("_bucket", true),
                ("_sum", true),
                ("_count", true),
                ("", false),
            ]
            .iter()
            .find_map(|(suffix, hist)| {
                let base = name.strip_suffix(suffix)?;
                let kind = kinds.get(base)?;
                (*hist == (kind == "histogram")).then(|| base.to_owned())
            })
            .ok_or_else(|| at("a sample of no announced family".into()))?;
            let others: Vec<_> = labels.iter().filter(|(k, _)| k != "le").cloned().collect();
            let key = format!("{family}{others:?}");
            if name.ends_with("_bucket") {
                let le = labels
                    .iter()
                    .find(|(k, _)| k == "le")
                    .ok_or_else(|| at("bucket without le".into()))?;
                let prev = last_bucket.insert(key.clone(), value).unwrap_or(0.0);
                if value < prev {
                    return Err(at("buckets are not cumulative".into()));
                }
                if le.1 != "+Inf" && le.1.parse::<f64>().is_err() {
                    return Err(at("le is not a number".into()));
                }
            } else if name.ends_with("_count")
                && kinds.get(&family).is_some_and(|k| k == "histogram")
                && last_bucket.remove(&key) != Some(value)
            {
                return Err(at("_count differs from the +Inf bucket".into()));
            }
        }
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").ok_or("a label without =\"")?;
        check_name(key)?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    _ => return Err("a bad escape in a label value".into()),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err("an unterminated label value".into()),
            }
        };
        out.push((key.to_owned(), value));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_passes_the_check() {
        let mut e = Exposition::new();
        e.family(
            "strata_things_total",
            Kind::Counter,
            "Things.",
            &[(vec![("node", "a \"b\"\\c\nd".into())], 3.0)],
        );
        let mut h = HistogramVec::new(&["verb", "code"], LATENCY_BUCKETS);
        h.observe(vec!["GET".into(), "200".into()], 0.003);
        h.observe(vec!["GET".into(), "200".into()], 20.0);
        h.observe(vec!["PATCH".into(), "409".into()], 0.0);
        e.histogram("strata_api_request_duration_seconds", "Latency.", &h);
        let text = e.finish();
        check(&text).unwrap();
        assert!(text.contains("strata_api_request_duration_seconds_bucket{verb=\"GET\",code=\"200\",le=\"0.005\"} 1\n"), "{text}");
        assert!(
            text.contains(
                "strata_api_request_duration_seconds_count{verb=\"GET\",code=\"200\"} 2\n"
            ),
            "{text}"
        );
        assert_eq!(h.count(&["GET".into(), "200".into()]), 2);
        let named = h.labelled_first(&["node"], &["center".into()]);
        assert_eq!(
            named.count(&["center".into(), "GET".into(), "200".into()]),
            2
        );
        let mut e = Exposition::new();
        e.histogram("h_seconds", "H.", &named);
        let text = e.finish();
        check(&text).unwrap();
        assert!(
            text.contains("h_seconds_count{node=\"center\",verb=\"GET\",code=\"200\"} 2\n"),
            "{text}"
        );
    }

    #[test]
    fn faults_are_found() {
        let bad = [
            "x 1\n",
            "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1} 1\n",
            "# HELP a A.\n# TYPE a counter\na 1\n",
            "# HELP a A.\n# TYPE a gauge\na one\n",
            "# HELP a A.\n# TYPE a gauge\n# HELP a A.\n",
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n",
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",
        ];
        for text in bad {
            assert!(check(text).is_err(), "accepted {text:?}");
        }
    }
}
