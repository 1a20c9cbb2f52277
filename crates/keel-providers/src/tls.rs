//! TLS for the providers' HTTP clients: rustls with the platform's root certificates, set up as
//! reqwest would, except that the certificates are loaded when the first https connection needs
//! them rather than when a client is built. Loading them reads and parses every file under
//! `/etc/ssl/certs` (milliseconds at every start), which a run against a local `http://` model
//! never needs. One verifier serves every client of the process, so they are loaded once.

use std::sync::{Arc, LazyLock, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, Error, SignatureScheme};
use rustls_platform_verifier::Verifier;

/// The TLS set-up for a reqwest client (`ClientBuilder::tls_backend_preconfigured`): the
/// process's crypto provider, TLS 1.3 and 1.2, ALPN `h2` then `http/1.1` (what reqwest picks
/// for a client speaking both), and the platform's verifier, built when first used. `None`
/// when the crypto provider cannot do TLS 1.2 or 1.3: the client then sets up TLS its own way.
pub(crate) fn client_config() -> Option<ClientConfig> {
    static CONFIG: LazyLock<Option<ClientConfig>> = LazyLock::new(|| {
        crate::http::install_crypto_provider();
        let provider = CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let verifier = Arc::new(LazyVerifier {
            provider: provider.clone(),
            built: OnceLock::new(),
        });
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Some(config)
    });
    CONFIG.clone()
}

/// The platform's verifier (`rustls-platform-verifier`, what reqwest uses), built on the first
/// certificate to check. A failure to build it (no root certificates on the system) fails
/// every https handshake with its reason, as it failed building the client before.
#[derive(Debug)]
struct LazyVerifier {
    provider: Arc<CryptoProvider>,
    built: OnceLock<Result<Verifier, Error>>,
}

impl LazyVerifier {
    fn verifier(&self) -> Result<&Verifier, Error> {
        self.built
            .get_or_init(|| Verifier::new(self.provider.clone()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl ServerCertVerifier for LazyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.verifier()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verifier()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verifier()?.verify_tls13_signature(message, cert, dss)
    }

    /// What the built verifier offers; it offers the crypto provider's schemes, which are
    /// offered as well when it could not be built (the handshake then fails verifying).
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        match self.verifier() {
            Ok(verifier) => verifier.supported_verify_schemes(),
            Err(_) => self
                .provider
                .signature_verification_algorithms
                .supported_schemes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_offer_h2_and_http1_with_a_verifier_built_on_first_use() {
        let config = client_config().expect("ring does TLS 1.2 and 1.3");
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let lazy = LazyVerifier {
            provider: provider.clone(),
            built: OnceLock::new(),
        };
        assert!(
            lazy.built.get().is_none(),
            "nothing loaded before a handshake"
        );
        assert_eq!(
            lazy.supported_verify_schemes(),
            provider
                .signature_verification_algorithms
                .supported_schemes()
        );
        assert!(lazy.built.get().is_some(), "built by the first handshake");
    }
}
