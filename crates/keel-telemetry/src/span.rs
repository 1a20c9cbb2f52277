//! A span being built from events: opened at one event's time, given attributes and span
//! events as more arrive, and turned into the SDK's [`SpanData`] at another event's time.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// The most span events one span keeps; later ones are counted as dropped (a run that
/// retries for hours must not grow without bound).
const MAX_EVENTS: usize = 128;

/// A span that has started and not ended.
#[derive(Debug)]
pub(crate) struct OpenSpan {
    context: SpanContext,
    parent: SpanId,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    events: Vec<Event>,
    dropped_events: u32,
    links: Vec<Link>,
    status: Status,
}

impl OpenSpan {
    /// A span of `trace` with id `id`, under `parent` (`SpanId::INVALID`: a root).
    pub(crate) fn new(
        trace: TraceId,
        id: SpanId,
        parent: SpanId,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        start: SystemTime,
    ) -> Self {
        OpenSpan {
            context: SpanContext::new(trace, id, TraceFlags::SAMPLED, false, TraceState::NONE),
            parent,
            name: name.into(),
            kind,
            start,
            attributes: Vec::new(),
            events: Vec::new(),
            dropped_events: 0,
            links: Vec::new(),
            status: Status::Unset,
        }
    }

    /// Its context (for children and links).
    pub(crate) fn context(&self) -> &SpanContext {
        &self.context
    }

    /// Sets an attribute, replacing one of the same key.
    pub(crate) fn set(&mut self, attribute: KeyValue) {
        match self.attributes.iter_mut().find(|a| a.key == attribute.key) {
            Some(existing) => *existing = attribute,
            None => self.attributes.push(attribute),
        }
    }

    /// Adds a span event at `at`.
    pub(crate) fn event(&mut self, name: &'static str, at: SystemTime, attributes: Vec<KeyValue>) {
        if self.events.len() >= MAX_EVENTS {
            self.dropped_events += 1;
            return;
        }
        self.events.push(Event::new(name, at, attributes, 0));
    }

    /// Links it to another span.
    pub(crate) fn link(&mut self, to: SpanContext, attributes: Vec<KeyValue>) {
        self.links.push(Link::new(to, attributes, 0));
    }

    /// Marks it failed.
    pub(crate) fn fail(&mut self, description: impl Into<Cow<'static, str>>) {
        self.status = Status::error(description);
    }

    /// Ends it at `end` (never before its start).
    pub(crate) fn end(self, end: SystemTime, scope: &InstrumentationScope) -> SpanData {
        SpanData {
            span_context: self.context,
            parent_span_id: self.parent,
            parent_span_is_remote: false,
            span_kind: self.kind,
            name: self.name,
            start_time: self.start,
            end_time: end.max(self.start),
            attributes: self.attributes,
            dropped_attributes_count: 0,
            events: events(self.events, self.dropped_events),
            links: links(self.links),
            status: self.status,
            instrumentation_scope: scope.clone(),
        }
    }
}

fn events(events: Vec<Event>, dropped_count: u32) -> SpanEvents {
    let mut out = SpanEvents::default();
    out.events = events;
    out.dropped_count = dropped_count;
    out
}

fn links(links: Vec<Link>) -> SpanLinks {
    let mut out = SpanLinks::default();
    out.links = links;
    out
}
