//! Certificates made at test time (rcgen): a CA, a server certificate for `127.0.0.1` and
//! `localhost`, and client certificates, written as PEM files into a temporary directory that
//! lives as long as the [`TestCerts`]. Shared by the etcd and NATS security tests.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA and the certificates it signed, as files.
pub(crate) struct TestCerts {
    dir: tempfile::TempDir,
}

impl TestCerts {
    /// Makes a CA, a server certificate (`server.pem`, `server-key.pem`) valid for
    /// `127.0.0.1` and `localhost` (server and client auth, so etcd members can also use it for
    /// peer TLS), and one client certificate per name in `clients` (`client-NAME.pem`,
    /// `client-NAME-key.pem`, common name `NAME`).
    pub(crate) fn make(clients: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.distinguished_name
            .push(DnType::CommonName, "quorate test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        write(dir.path(), "ca.pem", &ca_cert.pem());
        let issuer = Issuer::new(ca, ca_key);

        let leaf = |names: Vec<String>, cn: &str, file: &str| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = params.signed_by(&key, &issuer).expect("leaf certificate");
            write(dir.path(), &format!("{file}.pem"), &cert.pem());
            write(dir.path(), &format!("{file}-key.pem"), &key.serialize_pem());
        };
        leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "quorate test server",
            "server",
        );
        for name in clients {
            leaf(Vec::new(), name, &format!("client-{name}"));
        }
        Self { dir }
    }

    /// The CA certificate.
    pub(crate) fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The server certificate.
    pub(crate) fn server_cert(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    /// The server's private key.
    pub(crate) fn server_key(&self) -> PathBuf {
        self.dir.path().join("server-key.pem")
    }

    /// Client `name`'s certificate.
    pub(crate) fn client_cert(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("client-{name}.pem"))
    }

    /// Client `name`'s private key.
    pub(crate) fn client_key(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("client-{name}-key.pem"))
    }
}

fn write(dir: &Path, file: &str, pem: &str) {
    std::fs::write(dir.join(file), pem).expect("write a PEM file");
}
