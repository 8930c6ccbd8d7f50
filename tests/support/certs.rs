//! A test certificate authority (rcgen) issuing node certificates for the cluster transport's
//! mutual TLS, written as PEM files a node's `[cluster.tls]` settings point at.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The name every test node's certificate is valid for (`cluster.tls.peer_name`).
pub const PEER_NAME: &str = "convoke.cluster.test";

/// A certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
}

/// A node certificate and its key, PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

/// How a leaf differs from a good one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    None,
    /// Valid from 2020 to 2021.
    Expired,
    /// Issued for another name than [`PEER_NAME`].
    OtherName,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca { pem: cert.pem(), issuer: Issuer::new(params, key) }
    }

    /// A certificate for a node, allowed for both server and client authentication.
    pub fn leaf(&self, flaw: Flaw) -> Leaf {
        let name = if flaw == Flaw::OtherName { "other-app.cluster.test" } else { PEER_NAME };
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        if flaw == Flaw::Expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() }
    }
}

/// The three files of one node's TLS settings, in `dir`.
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl Files {
    /// Writes `leaf` and `ca_pem` into `dir` (created if missing).
    pub fn write(dir: &Path, leaf: &Leaf, ca_pem: &str) -> Files {
        std::fs::create_dir_all(dir).unwrap();
        let files =
            Files { cert: dir.join("tls.crt"), key: dir.join("tls.key"), ca: dir.join("ca.crt") };
        files.replace(leaf);
        std::fs::write(&files.ca, ca_pem).unwrap();
        files
    }

    /// Replaces the certificate and key as a Kubernetes Secret update does: each new file is
    /// written beside the old one and renamed over it, so a reader never sees half a file.
    pub fn replace(&self, leaf: &Leaf) {
        for (path, pem) in [(&self.key, &leaf.key_pem), (&self.cert, &leaf.cert_pem)] {
            let tmp = path.with_extension("new");
            std::fs::write(&tmp, pem).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
    }

    /// TLS settings with these files, for a transport started through the library.
    pub fn settings(&self) -> convoke::settings::ClusterTlsSettings {
        convoke::settings::ClusterTlsSettings {
            enabled: true,
            cert_path: self.cert.display().to_string(),
            key_path: self.key.display().to_string(),
            ca_path: self.ca.display().to_string(),
            peer_name: PEER_NAME.to_owned(),
            ..convoke::settings::ClusterTlsSettings::default()
        }
    }

    /// `--set` arguments turning TLS on with these files.
    pub fn sets(&self, reload_interval: &str) -> Vec<String> {
        vec![
            "cluster.tls.enabled=true".to_owned(),
            format!("cluster.tls.cert_path={:?}", self.cert.display().to_string()),
            format!("cluster.tls.key_path={:?}", self.key.display().to_string()),
            format!("cluster.tls.ca_path={:?}", self.ca.display().to_string()),
            format!("cluster.tls.peer_name={PEER_NAME:?}"),
            format!("cluster.tls.reload_interval={reload_interval:?}"),
        ]
    }
}
