//! Metrics exposition through the `prometheus-client` crate, which writes the text:
//! the Prometheus text format (0.0.4) or OpenMetrics 1.0, as the scraper asks
//! ([`Format::from_accept`]).
//!
//! Most of a node's metrics are read from its core's state at scrape time (log head,
//! children, link bytes): a node gathers them into an [`Exposition`], a custom
//! `prometheus_client` [`Collector`] over those values, registered in a fresh
//! `Registry` per scrape and encoded by the crate. What is observed as it happens (API
//! request latency, propagation lag per hop, the agent's requests to its API server)
//! is kept in a [`HistogramVec`] here: the pure cores count into it deterministically
//! (ordered series, no clock, no lock), and the collector hands its buckets to the
//! crate's histogram encoding.
//!
//! Conventions followed (<https://prometheus.io/docs/practices/naming/>): every family
//! has one `# HELP` and one `# TYPE` line before its samples; counters end in `_total`
//! (the crate adds the suffix to a counter's samples; in OpenMetrics the family name
//! goes without it); units are in the name (`_bytes`, `_seconds`); label values are
//! escaped.

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

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

/// Label pairs of one sample, in order.
pub type Labels = Vec<(&'static str, String)>;

/// The text format of a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4: what a scraper gets unless it asks
    /// for OpenMetrics (curl, older Prometheus, most tools).
    Prometheus,
    /// OpenMetrics 1.0 text (`# EOF` at the end; a counter's family name without
    /// `_total`).
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` (Prometheus does, with a higher weight than
    /// `text/plain`), the Prometheus text format otherwise.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let wants = accept.is_some_and(|a| {
            a.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                parts.next() == Some("application/openmetrics-text")
                    && !parts.any(|p| p.replace(' ', "") == "q=0")
            })
        });
        if wants {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// The `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

#[derive(Debug, Clone)]
enum Samples {
    Values(Vec<(Labels, f64)>),
    Histogram(HistogramVec),
}

#[derive(Debug, Clone)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: Samples,
}

/// The families of one scrape, gathered from a node's state; encoded by
/// `prometheus-client` (it is the [`Collector`] of a registry built per scrape).
#[derive(Debug, Default, Clone)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Adds one family of counters or gauges: one sample per entry. A counter's
    /// `name` ends in `_total`.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str, samples: &[(Labels, f64)]) {
        self.families.push(Family {
            name: name.to_owned(),
            help: help.to_owned(),
            kind,
            samples: Samples::Values(samples.to_vec()),
        });
    }

    /// Adds a histogram family from its series.
    pub fn histogram(&mut self, name: &str, help: &str, series: &HistogramVec) {
        self.families.push(Family {
            name: name.to_owned(),
            help: help.to_owned(),
            kind: Kind::Histogram,
            samples: Samples::Histogram(series.clone()),
        });
    }

    /// Appends `other`'s families after these.
    pub fn extend(&mut self, other: Exposition) {
        self.families.extend(other.families);
    }

    /// The text in `format`, written by `prometheus-client`.
    pub fn encode(self, format: Format) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing into a String cannot fail; a collector error would leave the text
        // cut short, which the scraper reports.
        let _ = match format {
            Format::Prometheus => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
            }
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        };
        out
    }

    /// The text in the Prometheus text format (0.0.4).
    pub fn finish(self) -> String {
        self.encode(Format::Prometheus)
    }
}

