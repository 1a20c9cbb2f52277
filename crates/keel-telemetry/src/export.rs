//! The OTLP/HTTP exporter: a batch of spans as one protobuf `ExportTraceServiceRequest`,
//! posted to `{endpoint}/v1/traces` with the workspace's reqwest (no second HTTP stack, no
//! gRPC). It implements the SDK's [`SpanExporter`], so any SDK processor could drive it too.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use prost::Message;

/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Posts spans to an OTLP/HTTP collector.
#[derive(Debug)]
pub struct OtlpHttpExporter {
    client: reqwest::Client,
    url: String,
    resource: ResourceAttributesWithSchema,
}

impl OtlpHttpExporter {
    /// An exporter to the collector at `endpoint` (its base address, e.g.
    /// `http://localhost:4318`; `/v1/traces` is added unless it is there), for the service
    /// named `service_name`.
    pub fn new(client: reqwest::Client, endpoint: &str, service_name: &str) -> Self {
        let resource = Resource::builder_empty()
            .with_service_name(service_name.to_string())
            .with_attributes([opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            )])
            .build();
        OtlpHttpExporter {
            client,
            url: traces_url(endpoint),
            resource: (&resource).into(),
        }
    }

    /// Where it posts.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// `{endpoint}/v1/traces`, as OpenTelemetry's own exporters derive it from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`; an endpoint that already ends so is kept.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

/// The protobuf body of one export.
pub fn encode(batch: Vec<SpanData>, resource: &ResourceAttributesWithSchema) -> Vec<u8> {
    ExportTraceServiceRequest {
        resource_spans: group_spans_by_resource_and_scope(batch, resource),
    }
    .encode_to_vec()
}

impl SpanExporter for OtlpHttpExporter {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let body = encode(batch, &self.resource);
        let request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .timeout(EXPORT_TIMEOUT)
            .body(body);
        let url = self.url.clone();
        async move {
            let response = request.send().await.map_err(|error| {
                OTelSdkError::InternalFailure(format!("cannot post to {url}: {error}"))
            })?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(OTelSdkError::InternalFailure(format!(
                    "{url} answered {status}"
                )))
            }
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
