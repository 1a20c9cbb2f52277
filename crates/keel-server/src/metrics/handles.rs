//! Label handles, cached: an event names its labels' values, the handle of that series is made
//! once and looked up afterwards under a read lock, without allocating.

use std::collections::HashMap;
use std::sync::RwLock;

use metrics::{Key, Label, Recorder};
use metrics_exporter_prometheus::PrometheusRecorder;

/// The handles of one label value, by the fixed label's value.
type ByFixed<T> = Vec<(&'static str, T)>;

/// One metric name's series whose labels are one value from the events (a model, a tool) and
/// one of a fixed set (`&'static str`: an error class, an outcome).
pub(super) struct Series<T> {
    name: &'static str,
    labels: [&'static str; 2],
    by_value: RwLock<HashMap<Box<str>, ByFixed<T>>>,
}

/// The kinds of handle a [`Series`] holds.
pub(super) trait Handle: Clone {
    /// Registers the series `key` with `recorder`.
    fn register(recorder: &PrometheusRecorder, key: &Key) -> Self;
}

impl Handle for metrics::Counter {
    fn register(recorder: &PrometheusRecorder, key: &Key) -> Self {
        recorder.register_counter(key, &metadata())
    }
}

impl Handle for metrics::Histogram {
    fn register(recorder: &PrometheusRecorder, key: &Key) -> Self {
        recorder.register_histogram(key, &metadata())
    }
}

fn metadata() -> metrics::Metadata<'static> {
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, None)
}

impl<T: Handle> Series<T> {
    /// The series of `name`, labelled `labels[0]` (from the events) and `labels[1]` (fixed
    /// values; `""` for none).
    pub(super) fn new(name: &'static str, labels: [&'static str; 2]) -> Self {
        Series {
            name,
            labels,
            by_value: RwLock::new(HashMap::new()),
        }
    }

    /// Calls `use_it` with the handle of the series (`value`, `fixed`), made on first use.
    pub(super) fn with(
        &self,
        recorder: &PrometheusRecorder,
        value: &str,
        fixed: &'static str,
        use_it: impl FnOnce(&T),
    ) {
        {
            let by_value = self.by_value.read().unwrap_or_else(|e| e.into_inner());
            if let Some((_, handle)) = by_value
                .get(value)
                .and_then(|handles| handles.iter().find(|(f, _)| *f == fixed))
            {
                use_it(handle);
                return;
            }
        }
        let mut labels = vec![Label::new(self.labels[0], value.to_string())];
        if !self.labels[1].is_empty() {
            labels.push(Label::from_static_parts(self.labels[1], fixed));
        }
        let handle = T::register(recorder, &Key::from_parts(self.name, labels));
        use_it(&handle);
        let mut by_value = self.by_value.write().unwrap_or_else(|e| e.into_inner());
        let handles = by_value.entry(value.into()).or_default();
        if !handles.iter().any(|(f, _)| *f == fixed) {
            handles.push((fixed, handle));
        }
    }
}

/// One metric name's series whose labels all take fixed values (a state, a decision).
pub(super) struct FixedSeries {
    name: &'static str,
    labels: [&'static str; 2],
    handles: RwLock<Vec<([&'static str; 2], metrics::Counter)>>,
}

impl FixedSeries {
    /// The series of `name`, labelled `labels` (`""` for an unused second label).
    pub(super) fn new(name: &'static str, labels: [&'static str; 2]) -> Self {
        FixedSeries {
            name,
            labels,
            handles: RwLock::new(Vec::new()),
        }
    }

    /// Adds `n` to the series of `values`.
    pub(super) fn add(&self, recorder: &PrometheusRecorder, values: [&'static str; 2], n: u64) {
        {
            let handles = self.handles.read().unwrap_or_else(|e| e.into_inner());
            if let Some((_, counter)) = handles.iter().find(|(v, _)| *v == values) {
                counter.increment(n);
                return;
            }
        }
        let labels: Vec<Label> = self
            .labels
            .iter()
            .zip(values)
            .filter(|(name, _)| !name.is_empty())
            .map(|(name, value)| Label::from_static_parts(name, value))
            .collect();
        let counter = recorder.register_counter(&Key::from_parts(self.name, labels), &metadata());
        counter.increment(n);
        let mut handles = self.handles.write().unwrap_or_else(|e| e.into_inner());
        if !handles.iter().any(|(v, _)| *v == values) {
            handles.push((values, counter));
        }
    }
}