/// Whether `v` is a whole number that an integer encodes exactly (written without a
/// fraction, as counts and flags read best).
fn whole(v: f64) -> bool {
    v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.families {
            let (name, metric_type) = match f.kind {
                // The crate writes `_total` after a counter's name itself.
                Kind::Counter => (
                    f.name.strip_suffix("_total").unwrap_or(&f.name),
                    MetricType::Counter,
                ),
                Kind::Gauge => (f.name.as_str(), MetricType::Gauge),
                Kind::Histogram => (f.name.as_str(), MetricType::Histogram),
            };
            let mut metric = encoder.encode_descriptor(name, &f.help, None, metric_type)?;
            match &f.samples {
                Samples::Values(samples) => {
                    for (labels, v) in samples {
                        let mut sample = metric.encode_family(labels)?;
                        match (f.kind, whole(*v)) {
                            (Kind::Counter, true) if *v >= 0.0 => {
                                sample.encode_counter::<NoLabelSet, _, u64>(&(*v as u64), None)?
                            }
                            (Kind::Counter, _) => {
                                sample.encode_counter::<NoLabelSet, _, f64>(v, None)?
                            }
                            (_, true) => sample.encode_gauge(&(*v as i64))?,
                            (_, false) => sample.encode_gauge(v)?,
                        }
                    }
                }
                Samples::Histogram(h) => {
                    for (values, series) in &h.series {
                        let labels: Labels = h
                            .label_names
                            .iter()
                            .copied()
                            .zip(values.iter().cloned())
                            .collect();
                        // Every bound's own count, then the +Inf bucket's (which
                        // OpenMetrics requires written out).
                        let mut buckets: Vec<(f64, u64)> = h
                            .bounds
                            .iter()
                            .copied()
                            .zip(series.buckets.iter().copied())
                            .collect();
                        let bounded: u64 = series.buckets.iter().sum();
                        buckets.push((f64::INFINITY, series.count.saturating_sub(bounded)));
                        metric
                            .encode_family(&labels)?
                            .encode_histogram::<NoLabelSet>(
                                series.sum,
                                series.count,
                                &buckets,
                                None,
                            )?;
                    }
                }
            }
        }
        Ok(())
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

    /// Adds `other`'s observations, series by series. Its labels and bounds must be
    /// this one's (checked in debug builds).
    pub fn absorb(&mut self, other: HistogramVec) {
        debug_assert_eq!(self.label_names, other.label_names);
        debug_assert_eq!(self.bounds, other.bounds);
        for (labels, theirs) in other.series {
            match self.series.entry(labels) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(theirs);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    let ours = o.get_mut();
                    for (a, b) in ours.buckets.iter_mut().zip(&theirs.buckets) {
                        *a += b;
                    }
                    ours.sum += theirs.sum;
                    ours.count += theirs.count;
                }
            }
        }
    }

    /// Observations so far in the series of these label values.
    pub fn count(&self, label_values: &[String]) -> u64 {
        self.series.get(label_values).map_or(0, |s| s.count)
    }
}

/// Checks that `text` is well-formed exposition as a node serves it, in the Prometheus
/// text format or (when it ends with `# EOF`) OpenMetrics: every sample belongs to a
/// family announced by one `# HELP` and one `# TYPE` line, names and labels are
/// well-formed, values parse, counters' samples end in `_total`, and a histogram's
/// buckets are cumulative and end at `+Inf` equal to `_count`. For tests of every
/// node's `/metrics`.
pub fn check(text: &str) -> Result<(), ExpositionError> {
    let open_metrics = text.ends_with("# EOF\n");
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: BTreeMap<String, ()> = BTreeMap::new();
    let mut last_bucket: BTreeMap<String, f64> = BTreeMap::new();
    // Per histogram series: its +Inf bucket and its `_count`.
    let (mut inf, mut counts) = (BTreeMap::new(), BTreeMap::new());
    let lines = text.lines().count();
    for (n, line) in text.lines().enumerate() {
        let at = |why: String| ExpositionError::Line {
            line: n + 1,
            why,
            text: line.to_owned(),
        };
        if line == "# EOF" && open_metrics && n + 1 == lines {
            continue;
        }
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
            // OpenMetrics names a counter's family without the `_total` its samples
            // carry; the Prometheus text format names it with.
            if kind == "counter" && name.ends_with("_total") == open_metrics {
                return Err(at(if open_metrics {
                    "an OpenMetrics counter family is named without _total".into()
                } else {
                    "a counter's name must end in _total".into()
                }));
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
            let counter_suffix = if open_metrics { "_total" } else { "" };
            let family = [
                ("_bucket", "histogram"),
                ("_sum", "histogram"),
                ("_count", "histogram"),
                (counter_suffix, "counter"),
                ("", "gauge"),
            ]
            .iter()
            .find_map(|(suffix, want)| {
                let base = name.strip_suffix(suffix)?;
                let kind = kinds.get(base)?;
                (kind == want).then(|| base.to_owned())
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
                if le.1 == "+Inf" {
                    inf.insert(key, value);
                } else if le.1.parse::<f64>().is_err() {
                    return Err(at("le is not a number".into()));
                }
            } else if name.ends_with("_count")
                && kinds.get(&family).is_some_and(|k| k == "histogram")
            {
                // OpenMetrics writes `_count` before the buckets: compared at the end.
                counts.insert(key, value);
            }
        }
    }
    if inf != counts {
        return Err(ExpositionError::Histogram { inf, counts });
    }
    Ok(())
}

/// What [`check`] found wrong with an exposition.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExpositionError {
    /// A line is malformed or out of place.
    #[error("line {line}: {why}: {text:?}")]
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong.
        why: String,
        /// The line.
        text: String,
    },
    /// A histogram series' `_count` differs from its `+Inf` bucket (or one of them is
    /// missing): per series, each.
    #[error("a histogram's _count differs from its +Inf bucket: +Inf {inf:?}, _count {counts:?}")]
    Histogram {
        /// The `+Inf` buckets.
        inf: BTreeMap<String, f64>,
        /// The `_count`s.
        counts: BTreeMap<String, f64>,
    },
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

    /// `h` written alone as the histogram `name`, checked.
    fn written(name: &str, h: &HistogramVec) -> String {
        let mut e = Exposition::new();
        e.histogram(name, "H.", h);
        let text = e.finish();
        check(&text).unwrap();
        text
    }

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
        // Absorbing adds series that exist and takes those that do not.
        let mut both = h.clone();
        let mut other = HistogramVec::new(&["verb", "code"], LATENCY_BUCKETS);
        other.observe(vec!["GET".into(), "200".into()], 0.004);
        other.observe(vec!["PUT".into(), "201".into()], 0.5);
        both.absorb(other);
        assert_eq!(both.count(&["GET".into(), "200".into()]), 3);
        assert_eq!(both.count(&["PUT".into(), "201".into()]), 1);
        assert_eq!(both.count(&["PATCH".into(), "409".into()]), 1);
        let text = written("b_seconds", &both);
        assert!(
            text.contains("b_seconds_bucket{verb=\"GET\",code=\"200\",le=\"0.005\"} 2\n"),
            "{text}"
        );
        let named = h.labelled_first(&["node"], &["center".into()]);
        assert_eq!(
            named.count(&["center".into(), "GET".into(), "200".into()]),
            2
        );
        let text = written("h_seconds", &named);
        assert!(
            text.contains("h_seconds_count{node=\"center\",verb=\"GET\",code=\"200\"} 2\n"),
            "{text}"
        );
    }

    #[test]
    fn both_formats_name_counters_as_their_conventions_say() {
        let mut e = Exposition::new();
        e.family(
            "strata_things_total",
            Kind::Counter,
            "Things done.",
            &[(vec![("node", "a".into())], 3.0)],
        );
        e.family(
            "strata_ratio",
            Kind::Gauge,
            "A ratio.",
            &[(vec![("node", "a".into())], 0.5), (vec![], 2.0)],
        );
        let mut h = HistogramVec::new(&["verb"], LATENCY_BUCKETS);
        h.observe(vec!["get".into()], 0.003);
        e.histogram("strata_h_seconds", "H.", &h);
        let prometheus = e.clone().encode(Format::Prometheus);
        check(&prometheus).unwrap();
        for line in [
            "# HELP strata_things_total Things done.",
            "# TYPE strata_things_total counter",
            "strata_things_total{node=\"a\"} 3",
            "strata_ratio{node=\"a\"} 0.5",
            "strata_ratio 2",
            "strata_h_seconds_bucket{verb=\"get\",le=\"0.0025\"} 0",
            "strata_h_seconds_bucket{verb=\"get\",le=\"0.005\"} 1",
            "strata_h_seconds_bucket{verb=\"get\",le=\"+Inf\"} 1",
            "strata_h_seconds_count{verb=\"get\"} 1",
        ] {
            assert!(
                prometheus.lines().any(|l| l == line),
                "{line}\n{prometheus}"
            );
        }
        let open = e.encode(Format::OpenMetrics);
        check(&open).unwrap_or_else(|e| panic!("{e}\n{open}"));
        assert!(open.ends_with("# EOF\n"), "{open}");
        for line in [
            "# TYPE strata_things counter",
            "strata_things_total{node=\"a\"} 3",
            "strata_h_seconds_count{verb=\"get\"} 1",
        ] {
            assert!(open.lines().any(|l| l == line), "{line}\n{open}");
        }
        // The same counter named the other format's way is refused.
        assert!(
            check(&prometheus.replace("TYPE strata_things_total", "TYPE strata_things")).is_err()
        );
        assert!(check(&open.replace("TYPE strata_things ", "TYPE strata_things_total ")).is_err());
    }

    #[test]
    fn accept_headers_choose_the_format() {
        let prometheus_3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus_3)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(
            Format::from_accept(Some("text/plain;version=0.0.4")),
            Format::Prometheus
        );
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text; q=0")),
            Format::Prometheus
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
